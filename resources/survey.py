"""The survey: the embedded mock DR10 (DHS_SURVEY=mock) or a DR10 mirror, local or s3://."""


import os
import tempfile
from contextlib import contextmanager
from typing import Iterator

import dagster as dg
import pyarrow.fs as pafs

from darkhaloscope.constants import DR10_SWEEP_DIR as SWEEP_DIR
from darkhaloscope.errors import InputError
from darkhaloscope.lake import translate_storage_error, validate_partition_key
from darkhaloscope.survey.mock_paths import DEFAULT_MOCK_DIR, mock_survey_root


class SurveyResource(dg.ConfigurableResource):
    """``survey`` is ``mock`` or the root of a DR10 mirror laid out like the release
    (``south/sweep/10.1/sweep-*.fits``, ``south/coadd/...``); ``profile`` sizes the mock survey;
    ``mock_dir`` caches the generated mock survey files; ``mock_seed`` picks the mock realisation."""

    survey: str = "mock"
    profile: str = "demo"
    mock_dir: str = DEFAULT_MOCK_DIR
    mock_seed: int = 0
    s3_endpoint: str | None = None

    @property
    def is_mock(self) -> bool:
        return self.survey == "mock"

    def root(self) -> str:
        """Root of the DR10-like mirror; the mock survey is generated there on first use."""
        if not self.is_mock:
            return self.survey.rstrip("/")
        return str(self.mock_manifest().root)

    def mock_manifest(self):
        """The mock survey's manifest (``MockSurveyManifest``), generating the survey on first use."""
        from darkhaloscope.survey.mock_survey import MockSurveyConfig, generate_mock_survey

        if not self.is_mock:
            raise InputError(f"DHS_SURVEY={self.survey!r} is not the mock survey")
        root = mock_survey_root(self.mock_dir, self.profile, self.mock_seed)
        return generate_mock_survey(root, MockSurveyConfig(profile=self.profile, seed=self.mock_seed))

    def filesystem(self) -> tuple[pafs.FileSystem, str]:
        """(pyarrow filesystem, path without scheme) of the mirror root."""
        root = self.root()
        if root.startswith("s3://"):
            kwargs = {}
            if self.s3_endpoint:
                scheme, _, host = self.s3_endpoint.partition("://")
                kwargs = dict(endpoint_override=host or scheme, scheme=scheme if host else "https")
            return pafs.S3FileSystem(**kwargs), root[len("s3://") :]
        return pafs.LocalFileSystem(), root

    def sweep_files(self) -> list[str]:
        """Names of the survey's sweep files, sorted."""
        fs, root = self.filesystem()
        try:
            infos = fs.get_file_info(pafs.FileSelector(f"{root}/{SWEEP_DIR}", allow_not_found=True))
        except OSError as exc:
            raise translate_storage_error(exc, f"{self.root()}/{SWEEP_DIR}") from exc
        names = sorted(i.base_name for i in infos if i.type == pafs.FileType.File and i.base_name.startswith("sweep-"))
        if not names:
            raise InputError(f"no sweep files under {self.root()}/{SWEEP_DIR} (DHS_SURVEY={self.survey!r})")
        return names

    @contextmanager
    def local_sweep(self, name: str) -> Iterator[str]:
        """A local path to sweep file ``name`` (downloaded to a temporary file when the mirror is on S3)."""
        fs, root = self.filesystem()
        path = f"{root}/{SWEEP_DIR}/{validate_partition_key(name)}"
        if isinstance(fs, pafs.LocalFileSystem):
            yield path
            return
        with tempfile.TemporaryDirectory() as tmp:
            local = os.path.join(tmp, name)
            try:
                pafs.copy_files(path, local, source_filesystem=fs, destination_filesystem=pafs.LocalFileSystem())
            except OSError as exc:
                raise translate_storage_error(exc, f"{self.root()}/{SWEEP_DIR}/{name}") from exc
            yield local
