"""The one place a :class:`~lake_platform.lake.Lake` is built: from the storage settings
(``DHS_LAKE``, ``DHS_S3_ENDPOINT``) or from the values a caller was given (a resource's config, a
Pipes worker's context). The lake resource and its IO manager, the Pipes workers, the command line
and the alert sinks all open their lake here, so another storage backend behind the table protocol
(``darkhaloscope/storage.py``; docs/architecture.md, "Storage behind one seam") is chosen here.

It imports no Dagster, so the Pipes workers use it too.
"""

from __future__ import annotations

from lake_platform.lake import Lake
from table_registry import contract_of

from .settings import setting


def open_lake(uri: str | None = None, s3_endpoint: str | None = None, **s3_options) -> Lake:
    """The lake at ``uri`` (a local folder or ``s3://bucket/prefix``) with the S3 endpoint override
    ``s3_endpoint`` and ``s3_options`` (``s3_region``, ``s3_max_attempts``, timeouts in seconds:
    :class:`~lake_platform.lake.Lake`), writing each table's units and descriptions from its contract
    (``table_registry.contract_of``); without ``uri``, the lake of the settings: ``DHS_LAKE`` and,
    unless ``s3_endpoint`` is given, ``DHS_S3_ENDPOINT``."""
    if uri is None:
        uri, s3_endpoint = setting("DHS_LAKE"), s3_endpoint or setting("DHS_S3_ENDPOINT")
    s3_options.setdefault("s3_connect_timeout_s", float(setting("DHS_S3_CONNECT_TIMEOUT_S")))
    s3_options.setdefault("s3_request_timeout_s", float(setting("DHS_S3_REQUEST_TIMEOUT_S")))
    return Lake(uri, s3_endpoint=s3_endpoint, contracts=contract_of, **s3_options)
