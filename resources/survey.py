"""The survey: the embedded mock DR10 (DHS_SURVEY=mock) or a DR10 mirror, local or s3://."""


import dataclasses
import os
import tempfile
from contextlib import contextmanager
from typing import Iterator

import dagster as dg
import pyarrow.fs as pafs

from darkhaloscope.constants import DR10_SWEEP_DIR as SWEEP_DIR
from darkhaloscope.errors import InputError
from darkhaloscope.lake import translate_storage_error, validate_partition_key
from darkhaloscope.survey.location import SurveyLocation
from darkhaloscope.survey.mock_paths import DEFAULT_MOCK_DIR


class SurveyResource(dg.ConfigurableResource):
    """The fields of :class:`~darkhaloscope.survey.location.SurveyLocation`, as Dagster config."""

    survey: str = "mock"
    profile: str = "demo"
    mock_dir: str = DEFAULT_MOCK_DIR
    mock_seed: int = 0
    s3_endpoint: str | None = None

    def location(self) -> SurveyLocation:
        """The survey's settings as the library takes them, with local paths made absolute so that
        a process started elsewhere (a Spark executor, a Pipes subprocess) finds the same files."""
        loc = SurveyLocation(survey=self.survey, profile=self.profile, mock_dir=os.path.abspath(self.mock_dir),
                             mock_seed=self.mock_seed, s3_endpoint=self.s3_endpoint)
        local = not loc.is_mock and "://" not in loc.survey
        return dataclasses.replace(loc, survey=os.path.abspath(loc.survey)) if local else loc

    def root(self) -> str:
        """Root of the DR10-like mirror; the mock survey is generated there on first use."""
        return self.location().root()

    def mock_manifest(self):
        """The mock survey's manifest (``MockSurveyManifest``), generating the survey on first use."""
        return self.location().mock_manifest()

    def filesystem(self) -> tuple[pafs.FileSystem, str]:
        """(pyarrow filesystem, path without scheme) of the mirror root."""
        return self.location().filesystem()

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
