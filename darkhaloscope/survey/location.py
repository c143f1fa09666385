"""Where the survey is: the embedded mock survey (generated on first use) or a DR10 mirror, local or
on S3. Plain settings, so any process (the Dagster one, a Spark executor, a Pipes subprocess)
rebuilds the same filesystem from them."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow.fs as pafs

from ..errors import InputError
from .mock_paths import DEFAULT_MOCK_DIR, mock_survey_root


@dataclass(frozen=True)
class SurveyLocation:
    """``survey`` is ``mock`` or the root of a DR10 mirror laid out like the release
    (``south/sweep/10.1/sweep-*.fits``, ``south/coadd/...``), a folder or ``s3://bucket/prefix``;
    ``profile`` sizes the mock survey; ``mock_dir`` caches the generated mock survey files;
    ``mock_seed`` picks the mock realisation; ``s3_endpoint`` overrides the mirror's S3 endpoint."""

    survey: str = "mock"
    profile: str = "demo"
    mock_dir: str = DEFAULT_MOCK_DIR
    mock_seed: int = 0
    s3_endpoint: str | None = None

    @property
    def is_mock(self) -> bool:
        return self.survey == "mock"

    def origin(self) -> dict:
        """What the lake's catalogs come from, recorded with the sweep manifest: the mock survey's
        realisation (seed and profile) or the mirror's root (no credentials are part of it)."""
        if self.is_mock:
            return {"survey": "mock", "mock_seed": int(self.mock_seed), "profile": self.profile}
        return {"survey": self.survey.rstrip("/")}

    def root(self) -> str:
        """Root of the DR10-like mirror; the mock survey is generated there on first use."""
        if not self.is_mock:
            return self.survey.rstrip("/")
        return str(self.mock_manifest().root)

    def mock_manifest(self):
        """The mock survey's manifest (``MockSurveyManifest``), generating the survey on first use."""
        from .mock_survey import MockSurveyConfig, generate_mock_survey

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
