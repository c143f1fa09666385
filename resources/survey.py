"""The survey: the embedded mock DR10 (DHS_SURVEY=mock) or a DR10 mirror, local or s3://."""

import os
import tempfile
from contextlib import contextmanager
from typing import Iterator

import dagster as dg
import pyarrow.fs as pafs

from darkhaloscope.constants import DR10_SWEEP_DIR as SWEEP_DIR
from darkhaloscope.errors import InputError
from darkhaloscope.survey.location import SurveyLocation
from lake_platform.lake import translate_storage_error, validate_partition_key
from mock_survey.survey import MockSurvey, MockSurveyManifest

from .settings import default, setting


class SurveyResource(dg.ConfigurableResource):
    """``survey``: ``mock`` (the embedded mock survey) or the root of a DR10 mirror, a folder or
    ``s3://bucket/prefix`` (``s3_endpoint`` overrides its S3 endpoint); for the mock survey,
    ``profile`` and ``mock_seed`` pick the realisation, ``mock_sweep_files``, ``mock_rows_per_file``
    and ``mock_hidden_lenses`` its sizes (None: the profile's), and ``mock_dir`` caches its files;
    ``s3_anonymous``: read a mirror in a public bucket without credentials (unsigned requests);
    ``known_lens_theta_e``: a local table of measured Einstein radii of known lenses by lenscat name
    (DHS_KNOWN_LENS_THETA_E; None: none), read by ``real_lens_validation`` on a real survey."""

    survey: str = default("DHS_SURVEY")
    profile: str = default("DHS_PROFILE")
    mock_dir: str = default("DHS_MOCK_DIR")
    mock_seed: int = int(default("DHS_MOCK_SEED"))
    mock_sweep_files: int | None = None
    mock_rows_per_file: int | None = None
    mock_hidden_lenses: int | None = None
    s3_endpoint: str | None = None
    s3_anonymous: bool = False
    known_lens_theta_e: str | None = None

    @property
    def is_mock(self) -> bool:
        return self.survey == "mock"

    def mock(self) -> MockSurvey:
        """The mock survey's realisation (InputError when the survey is a mirror)."""
        if not self.is_mock:
            raise InputError(f"DHS_SURVEY={self.survey!r} is not the mock survey")
        return MockSurvey(
            profile=self.profile,
            cache_dir=os.path.abspath(self.mock_dir),
            seed=self.mock_seed,
            n_sweep_files=self.mock_sweep_files,
            n_rows_per_file=self.mock_rows_per_file,
            n_hidden_lenses=self.mock_hidden_lenses,
        )

    def location(self) -> SurveyLocation:
        """The survey as the DR10 mirror the library reads, with local paths made absolute so that
        a process started elsewhere (a Spark executor, a Pipes subprocess) finds the same files;
        the mock survey is generated on first use."""
        if self.is_mock:
            return self.mock().location()
        root = self.survey if "://" in self.survey else os.path.abspath(self.survey)
        return SurveyLocation(
            root=root,
            s3_endpoint=self.s3_endpoint,
            s3_anonymous=self.s3_anonymous,
            s3_connect_timeout_s=float(setting("DHS_S3_CONNECT_TIMEOUT_S")),
            s3_request_timeout_s=float(setting("DHS_S3_REQUEST_TIMEOUT_S")),
        )

    def origin(self) -> dict:
        """What the lake's catalogs come from: the mock survey's realisation or the mirror's root."""
        return self.mock().origin() if self.is_mock else self.location().origin()

    def root(self) -> str:
        """Root of the DR10-like mirror; the mock survey is generated there on first use."""
        return self.location().root

    def mock_manifest(self) -> MockSurveyManifest:
        """The mock survey's manifest, generating the survey on first use."""
        return self.mock().manifest()

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
        with self.local_file(f"{SWEEP_DIR}/{validate_partition_key(name)}") as path:
            if path is None:
                raise InputError(f"no sweep file {name} under {self.root()}/{SWEEP_DIR}")
            yield path

    @contextmanager
    def local_file(self, relpath: str) -> Iterator[str | None]:
        """A local path to the mirror's file ``relpath`` (downloaded to a temporary file when the
        mirror is on S3), or None when the mirror has no such file."""
        fs, root = self.filesystem()
        path = f"{root}/{relpath}"
        try:
            info = fs.get_file_info(path)
        except OSError as exc:
            raise translate_storage_error(exc, f"{self.root()}/{relpath}") from exc
        if info.type != pafs.FileType.File:
            yield None
            return
        if isinstance(fs, pafs.LocalFileSystem):
            yield path
            return
        with tempfile.TemporaryDirectory() as tmp:
            local = os.path.join(tmp, os.path.basename(relpath))
            try:
                pafs.copy_files(path, local, source_filesystem=fs, destination_filesystem=pafs.LocalFileSystem())
            except OSError as exc:
                raise translate_storage_error(exc, f"{self.root()}/{relpath}") from exc
            yield local
