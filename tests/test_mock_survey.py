"""Embedded mock survey: exact DR10 layout, determinism, boxes, known lenses and truth."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from astropy.io import fits

from darkhaloscope.errors import InputError
from darkhaloscope.survey import sweep_model as sm
from darkhaloscope.survey.sweeps import ingest_sweep, parse_sweep_filename, read_sweep
from lake_platform.lake import Lake
from mock_survey.conditions import EXTINCTION
from mock_survey.lenses import KNOWN_LENS_TRUTH_SCHEMA, known_lenses_in_footprint
from mock_survey.survey import MockSurveyConfig, block_box, generate_mock_survey

SMALL = MockSurveyConfig(profile="demo", n_rows_per_file=3000, chunk_rows=1000, n_hidden_lenses=4)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    a = tmp_path_factory.mktemp("mock_a")
    b = tmp_path_factory.mktemp("mock_b")
    return generate_mock_survey(a, SMALL), generate_mock_survey(b, SMALL)


def test_layout_and_determinism(two_runs, tmp_path):
    ma, mb = two_runs
    assert [p.name for p in ma.sweep_files] == ["sweep-030m005-035p000.fits", "sweep-035m005-040p000.fits"]
    assert all(p.parent.as_posix().endswith("south/sweep/10.1") for p in ma.sweep_files)
    assert ma.truth_path.as_posix().endswith("truth/known_lens_truth.parquet")
    for pa_, pb_ in zip(ma.sweep_files + (ma.truth_path,), mb.sweep_files + (mb.truth_path,)):
        assert pa_.read_bytes() == pb_.read_bytes()
    # Same bytes after ingest too.
    outs = []
    for i, p in enumerate((ma.sweep_files[0], mb.sweep_files[0])):
        info = ingest_sweep(p, Lake(str(tmp_path / f"lake{i}")).table("survey", "sweeps"))
        outs.append(Path(info["uri"]).read_bytes())
    assert outs[0] == outs[1]


def test_idempotent_and_seed_sensitive(two_runs, tmp_path):
    ma, _ = two_runs
    mtimes = [p.stat().st_mtime_ns for p in ma.sweep_files]
    again = generate_mock_survey(ma.root, SMALL)
    assert again.digest == ma.digest
    assert [p.stat().st_mtime_ns for p in ma.sweep_files] == mtimes
    other = generate_mock_survey(
        tmp_path,
        MockSurveyConfig(
            profile="demo", n_rows_per_file=3000, chunk_rows=1000, seed=1, blocks=((30, -5),), n_hidden_lenses=1
        ),
    )
    assert other.sweep_files[0].read_bytes() != ma.sweep_files[0].read_bytes()
    with pytest.raises(InputError, match="block"):
        MockSurveyConfig(blocks=((31, -5),)).resolved()


def test_exact_dr10_data_model(two_runs):
    ma, _ = two_runs
    for path in ma.sweep_files:
        with fits.open(path) as h:
            assert [(c.name, c.format) for c in h[1].columns] == list(sm.DR10_SWEEP_COLUMNS)
            assert h[1].data.dtype == sm.DR10_SWEEP_DTYPE
            assert h[1].header["NAXIS2"] == 3000
            assert h[1].columns["MASKBITS"].format == "J" and h[1].columns["TYPE"].format == "3A"
        t = read_sweep(path)
        assert t.schema.metadata[b"dhs.data_model"] == b"dr10-sweep"
        # DCHISQ columns are PSF, REX, DEV, EXP, SER: the fitted type's model fits best
        d = fits.getdata(path, 1)
        fitted = d["TYPE"] != "DUP"
        best = np.array(["PSF", "REX", "DEV", "EXP", "SER"])[d["DCHISQ"][fitted].argmax(axis=1)]
        assert (best == d["TYPE"][fitted]).all()


def test_rows_in_box_keys_and_bricks(two_runs):
    ma, _ = two_runs
    # Bricks straddle the RA = 35 deg file edge: keys must stay unique across files.
    ids = np.concatenate([read_sweep(p, columns=["type"]).column("object_id").to_numpy() for p in ma.sweep_files])
    assert len(np.unique(ids)) == len(ids)
    for path in ma.sweep_files:
        box = parse_sweep_filename(path.name)
        d = fits.getdata(path, 1)
        assert box.contains(d["RA"], d["DEC"]).all()
        bid, bname, _, _ = sm.bricks_for(d["RA"], d["DEC"])
        np.testing.assert_array_equal(bid, d["BRICKID"])
        np.testing.assert_array_equal(bname, d["BRICKNAME"].astype("S8"))
        keys = np.stack([d["RELEASE"], d["BRICKID"], d["OBJID"]]).T
        assert len(np.unique(keys, axis=0)) == len(d)
        assert set(np.unique(d["RELEASE"])) <= {10000, 10002}


def test_population_realism(two_runs):
    ma, _ = two_runs
    d = fits.getdata(ma.sweep_files[0], 1)
    types = d["TYPE"]
    # Type mix of the field population (the small test files are dense in known lenses).
    lens_ids = set(pq.read_table(ma.truth_path).column("object_id").to_pylist())
    oid = (d["RELEASE"].astype(np.int64) << 44) | (d["BRICKID"].astype(np.int64) << 20) | d["OBJID"]
    field = ~np.isin(oid, list(lens_ids))
    frac = {t: float(np.mean(types[field] == t)) for t in ("PSF", "REX", "EXP", "DEV", "SER")}
    assert (
        0.35 < frac["PSF"] < 0.6
        and 0.25 < frac["REX"] < 0.5
        and frac["EXP"] > frac["DEV"] > 0.01
        and frac["SER"] > 0.01
    )
    psf = types == "PSF"
    assert np.all(d["SHAPE_R"][psf] == 0) and np.all(d["SERSIC"][psf] == 0)
    assert np.all(d["SERSIC"][types == "DEV"] == 4) and np.all(d["SERSIC"][types == "EXP"] == 1)
    ser = d["SERSIC"][types == "SER"]
    assert ser.min() >= 0.5 and ser.max() <= 6.0
    assert np.all(d["PSFSIZE_G"] > d["PSFSIZE_R"]) and np.all(d["PSFSIZE_R"] > d["PSFSIZE_Z"])
    assert 1.0 <= np.median(d["PSFSIZE_Z"]) and np.median(d["PSFSIZE_G"]) <= 1.8
    nobs = d["NOBS_Z"]
    assert 0.02 < np.mean(nobs < 3) < 0.3 and np.mean((nobs >= 2) & (nobs <= 10)) > 0.85
    for band, target in (("G", 24.5), ("R", 23.9), ("Z", 23.0)):
        depth = 22.5 - 2.5 * np.log10(5 / np.sqrt(d[f"PSFDEPTH_{band}"]))
        assert abs(np.median(depth) - target) < 0.3
    np.testing.assert_allclose(d["MW_TRANSMISSION_G"], 10 ** (-0.4 * EXTINCTION["G"] * d["EBV"]), rtol=1e-5)
    # Ellipticals are redder than discs (g-r from the noisy fluxes of bright sources).
    bright = d["FLUX_R"] > 10
    gr = -2.5 * np.log10(np.clip(d["FLUX_G"], 1e-3, None) / d["FLUX_R"].clip(1e-3))
    assert np.median(gr[bright & (types == "DEV")]) > np.median(gr[bright & (types == "EXP")]) + 0.3
    mb = d["MASKBITS"]
    assert (mb & 0x2).any() and (mb & 0x800).any() and (mb & 0x20).any()
    # forced to PSF inside BRIGHT; known lens galaxies keep their type (placed like SGA galaxies)
    assert np.all(types[((mb & 0x2) > 0) & field] != "REX")
    assert ((mb & 0x20) > 0).tolist() == (d["ALLMASK_G"] != 0).tolist()


def test_known_lenses_in_catalog_and_truth(two_runs):
    ma, _ = two_runs
    truth = pq.read_table(ma.truth_path)
    assert truth.schema.equals(KNOWN_LENS_TRUTH_SCHEMA)
    expected = known_lenses_in_footprint(ma.footprint)
    assert truth.num_rows == expected.num_rows == ma.n_known_lenses > 100
    assert sorted(truth.column("name").to_pylist()) == sorted(expected.column("name").to_pylist())
    cat = pa.concat_tables([read_sweep(p, columns=["type", "flux_z"]) for p in ma.sweep_files])
    idx = pc.index_in(truth.column("object_id"), value_set=cat.column("object_id"))
    assert idx.null_count == 0
    rows = cat.take(idx)
    np.testing.assert_array_equal(rows.column("ra").to_numpy(), truth.column("ra").to_numpy())
    np.testing.assert_array_equal(rows.column("dec").to_numpy(), truth.column("dec").to_numpy())
    assert rows.column("type").to_pylist() == truth.column("lens_type").to_pylist()
    zmag = 22.5 - 2.5 * np.log10(rows.column("flux_z").to_numpy())
    assert np.all((zmag > 16.8) & (zmag < 20.3))  # photometric noise scatters across z = 20
    te = truth.column("theta_e_arcsec").to_numpy()
    assert te.min() >= 0.8 and te.max() <= 2.5
    zl, zs = truth.column("z_lens").to_numpy(), truth.column("z_source").to_numpy()
    assert np.all(zs > zl) and zs.max() <= 3.0 and np.isfinite(zl).all()
    sm_r = truth.column("source_mag_r").to_numpy()
    assert sm_r.min() >= 22.5 and sm_r.max() <= 24.0
    for box in ma.footprint:
        assert box in (block_box((30, -5)), block_box((35, -5)))


def test_survey_sizes_come_from_the_settings_and_never_share_a_folder(tmp_path):
    from mock_survey.survey import MockSurvey, survey_blocks

    blocks = survey_blocks(300)
    assert blocks[:2] == ((30, -5), (35, -5)) and len(set(blocks)) == 300
    assert all(-18 < dec and dec + 5 < 32 and 0 <= ra < 360 for ra, dec in blocks)
    with pytest.raises(InputError, match="1 to 648 sweep files"):
        survey_blocks(0)
    default = MockSurvey(cache_dir=str(tmp_path))
    small = MockSurvey(cache_dir=str(tmp_path), n_sweep_files=3, n_rows_per_file=500, n_hidden_lenses=0)
    assert small.config().resolved().blocks == blocks[:3] and small.config().resolved().n_rows_per_file == 500
    assert default.origin() == {"survey": "mock", "mock_seed": 0, "profile": "demo"}
    assert small.origin() == {**default.origin(), "n_sweep_files": 3, "n_rows_per_file": 500, "n_hidden_lenses": 0}
