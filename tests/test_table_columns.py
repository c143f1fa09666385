"""Every table's columns are declared once, in its contract, with type, unit and description, and
the Dagster UI shows the same descriptions (the asset's column schema before any run, the
materialization's after one)."""

from __future__ import annotations

import dagster as dg
import pyarrow as pa
import pytest

from io_managers.parquet import column_schema
from lake_platform.contracts import Column, Contract, schema_problems
from table_registry import ALERTS, REALISM_ABLATION, TABLES
from table_registry.columns import from_schema


def check_every_published_column_is_declared(lake_root) -> None:
    """Every table published under ``lake_root`` (a local lake) holds only columns its contract
    declares, with the declared types: the reference pages and the UI describe every column there
    is (the end-to-end test runs it on the demo's lake)."""
    import pathlib

    import pyarrow.parquet as pq

    for table in TABLES:
        files = sorted((pathlib.Path(lake_root) / table.group / table.name).rglob("*.parquet"))
        if table in (ALERTS, REALISM_ABLATION) and not files:
            continue  # alerts: written when one fires, which a healthy run never does; the ablation: not in the demo
        assert files, f"{table.path}: nothing published"
        # partition columns live in the folder names only (``dim=key``): the readers add those the
        # contract declares
        schema = pq.read_schema(files[0])
        folder = files[0].relative_to(pathlib.Path(lake_root) / table.group / table.name).parts[:-1]
        for dim in (seg.split("=", 1)[0] for seg in folder if "=" in seg):
            if dim in table.contract.types and dim not in schema.names:
                schema = schema.append(pa.field(dim, table.contract.types[dim]))
        undeclared = [n for n in schema.names if n not in table.contract.types]
        assert undeclared == [], f"{table.path}: columns not declared in its contract: {undeclared}"
        assert schema_problems(schema, table.contract) == [], table.path


def test_every_table_declares_every_column_with_a_description():
    for table in TABLES:
        assert table.contract is not None, f"{table.path} has no contract"
        for c in table.contract.columns:
            assert isinstance(c, Column) and c.description.strip(), (table.path, c.name)
            assert isinstance(c.type, pa.DataType), (table.path, c.name)


def test_a_contract_refuses_columns_without_descriptions_and_rules_on_undeclared_columns():
    with pytest.raises(TypeError, match="Column"):
        Contract(table="t", columns={"ra": pa.float64()})
    with pytest.raises(ValueError, match="description"):
        Column("ra", pa.float64(), "deg", " ")
    with pytest.raises(ValueError, match=r"rules name columns it does not declare: \['dec'\]"):
        Contract(table="t", columns=(Column("ra", pa.float64(), "deg", "right ascension"),), key=("dec",))


def test_a_library_schema_column_described_nowhere_fails_at_import():
    with pytest.raises(KeyError, match="no_such_column"):
        from_schema(pa.schema([("no_such_column", pa.int64())]))
    with pytest.raises(ValueError, match="lacks"):
        from_schema(pa.schema([("ra", pa.float64())]), {"dec": ("deg", "declination")})


def test_optional_columns_are_typed_when_present_and_other_data_models_types_accepted():
    sweeps = next(t for t in TABLES if t.name == "sweeps").contract
    assert not sweeps.column("flux_i").required and sweeps.column("flux_z").required
    schema = pa.schema([(c.name, c.type) for c in sweeps.columns if c.required])
    assert schema_problems(schema, sweeps) == []
    assert schema_problems(schema.append(pa.field("flux_i", pa.float64())), sweeps) == [
        "sweeps: column 'flux_i' is double, expected float"
    ]
    # a real DR8 sweep stores GAIA_ASTROMETRIC_PARAMS_SOLVED signed, DR10's model unsigned
    dr8 = schema.append(pa.field("gaia_astrometric_params_solved", pa.int8()))
    assert schema_problems(dr8, sweeps) == []


def test_the_ui_shows_each_column_with_its_description_and_unit():
    from definitions import defs

    graph = defs.resolve_asset_graph()
    for table in TABLES:
        node = graph.get(dg.AssetKey(list(table.key)))
        shown = node.metadata["dagster/column_schema"].schema.columns
        assert [c.name for c in shown] == [c.name for c in table.contract.columns], table.path
        for col, declared in zip(shown, table.contract.columns):
            assert declared.description in col.description, (table.path, col.name)
            if declared.unit:
                assert col.description.endswith(f"[{declared.unit}]"), (table.path, col.name)
    # a materialization shows the published schema's columns, described where declared
    sweeps = next(t for t in TABLES if t.name == "sweeps").contract
    md = column_schema(sweeps, pa.schema([("ra", pa.float64()), ("extra", pa.int8())])).schema.columns
    assert md[0].description == "right ascension (ICRS, J2000) [deg]" and md[1].description is None
