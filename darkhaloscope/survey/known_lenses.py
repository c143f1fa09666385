"""Known strong lenses from the ``lenscat`` community compilation (its bundled CSV; no network).

Columns of ``load_known_lenses()``:

| column | type | meaning |
|---|---|---|
| name | string | lenscat name (e.g. ``J0011-0845``) |
| ra, dec | float64 | J2000 position, degrees |
| z_lens | float64 | lens redshift; null when lenscat has none or a non-numeric entry |
| grade | string | lenscat ``grading``: ``confident`` or ``probable`` |
| kind | string | lenscat ``type``: ``galaxy``, ``group`` or ``cluster`` (lens scale) |
| reference | string | lenscat ``ref`` (URL or citation of the discovery paper) |

lenscat's ``zlens`` mixes numbers, ``not measured``, ``-``, flags like ``0.3?`` and several
values joined by ``|`` (one per contributing catalog). The first ``|``-separated value is used
when it is a plain decimal number; anything else (uncertain ``?``/``*`` values, words, ``nan``)
becomes null rather than a guess.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from ..errors import InputError

KNOWN_LENS_SCHEMA = pa.schema(
    [
        pa.field("lens_id", pa.string(), nullable=False),
        pa.field("name", pa.string(), nullable=False),
        pa.field("ra", pa.float64(), nullable=False),
        pa.field("dec", pa.float64(), nullable=False),
        pa.field("z_lens", pa.float64()),
        pa.field("grade", pa.string()),
        pa.field("kind", pa.string()),
        pa.field("reference", pa.string()),
    ]
)

_LENSCAT_COLUMNS = {
    "name": "name",
    "RA [deg]": "ra",
    "DEC [deg]": "dec",
    "zlens": "z_lens",
    "grading": "grade",
    "type": "kind",
    "ref": "reference",
}
_PLAIN_NUMBER = r"^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$"


def lenscat_catalog_path() -> str:
    """Path of lenscat's bundled ``data/catalog.csv`` (found without importing lenscat)."""
    spec = importlib.util.find_spec("lenscat")
    if spec is None or not spec.submodule_search_locations:
        raise InputError("the lenscat package is not installed; it provides the known-lens catalog")
    path = os.path.join(list(spec.submodule_search_locations)[0], "data", "catalog.csv")
    if not os.path.exists(path):
        raise InputError(f"lenscat catalog file not found at {path}")
    return path


def _parse_z(raw: pa.ChunkedArray) -> pa.ChunkedArray:
    first = pc.utf8_trim_whitespace(pc.list_element(pc.split_pattern(raw, "|"), 0))
    numeric = pc.match_substring_regex(first, _PLAIN_NUMBER)
    as_float = pc.cast(pc.if_else(numeric, first, pa.scalar(None, pa.string())), pa.float64())
    return as_float


def load_known_lenses(path: str | None = None) -> pa.Table:
    """The lenscat catalog as a table with ``KNOWN_LENS_SCHEMA`` (see the module doc), validated.

    ``path`` overrides the bundled CSV (same columns as lenscat's ``catalog.csv``).
    """
    path = path or lenscat_catalog_path()
    convert = pacsv.ConvertOptions(
        column_types={c: pa.string() for c in _LENSCAT_COLUMNS if c not in ("RA [deg]", "DEC [deg]")}
    )
    try:
        raw = pacsv.read_csv(path, convert_options=convert)
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(f"{path}: cannot read the lens catalog: {exc}") from exc
    missing = [c for c in _LENSCAT_COLUMNS if c not in raw.column_names]
    if missing:
        raise InputError(f"{path}: lens catalog lacks column(s) {', '.join(missing)}")
    cols = {}
    for src, dst in _LENSCAT_COLUMNS.items():
        col = raw.column(src)
        if dst in ("ra", "dec"):
            try:
                col = pc.cast(col, pa.float64())
            except pa.ArrowInvalid as exc:
                raise InputError(f"{path}: column {src!r} is not numeric: {exc}") from exc
        elif dst == "z_lens":
            col = _parse_z(col)
        else:
            col = pc.utf8_trim_whitespace(col)
        cols[dst] = col
    table = pa.table(cols)
    validate_known_lenses(table, where=path)
    return with_lens_ids(table).cast(KNOWN_LENS_SCHEMA)


def with_lens_ids(table: pa.Table) -> pa.Table:
    """Add ``lens_id`` = name@ra,dec (deg, 5 decimals ~ 0.04″) and drop exact repeats of it.

    lenscat names are not unique (numbered or '-' names repeat across source papers), so the
    key is the name together with the position; a row repeating the same name at the same
    position is the same lens listed twice, and only its first listing is kept.
    """
    ra = table.column("ra").to_numpy()
    dec = table.column("dec").to_numpy()
    names = table.column("name").to_pylist()
    ids = [f"{n}@{r:.5f}{d:+.5f}" for n, r, d in zip(names, ra, dec)]
    _, first = np.unique(np.asarray(ids, dtype=object), return_index=True)
    keep = np.sort(first)
    return table.add_column(0, "lens_id", pa.array(ids, pa.string())).take(pa.array(keep))


def validate_known_lenses(table: pa.Table, where: str = "known lenses") -> None:
    """Raise InputError naming the lens when a name is missing or a coordinate is bad.

    Rules: non-empty ``name``; finite ``ra`` in [0, 360) and ``dec`` in [-90, 90] degrees;
    ``z_lens`` null or in [0, 10).
    """
    for col in ("name", "ra", "dec"):
        if col not in table.column_names:
            raise InputError(f"{where}: no column {col!r}")
    name_col = table.column("name")
    empty = pc.or_kleene(pc.is_null(name_col), pc.equal(pc.utf8_length(name_col), 0))
    if pc.any(empty).as_py():
        i = int(np.flatnonzero(empty.to_numpy(zero_copy_only=False))[0])
        raise InputError(f"{where}: lens in row {i} has no name")
    ra = table.column("ra").to_numpy(zero_copy_only=False).astype(np.float64)
    dec = table.column("dec").to_numpy(zero_copy_only=False).astype(np.float64)
    bad = ~np.isfinite(ra) | ~np.isfinite(dec) | (ra < 0) | (ra >= 360) | (dec < -90) | (dec > 90)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        names = name_col.to_pylist()
        raise InputError(
            f"{where}: lens {names[i]!r} (row {i}) has invalid coordinates ra={float(ra[i])!r}, dec={float(dec[i])!r} deg"
        )
    if "z_lens" in table.column_names:
        z = table.column("z_lens").to_numpy(zero_copy_only=False).astype(np.float64)
        badz = ~np.isnan(z) & ((z < 0) | (z >= 10))
        if badz.any():
            i = int(np.flatnonzero(badz)[0])
            raise InputError(f"{where}: lens {name_col[i].as_py()!r} has z_lens={z[i]!r} outside [0, 10)")
