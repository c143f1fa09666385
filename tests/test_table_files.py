"""The lake's Parquet files as other tools read them: units and descriptions in every field's
metadata and in astropy's table header (``Table.read`` gets ``Column.unit``), a table folder that
``pandas.read_parquet`` and ``pyarrow.dataset`` open as they are (the partition column once, its
files beside the folder), and ``dhs export`` to FITS, ECSV, VOTable and Parquet through astropy's
writers, round-tripped with units and descriptions."""

from __future__ import annotations

import warnings

import astropy.units as u
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from astropy.table import Table

from darkhaloscope.errors import InputError
from lake_platform.contracts import ASTROPY_HEADER_KEY
from lake_platform.lake import Lake
from table_registry import SWEEPS, TABLES, contract_of
from tests.test_catalog_cuts import rows

SWEEP_A, SWEEP_B = "sweep-150p000-155p005.fits", "sweep-155p000-160p005.fits"


def _lake(tmp_path) -> Lake:
    lake = Lake(str(tmp_path / "lake"), contracts=contract_of)
    for name in (SWEEP_A, SWEEP_B):
        lake.write_table(*SWEEPS.key, rows(4, sweep_file=[name] * 4), partition={"sweep_file": name})
    return lake


def test_every_declared_unit_is_one_astropy_reads():
    units = {c.unit for t in TABLES if t.contract is not None for c in t.contract.columns}
    for unit in sorted(units):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # an unrecognised unit warns before it becomes UnrecognizedUnit
            assert not isinstance(u.Unit(unit, parse_strict="raise"), u.UnrecognizedUnit), unit


def test_parquet_files_carry_units_and_descriptions_that_astropy_reads(tmp_path):
    lake = _lake(tmp_path)
    path = lake.part_uris(*SWEEPS.key)[0].removeprefix("file://")
    schema = pa.parquet.read_schema(path)
    flux = schema.field("flux_r").metadata
    assert flux[b"unit"] == b"nanomaggy" and flux[b"description"] == b"model flux in r"
    assert ASTROPY_HEADER_KEY in schema.metadata
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # string lengths are recorded, units all recognised
        table = Table.read(path)
    assert table["flux_r"].unit == u.nanomaggy and table["ra"].unit == u.deg
    assert table["shape_r"].unit == u.arcsec and table["psfdepth_r"].unit == u.nanomaggy**-2
    assert table["ra"].description == "right ascension (ICRS, J2000)"
    assert table["nobs_r"].unit is None and table["objid"].description.startswith("object number")
    assert "sweep_file" not in table.colnames  # a partition column lives in the folder names


def test_a_table_folder_opens_in_pandas_and_pyarrow_with_the_partition_column_once(tmp_path):
    lake = _lake(tmp_path)
    folder = lake.table_path(*SWEEPS.key)
    lake.write_bytes(*SWEEPS.key, "summary.png", b"\x89PNG", partition={"sweep_file": SWEEP_A})
    frame = pd.read_parquet(folder)
    assert len(frame) == 8 and sorted(frame["sweep_file"].astype(str).unique()) == [SWEEP_A, SWEEP_B]
    assert list(frame.columns).count("sweep_file") == 1
    dataset = ds.dataset(folder, partitioning="hive")
    assert dataset.schema.field("sweep_file").type == pa.string() and dataset.count_rows() == 8
    import duckdb

    counted = duckdb.sql(
        "select count(*), count(distinct sweep_file) "
        f"from read_parquet('{folder}/**/*.parquet', hive_partitioning=true)"
    ).fetchall()
    assert counted == [(8, 2)]
    # the lake's own readers give the writer's rows back: the column in its place, as written
    written = rows(4, sweep_file=[SWEEP_A] * 4)
    part = lake.read_table(*SWEEPS.key, partition={"sweep_file": SWEEP_A})
    assert part.column_names == written.column_names
    assert part.column("sweep_file").to_pylist() == [SWEEP_A] * 4
    assert lake.read_table(*SWEEPS.key).column_names == written.column_names
    assert lake.read_table(*SWEEPS.key, columns=["sweep_file"]).num_rows == 8


def test_a_lake_written_before_partition_columns_moved_reads_whole(tmp_path):
    lake = _lake(tmp_path)
    old = rows(4, sweep_file=["sweep-160p000-165p005.fits"] * 4)
    folder = lake.partition_path(*SWEEPS.key, {"sweep_file": "sweep-160p000-165p005.fits"})
    import os

    os.makedirs(folder)
    pa.parquet.write_table(old, f"{folder}/part-0.parquet")  # the column inside, as lakes held it
    assert lake.verify(*SWEEPS.key, adopt=True) == []  # and without a manifest, as they were written
    table = lake.read_table(*SWEEPS.key)
    assert table.num_rows == 12 and table.column("sweep_file").null_count == 0
    assert sorted(set(table.column("sweep_file").to_pylist())) == [SWEEP_A, SWEEP_B, "sweep-160p000-165p005.fits"]


