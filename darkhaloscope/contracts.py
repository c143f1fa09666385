"""Table contracts: one place that says what every lake table must hold.

A contract is a set of required columns with Arrow types, the key columns that must be unique
and value-range rules. ``schema_problems`` checks a schema (from a Parquet footer, no data read);
``value_problems`` checks keys and ranges with DuckDB over the table's Arrow dataset.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds

from .catalog.crossmatch import POSITIVE_SCHEMA
from .catalog.cuts import NEGATIVE_SCHEMA
from .catalog.sampling import CATALOG_SCHEMA
from .stamps import STAMP_SHAPE, tensor_type
from .survey.known_lenses import KNOWN_LENS_SCHEMA


@dataclass(frozen=True)
class Range:
    """Values of ``column`` must lie in [lo, hi] (None = unbounded); nulls allowed only if ``nullable``."""

    column: str
    lo: float | None = None
    hi: float | None = None
    nullable: bool = False
    lo_inclusive: bool = True
    hi_inclusive: bool = True


@dataclass(frozen=True)
class Contract:
    """Columns (name -> Arrow type), unique key columns and value ranges of one table.

    ``optional``: columns that may be absent (an older data model lacks them) but must have their
    type when present."""

    table: str
    columns: dict[str, pa.DataType]
    key: tuple[str, ...] = ()
    ranges: tuple[Range, ...] = field(default_factory=tuple)
    allowed_values: dict[str, tuple[str, ...]] = field(default_factory=dict)
    optional: frozenset = frozenset()


def _f(*names: str, t: pa.DataType = pa.float32()) -> dict[str, pa.DataType]:
    return {n: t for n in names}


_BANDS = ("g", "r", "z")
_PHOT = {
    **_f(*(f"flux_{b}" for b in _BANDS)),
    **{f"nobs_{b}": pa.int16() for b in _BANDS},
    **_f(*(f"psfsize_{b}" for b in _BANDS)),
    **_f(*(f"psfdepth_{b}" for b in _BANDS)),
    **_f(*(f"galdepth_{b}" for b in _BANDS)),
    **_f("ebv", "shape_r", "shape_e1", "shape_e2", "sersic"),
    "maskbits": pa.int32(),
}

SWEEPS = Contract(
    table="sweeps",
    columns={
        "release": pa.int16(),
        "brickid": pa.int32(),
        "brickname": pa.string(),
        "objid": pa.int32(),
        "type": pa.string(),
        "ra": pa.float64(),
        "dec": pa.float64(),
        **_PHOT,
        "healpix_128": pa.int64(),
        "healpix_fine": pa.int64(),
        "sweep_file": pa.string(),
        "row_index": pa.int64(),
        "object_id": pa.int64(),
    },
    key=("release", "brickid", "objid"),
    ranges=(Range("ra", 0.0, 360.0, hi_inclusive=False), Range("dec", -90.0, 90.0), Range("row_index", 0, None)),
    # DR8 sweeps have no PSFSIZE, SHAPE_R/E1/E2 (SHAPEEXP_*/SHAPEDEV_* instead) or SERSIC (science.md §2)
    optional=frozenset({*(f"psfsize_{b}" for b in _BANDS), "shape_r", "shape_e1", "shape_e2", "sersic"}),
)

def _columns(schema: pa.Schema) -> dict[str, pa.DataType]:
    return {f.name: f.type for f in schema}


_SPLITS = ("train", "val", "test")

KNOWN_LENSES = Contract(
    table="known_lenses",
    columns=_columns(KNOWN_LENS_SCHEMA),
    key=("lens_id",),
    ranges=(Range("ra", 0.0, 360.0, hi_inclusive=False), Range("dec", -90.0, 90.0), Range("z_lens", 0.0, 10.0, nullable=True)),
)

NEGATIVES = Contract(
    table="negatives",
    columns=_columns(NEGATIVE_SCHEMA),
    key=("object_id",),
    ranges=(Range("dec", -90.0, 90.0), Range("ra", 0.0, 360.0, hi_inclusive=False)),
    allowed_values={"pool": ("N1", "N2"), "split": _SPLITS},
)

POSITIVES = Contract(
    table="positives",
    columns=_columns(POSITIVE_SCHEMA),
    key=("object_id",),
    ranges=(Range("separation_arcsec", 0.0, 5.0),),
    allowed_values={"tier": ("A", "B"), "split": _SPLITS},
)

TRAINING_CATALOG = Contract(
    table="training_catalog",
    columns=_columns(CATALOG_SCHEMA),
    key=("object_id",),
    allowed_values={"split": _SPLITS},
)

CUTOUTS = Contract(
    table="cutouts",
    columns={
        "object_id": pa.int64(),
        "ra": pa.float64(),
        "dec": pa.float64(),
        "label": pa.int8(),
        "split": pa.string(),
        "image": tensor_type(STAMP_SHAPE),
        "invvar": tensor_type(STAMP_SHAPE),
    },
    key=("object_id",),
    allowed_values={"split": _SPLITS},
)

CONTRACTS = {c.table: c for c in (SWEEPS, KNOWN_LENSES, NEGATIVES, POSITIVES, TRAINING_CATALOG, CUTOUTS)}


def schema_problems(schema: pa.Schema, contract: Contract) -> list[str]:
    """Missing columns and type mismatches of ``schema`` against ``contract`` (empty list = conforms)."""
    problems = []
    for name, typ in contract.columns.items():
        idx = schema.get_field_index(name)
        if idx < 0:
            if name not in contract.optional:
                problems.append(f"{contract.table}: missing column {name!r} ({typ})")
        elif not schema.field(idx).type.equals(typ):
            problems.append(f"{contract.table}: column {name!r} is {schema.field(idx).type}, expected {typ}")
    return problems


def value_problems(dataset: ds.Dataset | pa.Table, contract: Contract, limit: int = 5) -> list[str]:
    """Key-uniqueness, range and allowed-value violations, computed with DuckDB over Arrow."""
    con = duckdb.connect(":memory:")
    con.register("t", dataset)
    problems = []
    if contract.key:
        keys = ", ".join(contract.key)
        dup = con.execute(f"SELECT {keys}, count(*) AS n FROM t GROUP BY {keys} HAVING n > 1 LIMIT {limit}").fetchall()
        if dup:
            problems.append(f"{contract.table}: duplicate key ({keys}): {dup}")
    for r in contract.ranges:
        conds = []
        if r.lo is not None:
            conds.append(f"{r.column} {'<' if r.lo_inclusive else '<='} {r.lo}")
        if r.hi is not None:
            conds.append(f"{r.column} {'>' if r.hi_inclusive else '>='} {r.hi}")
        conds.append(f"isnan({r.column})" if _is_float(dataset, r.column) else "false")
        if not r.nullable:
            conds.append(f"{r.column} IS NULL")
        where = " OR ".join(conds)
        n = con.execute(f"SELECT count(*) FROM t WHERE {where}").fetchone()[0]
        if n:
            sample = con.execute(f"SELECT {r.column} FROM t WHERE {where} LIMIT {limit}").fetchall()
            problems.append(f"{contract.table}: {n} rows with {r.column} outside [{r.lo}, {r.hi}], e.g. {sample}")
    for col, allowed in contract.allowed_values.items():
        vals = ", ".join(f"'{v}'" for v in allowed)
        bad = con.execute(f"SELECT DISTINCT {col} FROM t WHERE {col} IS NULL OR {col} NOT IN ({vals}) LIMIT {limit}").fetchall()
        if bad:
            problems.append(f"{contract.table}: column {col!r} has values {bad} outside {allowed}")
    con.close()
    return problems


def _is_float(dataset, column: str) -> bool:
    return pa.types.is_floating(dataset.schema.field(column).type)
