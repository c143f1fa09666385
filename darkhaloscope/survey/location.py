"""Where a DR10 mirror is: a local folder or ``s3://bucket/prefix``, laid out like the release.
Plain settings, so any process (the Dagster one, a Spark executor, a Pipes subprocess) rebuilds
the same filesystem from them."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow.fs as pafs

from .. import s3_retries


@dataclass(frozen=True)
class SurveyLocation:
    """``root``: the root of a DR10 mirror laid out like the release (``south/sweep/10.1/sweep-*.fits``,
    ``south/coadd/...``), a folder or ``s3://bucket/prefix``; ``s3_endpoint`` overrides the S3
    endpoint of a mirror on S3 (any S3-compatible server); ``s3_anonymous``: read a mirror in a
    public bucket with unsigned requests (no credentials needed or sent), as the public copies of
    the Legacy Surveys release are read. ``s3_connect_timeout_s`` and ``s3_request_timeout_s``
    (seconds, each attempt of the SDK; None: the SDK's defaults) bound every wait on a mirror on S3."""

    root: str = "."
    s3_endpoint: str | None = None
    s3_anonymous: bool = False
    s3_connect_timeout_s: float | None = None
    s3_request_timeout_s: float | None = None

    def origin(self) -> dict:
        """What the lake's catalogs come from, recorded with the sweep manifest: the mirror's root
        (no credentials are part of it)."""
        return {"survey": self.root.rstrip("/")}

    def filesystem(self) -> tuple[pafs.FileSystem, str]:
        """(pyarrow filesystem, path without scheme) of the mirror root."""
        root = self.root.rstrip("/")
        if root.startswith("s3://"):
            kwargs = {}
            if self.s3_endpoint:
                scheme, _, host = self.s3_endpoint.partition("://")
                kwargs = dict(endpoint_override=host or scheme, scheme=scheme if host else "https")
            if self.s3_connect_timeout_s is not None:
                kwargs["connect_timeout"] = self.s3_connect_timeout_s
            if self.s3_request_timeout_s is not None:
                kwargs["request_timeout"] = self.s3_request_timeout_s
            s3_retries.start()  # before S3 support initialises, so the SDK's retries are counted
            return pafs.S3FileSystem(anonymous=self.s3_anonymous, **kwargs), root[len("s3://") :]
        return pafs.LocalFileSystem(), root
