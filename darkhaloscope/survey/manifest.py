"""The manifest of a survey's sweep files: one row per file with its sky box and size."""

from __future__ import annotations

import json

import pyarrow as pa

from .sweeps import parse_sweep_filename

MANIFEST_SCHEMA = pa.schema(
    [
        pa.field("sweep_file", pa.string(), nullable=False),
        pa.field("ra_min", pa.float64()),
        pa.field("ra_max", pa.float64()),
        pa.field("dec_min", pa.float64()),
        pa.field("dec_max", pa.float64()),
        pa.field("size_bytes", pa.int64()),
    ]
)


#: Schema metadata key of the manifest's origin (:meth:`SurveyLocation.origin`, JSON).
ORIGIN_KEY = b"dhs.survey_origin"


def sweep_manifest(names: list[str], sizes: list[int | None], origin: dict | None = None) -> pa.Table:
    """Rows of ``MANIFEST_SCHEMA`` for sweep files ``names`` (their sizes in bytes), with the survey's
    ``origin`` (which mock realisation, or which mirror) in the schema metadata; InputError for a
    name that is not a sweep file name."""
    boxes = [parse_sweep_filename(n) for n in names]
    table = pa.table(
        {
            "sweep_file": names,
            "ra_min": [b.ra_min for b in boxes],
            "ra_max": [b.ra_max for b in boxes],
            "dec_min": [b.dec_min for b in boxes],
            "dec_max": [b.dec_max for b in boxes],
            "size_bytes": pa.array(sizes, pa.int64()),
        },
        schema=MANIFEST_SCHEMA,
    )
    return (
        table
        if origin is None
        else table.replace_schema_metadata({ORIGIN_KEY: json.dumps(origin, sort_keys=True).encode()})
    )


def survey_origin(schema: pa.Schema) -> dict | None:
    """The origin a sweep manifest's ``schema`` records, or None for a manifest written before it was recorded."""
    raw = (schema.metadata or {}).get(ORIGIN_KEY)
    return None if raw is None else json.loads(raw.decode())
