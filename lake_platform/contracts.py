"""Table contracts: what a lake table must hold, and the checks that tell.

A contract is the table's columns, each declared once with its Arrow type, unit and description
(:class:`Column`), the key columns that must be unique and value-range rules (each table's own
contract is declared once, in ``table_registry``; the reference pages and the Dagster UI's column
schema show the same descriptions). ``schema_problems`` checks a schema (from a Parquet footer, no data read);
``value_problems`` checks keys and ranges with DuckDB over the table's Arrow dataset.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.dataset as ds

from darkhaloscope import sql


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
class Column:
    """One column of a table: its Arrow ``type``, its ``unit`` (``""`` for a count, a flag, an
    identifier or a dimensionless ratio) and what it holds. ``required=False``: the column may be
    absent (an older data model or another configuration lacks it) but has its type when present;
    ``other_types``: types an older data model stores it as, accepted as well."""

    name: str
    type: pa.DataType
    unit: str
    description: str
    required: bool = True
    other_types: tuple[pa.DataType, ...] = ()

    def __post_init__(self) -> None:
        if not self.description.strip():
            raise ValueError(f"column {self.name!r}: a column needs a description")


@dataclass(frozen=True)
class Contract:
    """The columns (:class:`Column`, in table order), unique key columns and value ranges of one table.

    Every column a key, a range or an allowed-value rule names is one of ``columns``."""

    table: str
    columns: tuple[Column, ...]
    key: tuple[str, ...] = ()
    ranges: tuple[Range, ...] = field(default_factory=tuple)
    allowed_values: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not all(isinstance(c, Column) for c in self.columns):
            raise TypeError(
                f"contract {self.table!r}: columns must be Column(name, type, unit, description) entries, "
                f"got {type(self.columns).__name__}"
            )
        object.__setattr__(self, "columns", tuple(self.columns))
        names = [c.name for c in self.columns]
        doubled = sorted({n for n in names if names.count(n) > 1})
        if doubled:
            raise ValueError(f"contract {self.table!r}: columns declared twice: {doubled}")
        ruled = {*self.key, *(r.column for r in self.ranges), *self.allowed_values}
        unknown = sorted(ruled - set(names))
        if unknown:
            raise ValueError(f"contract {self.table!r}: rules name columns it does not declare: {unknown}")

    @property
    def types(self) -> dict[str, pa.DataType]:
        """Column name -> Arrow type, in table order."""
        return {c.name: c.type for c in self.columns}

    @property
    def optional(self) -> frozenset:
        """Names of the columns that may be absent."""
        return frozenset(c.name for c in self.columns if not c.required)

    def column(self, name: str) -> Column:
        """The column ``name``; KeyError naming the table otherwise."""
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(f"contract {self.table!r} declares no column {name!r}")


def schema_problems(schema: pa.Schema, contract: Contract) -> list[str]:
    """Missing columns and type mismatches of ``schema`` against ``contract`` (empty list = conforms)."""
    problems = []
    for col in contract.columns:
        name, typ = col.name, col.type
        idx = schema.get_field_index(name)
        if idx < 0:
            if col.required:
                problems.append(f"{contract.table}: missing column {name!r} ({typ})")
        elif not any(schema.field(idx).type.equals(t) for t in (typ, *col.other_types)):
            problems.append(f"{contract.table}: column {name!r} is {schema.field(idx).type}, expected {typ}")
    return problems


def _q(name: str) -> str:
    """A column name as a quoted SQL identifier (names such as ``by`` are SQL keywords)."""
    return '"' + name.replace('"', '""') + '"'


def value_problems(dataset: ds.Dataset | pa.Table, contract: Contract, limit: int = 5) -> list[str]:
    """Key-uniqueness, range and allowed-value violations, computed with DuckDB over Arrow."""
    with sql.cursor() as con:
        con.register("t", dataset)
        problems = []
        if contract.key:
            keys = ", ".join(_q(k) for k in contract.key)
            dup = con.execute(
                f"SELECT {keys}, count(*) AS n FROM t GROUP BY {keys} HAVING n > 1 LIMIT {limit}"
            ).fetchall()
            if dup:
                problems.append(f"{contract.table}: duplicate key ({', '.join(contract.key)}): {dup}")
        wheres = []
        for r in contract.ranges:
            col = _q(r.column)
            conds = []
            if r.lo is not None:
                conds.append(f"{col} {'<' if r.lo_inclusive else '<='} {r.lo}")
            if r.hi is not None:
                conds.append(f"{col} {'>' if r.hi_inclusive else '>='} {r.hi}")
            conds.append(f"isnan({col})" if _is_float(dataset, r.column) else "false")
            if not r.nullable:
                conds.append(f"{col} IS NULL")
            wheres.append(" OR ".join(conds))
        # every range counted in one scan: a query per range costs more than the check on a small partition
        counts = (
            con.execute("SELECT " + ", ".join(f"count(*) FILTER (WHERE {w})" for w in wheres) + " FROM t").fetchone()
            if wheres
            else ()
        )
        for r, where, n in zip(contract.ranges, wheres, counts):
            if n:
                sample = con.execute(f"SELECT {_q(r.column)} FROM t WHERE {where} LIMIT {limit}").fetchall()
                problems.append(f"{contract.table}: {n} rows with {r.column} outside [{r.lo}, {r.hi}], e.g. {sample}")
        for column, allowed in contract.allowed_values.items():
            vals = ", ".join(f"'{v}'" for v in allowed)
            outside = f"{_q(column)} IS NULL OR {_q(column)} NOT IN ({vals})"
            bad = con.execute(f"SELECT DISTINCT {_q(column)} FROM t WHERE {outside} LIMIT {limit}").fetchall()
            if bad:
                problems.append(f"{contract.table}: column {column!r} has values {bad} outside {allowed}")
    return problems


def _is_float(dataset, column: str) -> bool:
    return pa.types.is_floating(dataset.schema.field(column).type)


#: Schema metadata key of astropy's table header (the YAML astropy's Parquet reader takes each
#: column's unit and description from: ``astropy.io.misc.parquet``; astropy writes it the same way).
ASTROPY_HEADER_KEY = b"table_meta_yaml"
#: Field metadata keys of a column's unit and description (read by any Arrow reader).
UNIT_KEY, DESCRIPTION_KEY = b"unit", b"description"
_ECSV_TYPES = {
    **{f"int{n}": f"int{n}" for n in (8, 16, 32, 64)},
    **{f"uint{n}": f"uint{n}" for n in (8, 16, 32, 64)},
    "halffloat": "float16",
    "float": "float32",
    "double": "float64",
    "bool": "bool",
    "string": "string",
    "large_string": "string",
}


def described_schema(schema: pa.Schema, contract: Contract | None) -> pa.Schema:
    """``schema`` with each column's unit and description in its field metadata (``unit``,
    ``description``: from ``contract`` where it declares the column, else what the field already
    carries) and, in the schema metadata, astropy's table header (:data:`ASTROPY_HEADER_KEY`) with
    the same units and descriptions for every column, so that ``astropy.table.Table.read`` of the
    Parquet file gets ``Column.unit`` and ``Column.description``. Types, names and order are
    unchanged."""
    import yaml

    declared = {c.name: c for c in contract.columns} if contract is not None else {}
    fields, header = [], []
    for f in schema:
        meta = dict(f.metadata or {})
        column = declared.get(f.name)
        if column is not None:
            meta[UNIT_KEY] = column.unit.encode()
            meta[DESCRIPTION_KEY] = column.description.encode()
        fields.append(f.with_metadata(meta) if meta else f)
        entry = {"name": f.name}
        datatype = _ECSV_TYPES.get(str(f.type))
        if datatype is not None:
            entry["datatype"] = datatype
        unit, description = meta.get(UNIT_KEY, b"").decode(), meta.get(DESCRIPTION_KEY, b"").decode()
        if unit:
            entry["unit"] = unit
        if description:
            entry["description"] = description
        header.append(entry)
    text = yaml.safe_dump({"datatype": header}, allow_unicode=True, sort_keys=False, width=1000)
    return pa.schema(fields, metadata={**(schema.metadata or {}), ASTROPY_HEADER_KEY: text.encode()})