def test_a_row_in_the_wrong_partition_is_refused_and_nothing_is_written(tmp_path):
    lake = _lake(tmp_path)
    before = lake.read_table(*SWEEPS.key, partition={"sweep_file": SWEEP_B})
    with pytest.raises(InputError, match=f"sweep_file='{SWEEP_A}', but the partition is sweep_file='{SWEEP_B}'"):
        lake.write_table(*SWEEPS.key, rows(2, sweep_file=[SWEEP_B, SWEEP_A]), partition={"sweep_file": SWEEP_B})
    assert lake.read_table(*SWEEPS.key, partition={"sweep_file": SWEEP_B}).equals(before)


def test_units_survive_a_table_without_a_contract(tmp_path):
    lake = Lake(str(tmp_path / "lake"), contracts=contract_of)
    field = pa.field("theta", pa.float64(), metadata={"unit": "arcsec", "description": "an angle"})
    lake.write_table("scratch", "angles", pa.table({"theta": np.arange(3.0)}, schema=pa.schema([field])))
    table = Table.read(lake.part_uris("scratch", "angles")[0].removeprefix("file://"))
    assert table["theta"].unit == u.arcsec and table["theta"].description == "an angle"


@pytest.mark.parametrize("fmt", ["fits", "ecsv", "votable", "parquet"])
def test_export_round_trips_through_astropy_with_units_and_descriptions(tmp_path, fmt):
    from darkhaloscope.stamps import to_tensor_array
    from lake_platform.export import export_table, read_export

    lake = _lake(tmp_path)
    stamps = np.arange(2 * 3 * 5 * 5, dtype=np.float32).reshape(2, 3, 5, 5)
    lake.write_table(
        "imaging",
        "cutouts",
        pa.table(
            {
                "object_id": pa.array([1, 2], pa.int64()),
                "image": to_tensor_array(stamps),
                "brickname": pa.array(["0001p000", None]),
            }
        ),
        partition={"sweep_file": SWEEP_A},
    )
    out = tmp_path / f"sweeps.{fmt}"
    done = export_table(lake, "sweeps", fmt, str(out))
    assert done["rows"] == 8 and out.is_file() and not list(tmp_path.glob(".dhs-export-*"))
    table = read_export(str(out), fmt)
    assert len(table) == 8 and sorted(set(table["sweep_file"])) == [SWEEP_A, SWEEP_B]
    assert table["flux_r"].unit == u.nanomaggy and table["ra"].unit == u.deg
    assert table["ra"].description == "right ascension (ICRS, J2000)"
    assert table["sweep_file"].description  # the partition column keeps its contract's description
    assert np.allclose(table["ra"], lake.read_table(*SWEEPS.key).column("ra").to_numpy())
    if fmt != "parquet":  # astropy's Parquet writer has no masked strings
        stamps_out = tmp_path / f"cutouts.{fmt}"
        export_table(lake, "imaging/cutouts", fmt, str(stamps_out))
        cut = read_export(str(stamps_out), fmt)
        assert np.array_equal(np.asarray(cut["image"]), stamps) and cut["image"].unit == u.nanomaggy / u.pix
        if fmt == "votable":  # a VOTable char field has no null: an empty string
            assert list(np.ma.filled(cut["brickname"], "")) == ["0001p000", ""]
        else:
            assert list(np.ma.getmaskarray(cut["brickname"])) == [False, True]


def test_export_names_a_missing_table_or_column(tmp_path):
    from lake_platform.export import export_table

    lake = _lake(tmp_path)
    with pytest.raises(InputError, match="no published table named 'nope'"):
        export_table(lake, "nope", "fits", str(tmp_path / "x.fits"))
    with pytest.raises(InputError, match=r"no column\(s\) \['flux_q'\]"):
        export_table(lake, "sweeps", "fits", str(tmp_path / "x.fits"), columns=["ra", "flux_q"])
    with pytest.raises(InputError, match="export format 'csv'"):
        export_table(lake, "sweeps", "csv", str(tmp_path / "x.csv"))
    assert not list(tmp_path.glob("x.*"))


def test_dhs_export_writes_the_file_and_refuses_bad_arguments(tmp_path, monkeypatch, capsys):
    from dhs.main import main
    from lake_platform.export import read_export

    lake = _lake(tmp_path)
    monkeypatch.setenv("DHS_LAKE", lake.uri)
    out = tmp_path / "sweeps.ecsv"
    assert main(["export", "sweeps", "--format", "ecsv", "--out", str(out), "--columns", "ra,dec,flux_r"]) == 0
    assert f"wrote {out}: 8 rows, 3 columns (ecsv)" in capsys.readouterr().out
    assert read_export(str(out), "ecsv").colnames == ["ra", "dec", "flux_r"]
    assert main(["export", "no_such_table", "--format", "fits", "--out", str(tmp_path / "x.fits")]) == 2
    assert "no published table named 'no_such_table'" in capsys.readouterr().err
