"""Redshift companions: the photo-z sweep and SDSS-matched spectra readers on files written with
astropy in DR10's data models, their bad-input rules, the mock's companions and the σ relations."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from astropy.io import fits

from darkhaloscope.errors import InputError
from darkhaloscope.lensing.hosts import calibrate_sigma_relation, hyde_bernardi_log_sigma
from darkhaloscope.survey.redshifts import (
    DR10_PHOTO_Z_DIR,
    DR10_SPECOBJ_SDSS,
    DR10_SPECOBJ_SURVEY,
    PZ_COLUMNS,
    photo_z_missing,
    pz_filename,
    read_photo_z,
    read_spectra,
)
from darkhaloscope.survey.sweeps import read_sweep
from mock_survey.survey import MockSurveyConfig, generate_mock_survey


def _keys(n: int) -> pa.Table:
    return pa.table(
        {
            "release": pa.array(np.full(n, 10000, np.int16)),
            "brickid": pa.array(np.arange(n, dtype=np.int32) // 3 + 100),
            "objid": pa.array(np.arange(n, dtype=np.int32) % 3),
            "row_index": pa.array(np.arange(n, dtype=np.int64)),
        }
    )


def _write_pz(path, keys: pa.Table, zmed, zspec):
    n = keys.num_rows
    cols = [
        fits.Column("RELEASE", "I", array=keys.column("release").to_numpy()),
        fits.Column("BRICKID", "J", array=keys.column("brickid").to_numpy()),
        fits.Column("OBJID", "J", array=keys.column("objid").to_numpy()),
        fits.Column("Z_SPEC", "E", array=np.asarray(zspec, np.float32)),
        fits.Column("SURVEY", "12A", array=np.full(n, "SDSS", "S12")),
    ]
    for c in PZ_COLUMNS:
        cols.append(fits.Column(c, "E", array=np.asarray(zmed, np.float32)))
    cols += [fits.Column("TRAINING", "L", array=np.zeros(n, bool)), fits.Column("KFOLD", "I", array=np.zeros(n))]
    fits.HDUList([fits.PrimaryHDU(), fits.BinTableHDU.from_columns(cols, nrows=n)]).writeto(path)


def test_pz_reader_on_the_data_model(tmp_path):
    keys = _keys(6)
    path = tmp_path / "sweep-030m005-035p000-pz.fits"
    _write_pz(path, keys, [0.3, -99, 0.5, np.nan, 0.7, 0.1], [0.31, -99, 0.0, -1.0, np.nan, 0.12])
    t = read_photo_z(str(path), keys, "sweep-030m005-035p000.fits")
    zmed = t.column("z_phot_median").to_pylist()
    assert [v is None for v in zmed] == [False, True, False, True, False, False]
    assert zmed[0] == pytest.approx(0.3, abs=1e-6)
    zs = t.column("z_spec").to_pylist()
    assert [v is None for v in zs] == [False, True, True, True, True, False]
    assert t.column("pz_file").to_pylist() == [path.name] * 6
    assert pz_filename("sweep-030m005-035p000.fits") == path.name


def test_pz_reader_refuses_rows_that_do_not_match(tmp_path):
    keys = _keys(6)
    path = tmp_path / "bad-pz.fits"
    shuffled = keys.take(pa.array([0, 1, 2, 4, 3, 5])).set_column(3, "row_index", keys.column("row_index"))
    _write_pz(path, shuffled, np.full(6, 0.3), np.full(6, -99))
    with pytest.raises(InputError, match=r"bad-pz\.fits.*first mismatched row 3"):
        read_photo_z(str(path), keys, "sweep-030m005-035p000.fits")
    short = tmp_path / "short-pz.fits"
    _write_pz(short, keys.slice(0, 5), np.full(5, 0.3), np.full(5, -99))
    with pytest.raises(InputError, match=r"short-pz\.fits: 5 rows, but its sweep .* has 6"):
        read_photo_z(str(short), keys, "sweep-030m005-035p000.fits")
    with pytest.raises(InputError, match="no such file"):
        read_photo_z(str(tmp_path / "absent-pz.fits"), keys, "sweep-030m005-035p000.fits")


def test_missing_companion_leaves_nulls():
    t = photo_z_missing(_keys(4), "sweep-030m005-035p000.fits")
    assert t.num_rows == 4 and t.column("z_phot_median").null_count == 4 and t.column("pz_file").null_count == 4


def _write_spec_pair(tmp_path, objid, plate_sdss):
    n = len(objid)
    plate = np.arange(n, dtype=np.int32) + 3000
    survey = [
        fits.Column("RELEASE", "I", array=np.full(n, 10000, np.int16)),
        fits.Column("BRICKID", "J", array=np.full(n, 7, np.int32)),
        fits.Column("OBJID", "J", array=np.asarray(objid, np.int32)),
        fits.Column("TYPE", "3A", array=np.full(n, "DEV", "S3")),
        fits.Column("RA", "D", array=np.full(n, 30.0)),
        fits.Column("DEC", "D", array=np.full(n, -3.0)),
        *(
            fits.Column(c, "E", array=np.ones(n))
            for c in ("FLUX_R", "FLUX_Z", "MW_TRANSMISSION_R", "MW_TRANSMISSION_Z")
        ),
        fits.Column("PLATE", "J", array=plate),
        fits.Column("MJD", "J", array=np.full(n, 55000, np.int32)),
        fits.Column("FIBERID", "J", array=np.arange(n, dtype=np.int32) + 1),
    ]
    sdss = [
        fits.Column("PLATE", "J", array=np.asarray(plate_sdss, np.int32)),
        fits.Column("MJD", "J", array=np.full(n, 55000, np.int32)),
        fits.Column("FIBERID", "J", array=np.arange(n, dtype=np.int32) + 1),
        fits.Column("Z", "E", array=np.full(n, 0.3)),
        fits.Column("ZWARNING", "J", array=np.array([4, 0, 0, 0][:n], np.int32)),
        fits.Column("CLASS", "6A", array=np.full(n, "GALAXY", "S6")),
        fits.Column("VDISP", "E", array=np.arange(n) * 10.0 + 200),
        fits.Column("VDISP_ERR", "E", array=np.full(n, 15.0)),
    ]
    ps, pq = tmp_path / "survey-specObj.fits", tmp_path / "specObj-dr16.fits"
    for p, cols in ((ps, survey), (pq, sdss)):
        fits.HDUList([fits.PrimaryHDU(), fits.BinTableHDU.from_columns(cols, nrows=n)]).writeto(p, overwrite=True)
    return str(ps), str(pq), plate


def test_spectra_reader(tmp_path):
    # rows 0 and 1 match the same source (0 has ZWARNING 4, 1 is good), row 2 no source, row 3 another
    ps, pq, plate = _write_spec_pair(tmp_path, [5, 5, -1, 9], np.arange(4) + 3000)
    t, counts = read_spectra(ps, pq)
    assert counts == {"n_rows": 4, "n_unmatched": 1, "n_kept": 2}
    assert sorted(t.column("vdisp").to_pylist()) == [210.0, 230.0]  # the good spectrum of object 5
    bad = plate.copy()
    bad[2] += 1
    ps, pq, _ = _write_spec_pair(tmp_path, [5, 5, -1, 9], bad)
    with pytest.raises(InputError, match=r"specObj.*row 2 has PLATE=3002.*first mismatched row 2"):
        read_spectra(ps, pq)


def test_hyde_bernardi_relation_matches_the_paper_form():
    # Hyde & Bernardi 2009 (as LensPop's EarlyTypeRelations inverts it): V = -(2.97 + 0.37 M + 0.006 M^2)
    for m, v in ((-20.0, 2.03), (-22.0, 2.266), (-23.0, 2.366)):
        assert float(hyde_bernardi_log_sigma(m)) == pytest.approx(v, abs=1e-9)
    for sigma in (150.0, 250.0, 350.0):
        v = math.log10(sigma)
        m_lenspop = (-0.37 + (0.37**2 - 4 * 0.006 * (2.97 + v)) ** 0.5) / (2 * 0.006)
        assert float(hyde_bernardi_log_sigma(m_lenspop)) == pytest.approx(v, abs=1e-12)


@pytest.fixture(scope="module")
def mock_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("mock_z")
    generate_mock_survey(
        root, MockSurveyConfig(profile="demo", n_rows_per_file=6000, blocks=((30, -5),), seed=3, n_hidden_lenses=3)
    )
    return root


def test_mock_companions_read_back_and_are_realistic(mock_root):
    sweep = next((mock_root / "south/sweep/10.1").glob("sweep-*.fits"))
    rows = read_sweep(sweep, columns=["release", "brickid", "objid", "type", "flux_z", "mw_transmission_z", "nobs_g"])
    pz = read_photo_z(str(mock_root / DR10_PHOTO_Z_DIR / pz_filename(sweep.name)), rows, sweep.name)
    assert pz.num_rows == rows.num_rows
    assert np.array_equal(pz.column("object_id").to_numpy(), rows.column("object_id").to_numpy())
    spec, counts = read_spectra(str(mock_root / DR10_SPECOBJ_SURVEY), str(mock_root / DR10_SPECOBJ_SDSS))
    assert counts["n_unmatched"] > 0 and spec.num_rows > 100
    # photo-z against spec-z for red galaxies brighter than z = 21: sigma_NMAD ~ 0.02 (1 + z), 1-2 % outliers
    ids = spec.column("object_id").to_numpy()
    pz_ids = pz.column("object_id").to_numpy()
    order = np.argsort(pz_ids)
    pos = order[np.searchsorted(pz_ids[order], ids)]
    assert np.array_equal(pz_ids[pos], ids)
    zp = pz.column("z_phot_median").to_numpy(zero_copy_only=False)[pos].astype(float)
    zs = spec.column("z").to_numpy()
    dz = (zp - zs) / (1 + zs)
    red = np.isin(spec.column("type").to_pylist(), ["DEV", "SER"])
    nmad = 1.4826 * np.median(np.abs(dz[red] - np.median(dz[red])))
    assert 0.012 < nmad < 0.03
    assert np.mean(np.abs(dz) > 0.15) < 0.06


def test_calibrated_relation_recovers_the_mock(mock_root):
    from mock_survey.redshifts import SIGMA_SCATTER_DEX, mock_log_sigma, type_classes

    spec, _ = read_spectra(str(mock_root / DR10_SPECOBJ_SURVEY), str(mock_root / DR10_SPECOBJ_SDSS))
    rel = calibrate_sigma_relation(spec)
    assert rel.n_calibration >= 50
    assert SIGMA_SCATTER_DEX * 0.7 < rel.scatter_dex < SIGMA_SCATTER_DEX * 1.6
    mag_r = np.array([17.5, 18.5, 19.5])
    z = np.array([0.2, 0.35, 0.5])
    truth = mock_log_sigma(mag_r, z, type_classes(["DEV"] * 3))
    np.testing.assert_allclose(rel.log_sigma(mag_r, z), truth, atol=0.05)


def test_host_redshift_spec_first_then_phot_and_sigma_measured_first(mock_root):
    from darkhaloscope.lensing.hosts import host_lens_properties

    spec, _ = read_spectra(str(mock_root / DR10_SPECOBJ_SURVEY), str(mock_root / DR10_SPECOBJ_SDSS))
    rel = calibrate_sigma_relation(spec)
    ids = np.array([11, 12, 13], np.int64)
    rows = pa.table(
        {
            "object_id": ids,
            "flux_r": [10.0, 10.0, 10.0],
            "flux_z": [25.0, 25.0, 25.0],
            "mw_transmission_r": [1.0, 1.0, 1.0],
            "mw_transmission_z": [1.0, 1.0, 1.0],
            "shape_e1": [0.2, 0.0, 0.0],
            "shape_e2": [0.0, 0.0, 0.0],
        }
    )
    photo_z = pa.table({"object_id": ids, "z_phot_median": pa.array([0.35, 0.4, None], pa.float32())})
    one = spec.slice(0, 1).to_pydict()
    one.update(object_id=[11], z=[0.3], zwarning=[0], vdisp=[240.0], vdisp_err=[12.0])
    spectra = pa.Table.from_pydict(one, schema=spec.schema)
    props, counts = host_lens_properties(ids, rows, photo_z, spectra, rel)
    d = props.to_pydict()
    assert d["host_z"][:2] == pytest.approx([0.3, 0.4]) and d["host_z"][2] is None
    assert d["host_z_source"] == ["spec", "phot", None] and d["sigma_v_source"] == ["measured", "relation", None]
    assert d["log_sigma_mu"][0] == pytest.approx(math.log10(240.0))
    assert d["log_sigma_sd"][1] == pytest.approx(rel.scatter_dex)
    assert d["lens_mag_z"][0] == pytest.approx(22.5 - 2.5 * math.log10(25.0))
    assert d["host_q"][0] == pytest.approx(0.8 / 1.2) and counts["host_without_redshift"] == 1
