"""Sweep reader: real DR8 sweep and DR9 Tractor files, synthetic bad inputs, Parquet ingest."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from astropy.io import fits

from darkhaloscope.errors import InputError
from darkhaloscope.ids import object_id
from darkhaloscope.survey import sweep_model as sm
from darkhaloscope.survey.sweeps import (
    SweepBox,
    ingest_sweep,
    iter_sweep_batches,
    parse_sweep_filename,
    read_sweep,
    sweep_filename,
)
from lake_platform.lake import Lake
from tests.conftest import require_real_file
from tests.support.sweep_rows import dr10_rows

# --------------------------------------------------------------------------- helpers


def _write(path: Path, rows: np.ndarray, drop: tuple[str, ...] = (), tforms=sm.DR10_SWEEP_COLUMNS) -> Path:
    cols = [fits.Column(name=n, format=t, array=rows[n]) for n, t in tforms if n not in drop and t != "L"]
    path.parent.mkdir(parents=True, exist_ok=True)
    fits.HDUList([fits.PrimaryHDU(), fits.BinTableHDU.from_columns(cols)]).writeto(path)
    return path


def _err(path, match: str, **kw):
    with pytest.raises(InputError, match=match) as ei:
        read_sweep(path, **kw)
    assert Path(path).name in str(ei.value)
    return ei


# --------------------------------------------------------------------------- names


def test_parse_and_format_sweep_filename():
    box = parse_sweep_filename("/x/sweep-320m005-330p000.fits")
    assert box == SweepBox(320.0, 330.0, -5.0, 0.0)
    assert sweep_filename(box) == "sweep-320m005-330p000.fits"
    assert parse_sweep_filename("sweep-000m010-005m005.fits.gz") == SweepBox(0, 5, -10, -5)
    assert sweep_filename(SweepBox(355, 360, 25, 30), gz=True) == "sweep-355p025-360p030.fits.gz"
    for bad in (
        "sweep-320m05-330p000.fits",
        "tractor-1054p567.fits",
        "sweep-330m005-320p000.fits",
        "sweep-320m005-330p000.fit",
    ):
        with pytest.raises(InputError, match="sweep"):
            parse_sweep_filename(bad)


# --------------------------------------------------------------------------- real files


def test_real_dr8_sweep():
    path = require_real_file("sweep-320m005-330p000.fits")
    raw = fits.getdata(path, 1)
    t = read_sweep(path)
    assert t.num_rows == 6
    assert t.schema.metadata[b"dhs.data_model"] == b"dr8-sweep"
    assert t.schema.field("maskbits").type == pa.int32()
    assert t.column("maskbits").to_pylist() == [int(v) for v in raw["MASKBITS"]]
    assert t.column("type").to_pylist() == [s.strip() for s in raw["TYPE"]]
    assert all(len(s) == 3 for s in t.column("type").to_pylist())
    assert t.schema.field("dchisq").type == pa.list_(pa.float32(), 5)
    np.testing.assert_array_equal(np.stack(t.column("dchisq").to_numpy(zero_copy_only=False)), raw["DCHISQ"])
    assert t.column("row_index").to_pylist() == list(range(6))
    assert set(t.column("sweep_file").to_pylist()) == {path.name}
    np.testing.assert_array_equal(
        t.column("object_id").to_numpy(), object_id(raw["RELEASE"], raw["BRICKID"], raw["OBJID"])
    )
    # The data model module describes the real DR8 layout column for column.
    h = fits.open(path)
    assert [(c.name, c.format) for c in h[1].columns] == list(sm.DR8_SWEEP_COLUMNS)
    # The brick grid reproduces the file's BRICKID/BRICKNAME.
    bid, bname, _, _ = sm.bricks_for(raw["RA"], raw["DEC"])
    np.testing.assert_array_equal(bid, raw["BRICKID"])
    assert [b.decode() for b in bname] == list(raw["BRICKNAME"])


def test_real_dr9_tractor():
    path = require_real_file("tractor-1054p567.fits")
    raw = fits.getdata(path, 1)
    t = read_sweep(path)
    assert t.schema.metadata[b"dhs.data_model"] == b"dr9-tractor"
    for b in "grz":
        assert t.column(f"flux_{b}").to_pylist() == [float(v) for v in raw[f"FLUX_{b.upper()}"]]
    assert t.column("brick_primary").to_pylist() == [bool(v) for v in raw["BRICK_PRIMARY"]]
    assert t.schema.field("lc_flux_w1").type == pa.list_(pa.float32(), 15)
    bid, bname, _, _ = sm.bricks_for(raw["RA"], raw["DEC"])
    assert int(bid[0]) == int(raw["BRICKID"][0]) and bname[0].decode() == raw["BRICKNAME"][0]


# --------------------------------------------------------------------------- DR10 layout


def test_dr10_roundtrip_batches_columns_and_gz(tmp_path):
    rows = dr10_rows(50)
    path = _write(tmp_path / "sweep-030m005-035p000.fits", rows)
    t = read_sweep(path)
    assert t.schema.metadata[b"dhs.data_model"] == b"dr10-sweep"
    assert t.column("maskbits").to_pylist() == [int(v) for v in rows["MASKBITS"]]
    assert t.column("type").to_pylist() == ["REX"] * 50
    assert t.column("nobs_g").type == pa.int16()
    assert t.column("healpix_128").type == pa.int64() and t.column("healpix_fine").type == pa.int64()
    # Batching does not change the result.
    small = pa.Table.from_batches(list(iter_sweep_batches(path, batch_rows=7)))
    assert small.equals(t)
    # Column selection keeps identity + derived columns.
    sel = read_sweep(path, columns=["flux_g", "type"])
    assert {"flux_g", "type", "ra", "dec", "release", "brickid", "objid", "object_id", "row_index"} <= set(
        sel.column_names
    )
    assert "flux_r" not in sel.column_names
    with pytest.raises(InputError, match="flux_q"):
        read_sweep(path, columns=["flux_q"])
    gz = tmp_path / "sweep-030m005-035p000.fits.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    tgz = read_sweep(gz)
    assert tgz.drop(["sweep_file"]).equals(t.drop(["sweep_file"]))


# --------------------------------------------------------------------------- bad input


def test_empty_and_truncated_files(tmp_path):
    good = _write(tmp_path / "sweep-030m005-035p000.fits", dr10_rows(20))
    empty = tmp_path / "sweep-035m005-040p000.fits"
    empty.write_bytes(b"")
    _err(empty, "empty")
    data = good.read_bytes()
    cut = tmp_path / "cut" / good.name
    cut.parent.mkdir()
    cut.write_bytes(data[: len(data) - 4000])
    _err(cut, "truncated")
    head = tmp_path / "head" / good.name
    head.parent.mkdir()
    head.write_bytes(data[:1000])
    _err(head, "header|truncated")


def test_missing_required_column(tmp_path):
    path = _write(tmp_path / "sweep-030m005-035p000.fits", dr10_rows(5), drop=("FLUX_Z",))
    _err(path, "FLUX_Z")


def test_wrong_or_missing_hdu(tmp_path):
    img = tmp_path / "sweep-030m005-035p000.fits"
    fits.HDUList([fits.PrimaryHDU(), fits.ImageHDU(np.zeros((4, 4), np.float32))]).writeto(img)
    _err(img, "not a binary table")
    only = tmp_path / "only" / "sweep-030m005-035p000.fits"
    only.parent.mkdir()
    fits.PrimaryHDU().writeto(only)
    _err(only, "HDU 1 is missing")


def test_nan_coordinates_name_the_row(tmp_path):
    rows = dr10_rows(10)
    rows["DEC"][7] = np.nan
    path = _write(tmp_path / "sweep-030m005-035p000.fits", rows)
    _err(path, "row 7")


def test_pre_dr4_schema(tmp_path):
    n = 3
    cols = [
        fits.Column(name="BRICKID", format="J", array=np.ones(n)),
        fits.Column(name="OBJID", format="J", array=np.arange(n)),
        fits.Column(name="TYPE", format="4A", array=np.array([b"PSF "] * n)),
        fits.Column(name="RA", format="D", array=np.full(n, 31.0)),
        fits.Column(name="DEC", format="D", array=np.full(n, -1.0)),
        fits.Column(name="DECAM_FLUX", format="6E", array=np.zeros((n, 6))),
    ]
    path = tmp_path / "sweep-030m005-035p000.fits"
    fits.HDUList([fits.PrimaryHDU(), fits.BinTableHDU.from_columns(cols)]).writeto(path)
    _err(path, "pre-DR4.*RELEASE")


def test_rows_outside_box_and_duplicates(tmp_path):
    rows = dr10_rows(10)
    rows["RA"][4] = 36.0
    path = _write(tmp_path / "sweep-030m005-035p000.fits", rows)
    ei = _err(path, "row 4")
    assert "[30, 35) x [-5, 0)" in str(ei.value)
    # The same rows are fine in a Tractor file (no box) ...
    tractor = _write(tmp_path / "tractor-0300m010.fits", rows)
    assert read_sweep(tractor).num_rows == 10
    # ... and a duplicated (release, brickid, objid) is refused even across batches.
    dup = dr10_rows(10)
    dup["OBJID"][9] = dup["OBJID"][2]
    dup["BRICKID"][9] = dup["BRICKID"][2]
    dpath = _write(tmp_path / "dup" / "sweep-030m005-035p000.fits", dup)
    with pytest.raises(InputError, match=r"duplicate .*rows 2 and 9"):
        list(iter_sweep_batches(dpath, batch_rows=4))


# --------------------------------------------------------------------------- Parquet


def test_ingest_sweep_atomic_and_filesystem(tmp_path):
    src = _write(tmp_path / "sweep-030m005-035p000.fits", dr10_rows(30))
    lake = Lake(str(tmp_path / "lake"))
    info = ingest_sweep(src, lake.table("survey", "sweeps"), batch_rows=8)
    assert info["rows"] == 30 and info["data_model"] == "dr10-sweep"
    part = {"sweep_file": src.name}
    t = lake.read_table("survey", "sweeps", partition=part)
    assert t.schema.metadata[b"dhs.data_model"] == b"dr10-sweep"
    assert t.equals(read_sweep(src).replace_schema_metadata(t.schema.metadata))
    dest = Path(lake.partition_path("survey", "sweeps", part)) / "part-0.parquet"
    before = dest.read_bytes()
    # A failing source leaves the previous partition intact and no staging file behind.
    rows = dr10_rows(30)
    rows["RA"][25] = 99.0
    bad = _write(tmp_path / "bad" / "sweep-030m005-035p000.fits", rows)
    with pytest.raises(InputError, match="row 25"):
        ingest_sweep(bad, lake.table("survey", "sweeps"), batch_rows=8)
    assert dest.read_bytes() == before
    assert sorted(p.name for p in dest.parent.iterdir()) == ["part-0.parquet"]
    # Read through a pyarrow filesystem (rooted at tmp_path): the same bytes.
    fs = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())
    other = Lake(str(tmp_path / "lake2"))
    assert ingest_sweep(src.name, other.table("survey", "sweeps"), filesystem=fs, batch_rows=8)["rows"] == 30
    assert (Path(other.partition_path("survey", "sweeps", part)) / "part-0.parquet").read_bytes() == before
    # An empty table is refused by name.
    empty = _write(tmp_path / "empty" / "sweep-030m005-035p000.fits", dr10_rows(0))
    with pytest.raises(InputError, match="no rows"):
        ingest_sweep(empty, lake.table("survey", "sweeps"))
