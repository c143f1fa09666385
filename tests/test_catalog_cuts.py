"""Negative cuts at their boundaries, N2 confusers, positives cross-match, independent checks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from darkhaloscope import sky
from darkhaloscope.catalog.confusers import ConfuserConfig, axis_ratio, classify_confusers
from darkhaloscope.catalog.crossmatch import POSITIVE_SCHEMA, crossmatch_positives
from darkhaloscope.catalog.cuts import (
    CUT_STEPS,
    NEGATIVE_SCHEMA,
    KnownLensIndex,
    NegativeSelectionConfig,
    describe_objects,
    funnel_from_table,
    funnel_table,
    merge_funnels,
    select_negatives,
)
from darkhaloscope.catalog.verify import (
    ExclusionCheck,
    split_fraction_report,
    verify_cuts_with_duckdb,
    verify_split_disjoint,
)
from darkhaloscope.errors import InputError
from tests.conftest import require_real_file
from tests.spark_fixtures import known_lenses_table, synthetic_sweeps

NO_LENSES = known_lenses_table([])


def rows(n: int, **overrides) -> pa.Table:
    """``n`` sweep rows that pass every cut; ``overrides`` replace whole columns (lists)."""
    good = {
        "release": [10000] * n,
        "brickid": [331000] * n,
        "brickname": ["1500p000"] * n,
        "objid": list(range(n)),
        "type": ["DEV"] * n,
        "ra": [150.0 + 0.01 * i for i in range(n)],
        "dec": [1.0] * n,
        "flux_g": [5.0] * n,
        "flux_r": [12.0] * n,
        "flux_z": [25.0] * n,
        "flux_w1": [30.0] * n,
        "nobs_g": [4] * n,
        "nobs_r": [4] * n,
        "nobs_z": [4] * n,
        "maskbits": [0] * n,
        "fitbits": [0] * n,
        "shape_r": [1.0] * n,
        "shape_e1": [0.1] * n,
        "shape_e2": [0.0] * n,
        "sersic": [4.0] * n,
        "psfsize_g": [1.3] * n,
        "psfsize_r": [1.2] * n,
        "psfsize_z": [1.1] * n,
        "psfdepth_g": [600.0] * n,
        "psfdepth_r": [300.0] * n,
        "psfdepth_z": [80.0] * n,
        "galdepth_g": [400.0] * n,
        "galdepth_r": [200.0] * n,
        "galdepth_z": [50.0] * n,
        "ebv": [0.03] * n,
        "mw_transmission_g": [0.9] * n,
        "mw_transmission_r": [0.93] * n,
        "mw_transmission_z": [0.96] * n,
        "sweep_file": ["sweep-150p000-155p005.fits"] * n,
        "row_index": list(range(n)),
    }
    good.update(overrides)
    types = {
        "release": pa.int16(),
        "brickid": pa.int32(),
        "objid": pa.int32(),
        "nobs_g": pa.int16(),
        "nobs_r": pa.int16(),
        "nobs_z": pa.int16(),
        "maskbits": pa.int32(),
        "fitbits": pa.int16(),
        "ra": pa.float64(),
        "dec": pa.float64(),
        "row_index": pa.int64(),
    }
    cols = {}
    for k, v in good.items():
        t = types.get(k, pa.string() if isinstance(v[0], str) else pa.float32())
        cols[k] = pa.array(v, t)
    return pa.table(cols)


def kept(table, lenses=NO_LENSES, config=NegativeSelectionConfig()) -> list[int]:
    neg, _ = select_negatives(table, lenses, config)
    return neg.column("row_index").to_pylist()


def test_dec_footprint_is_strict_on_both_ends():
    t = rows(6, dec=[-18.0, -17.9999, 0.0, 31.9999, 32.0, 40.0])
    assert kept(t) == [1, 2, 3]


def test_nobs_three_kept_two_dropped_in_each_band():
    for band in ("g", "r", "z"):
        t = rows(3, **{f"nobs_{band}": [3, 2, 11]})
        assert kept(t) == [0, 2], band


def test_zmag_limit_and_nonpositive_flux_rejected():
    # z = 20 is flux 10 nMgy exactly: rejected (z < 20 required); flux 0, negative and NaN never pass.
    t = rows(6, flux_z=[10.0, 10.01, 0.0, -3.0, float("nan"), 1000.0])
    assert kept(t) == [1, 5]


def test_null_values_fail_their_cut():
    t = rows(3)
    t = t.set_column(t.schema.get_field_index("nobs_r"), "nobs_r", pa.array([None, 4, 4], pa.int16()))
    t = t.set_column(t.schema.get_field_index("flux_z"), "flux_z", pa.array([25.0, None, 25.0], pa.float32()))
    assert kept(t) == [2]


def test_each_excluded_maskbit_alone_rejects_and_allowed_bits_keep():
    excluded = [1, 5, 6, 7, 11, 12, 13]
    allowed = [0, 2, 3, 4, 8, 9, 10, 14, 16]
    t = rows(len(excluded) + len(allowed), maskbits=[1 << b for b in excluded + allowed])
    assert kept(t) == list(range(len(excluded), len(excluded) + len(allowed)))


def test_types_psf_rejected_and_galaxy_types_kept():
    t = rows(7, type=["PSF", "SER", "DEV", "REX", "EXP", "DUP", "PSF "])
    assert kept(t) == [1, 2, 3, 4]


def test_known_lens_exclusion_at_11_arcsec():
    lens = known_lenses_table([{"ra": 150.0, "dec": 1.0}])
    # Offsets in dec: 10.9" is inside the 11" radius, 11.1" outside.
    t = rows(3, ra=[150.0, 150.0, 150.0], dec=[1.0 + 10.9 / 3600, 1.0 + 11.1 / 3600, 1.0 - 10.9 / 3600])
    assert kept(t, lens) == [1]
    # The index can be built once and reused (what Spark broadcasts).
    assert kept(t, KnownLensIndex.from_table(lens)) == [1]


def test_the_closure_reserve_leaves_the_negatives_by_a_stable_hash_of_the_object_id():
    """The reserve (catalog.reserve) is the last step: a tenth of the galaxies that pass every cut,
    the same ones whatever the row order, never a negative."""
    from darkhaloscope.catalog.reserve import DEFAULT_RESERVE_FRACTION, closure_reserved

    t = rows(2000)
    neg, funnel = select_negatives(t, known_lenses_table([]))
    reserved = closure_reserved(describe_objects(t, NegativeSelectionConfig())["object_id"].to_numpy())
    assert funnel[t.column("sweep_file")[0].as_py()]["closure_reserve"] == int(reserved.sum())
    assert abs(reserved.mean() - DEFAULT_RESERVE_FRACTION) < 0.025
    assert neg.column("row_index").to_pylist() == np.flatnonzero(~reserved).tolist()
    shuffled = t.take(pa.array(np.random.default_rng(1).permutation(t.num_rows)))
    again, _ = select_negatives(shuffled, known_lenses_table([]))
    assert sorted(again.column("object_id").to_pylist()) == sorted(neg.column("object_id").to_pylist())
    none, f0 = select_negatives(t, known_lenses_table([]), NegativeSelectionConfig(closure_reserve_fraction=0.0))
    assert none.num_rows == t.num_rows and f0[t.column("sweep_file")[0].as_py()]["closure_reserve"] == 0


def test_funnel_counts_each_cut_in_order_per_sweep_file():
    t = rows(
        8,
        dec=[1.0, 50.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
        type=["DEV", "DEV", "PSF", "DEV", "DEV", "DEV", "DEV", "DEV"],
        maskbits=[0, 0, 0, 2, 0, 0, 0, 0],
        nobs_z=[4, 4, 4, 4, 1, 4, 4, 4],
        flux_z=[25, 25, 25, 25, 25, 1.0, 25, 25],
        sweep_file=["a.fits"] * 4 + ["b.fits"] * 4,
    )
    lens = known_lenses_table([{"ra": 150.06, "dec": 1.0}])
    neg, funnel = select_negatives(t, lens)
    assert funnel["a.fits"] == {
        "input": 4,
        "dec_footprint": 1,
        "type": 1,
        "maskbits": 1,
        "nobs": 0,
        "zmag": 0,
        "known_lens": 0,
        "closure_reserve": 0,
        "selected": 1,
    }
    assert funnel["b.fits"] == {
        "input": 4,
        "dec_footprint": 0,
        "type": 0,
        "maskbits": 0,
        "nobs": 1,
        "zmag": 1,
        "known_lens": 1,
        "closure_reserve": 0,
        "selected": 1,
    }
    assert neg.column("row_index").to_pylist() == [0, 7]
    # Long form round-trips, and funnels of two batches add up.
    assert funnel_from_table(funnel_table(funnel)) == funnel
    assert merge_funnels(funnel, funnel)["a.fits"]["selected"] == 2
    assert funnel_table(funnel).column("step").to_pylist()[: len(CUT_STEPS)] == list(CUT_STEPS)


def test_output_columns_mags_colours_strata_and_split():
    t = rows(4, flux_g=[0.0, 5.0, 5.0, 5.0], nobs_z=[3, 6, 11, 5], type=["SER", "REX", "EXP", "DEV"])
    neg, _ = select_negatives(t, NO_LENSES)
    assert neg.schema == NEGATIVE_SCHEMA
    d = neg.to_pydict()
    assert d["mag_g"][0] is None and d["g_minus_r"][0] is None
    assert d["mag_z"][1] == pytest.approx(22.5 - 2.5 * np.log10(25.0), abs=1e-5)
    assert d["g_minus_r"][1] == pytest.approx(2.5 * np.log10(12.0 / 5.0), abs=1e-5)
    assert d["nobs_z_bin"] == ["3-5", "6-10", "11+", "3-5"]
    assert d["type_bin"] == ["SER", "REX", "OTHER", "DEV"]
    ra, dec = np.array(d["ra"]), np.array(d["dec"])
    assert d["healpix_128"] == sky.healpix_nested(ra, dec, 128).tolist()
    assert d["split"] == sky.split_for_coords(ra, dec).tolist()


def test_bad_input_raises_input_error_naming_column():
    with pytest.raises(InputError, match="nobs_g"):
        select_negatives(rows(2).drop_columns(["nobs_g"]), NO_LENSES)
    with pytest.raises(InputError, match="sweep-150p000"):
        select_negatives(rows(2, ra=[float("nan"), 150.0]), NO_LENSES)
    with pytest.raises(InputError):
        NegativeSelectionConfig(dec_min=40.0)


def test_dr8_quirks_padded_type_and_int16_maskbits_are_handled():
    t = rows(3, type=["DEV ", "PSF ", "REX "])
    t = t.set_column(t.schema.get_field_index("maskbits"), "maskbits", pa.array([0, 0, -32768], pa.int16()))
    # Bit 15 (ALLMASK_I, value 0x8000 read as int16 -32768) is not excluded.
    neg, _ = select_negatives(t, NO_LENSES)
    assert neg.column("row_index").to_pylist() == [0, 2]
    assert neg.column("type").to_pylist() == ["DEV", "REX"]
    assert neg.column("maskbits").to_pylist() == [0, 32768]


def test_confuser_categories_and_precedence():
    cfg = ConfuserConfig()
    nan = np.nan
    # columns: type, flux_r, shape_r, e1, e2, sersic, g-r, mag_r
    cases = [
        (("DEV", 5.0, 1.0, 0.0, 0.0, 4.0, 1.0, 20.7), "ring_proxy"),
        (("DEV", 4.99, 1.0, 0.0, 0.0, 4.0, 1.0, 20.7), None),
        (("SER", 6.0, 1.0, 0.0, 0.0, 4.0, 1.0, 20.5), "ring_proxy"),
        (("SER", 6.0, 1.0, 0.0, 0.0, 3.9, 1.0, 20.6), None),
        (("EXP", 1.0, 0.6, 0.5, 0.0, 1.0, 1.0, 22.0), "edge_on_proxy"),
        (("EXP", 1.0, 0.59, 0.5, 0.0, 1.0, 1.0, 22.0), None),
        (("EXP", 1.0, 1.9, 0.3, 0.0, 1.0, 1.0, 22.0), None),  # ellipticity known and low: no fallback
        (("EXP", 1.0, 1.8, nan, nan, 1.0, 1.0, 22.0), "edge_on_proxy"),  # missing ellipticity: fallback
        (("REX", 1.0, 0.5, 0.0, 0.0, 1.0, 0.4, 20.5), "blue_clumpy"),
        (("REX", 1.0, 0.5, 0.0, 0.0, 1.0, 0.41, 20.5), None),
        (("REX", 3.0, 2.0, 0.0, 0.0, 1.0, 1.0, 21.0), "large_galaxy"),
        (("REX", 2.9, 2.0, 0.0, 0.0, 1.0, 1.0, 21.0), None),
        # ring and blue and large all apply: ring wins by precedence
        (("DEV", 50.0, 3.0, 0.0, 0.0, 4.0, 0.2, 18.0), "ring_proxy"),
        (("EXP", 50.0, 3.0, 0.6, 0.0, 1.0, 0.2, 18.0), "edge_on_proxy"),
    ]
    cols = list(zip(*[c for c, _ in cases]))
    got = classify_confusers(*cols, config=cfg)
    assert got.tolist() == [want for _, want in cases]
    other = ConfuserConfig(precedence=("large_galaxy", "blue_clumpy", "edge_on_proxy", "ring_proxy"))
    assert classify_confusers(*[[x] for x in cases[-2][0]], config=other).tolist() == ["large_galaxy"]
    assert axis_ratio([0.5], [0.0])[0] == pytest.approx(1 / 3)


def test_pool_assignment_in_negatives():
    t = rows(2, flux_r=[12.0, 1.0], type=["DEV", "REX"], shape_r=[1.0, 0.5], flux_g=[5.0, 0.5])
    neg, _ = select_negatives(t, NO_LENSES)
    assert neg.column("pool").to_pylist() == ["N2", "N1"]
    assert neg.column("confuser_category").to_pylist() == ["ring_proxy", None]


def test_crossmatch_nearest_within_radius_and_flags_kept():
    lenses = known_lenses_table(
        [
            {"name": "A", "ra": 150.0, "dec": 1.0, "grade": "confident", "z_lens": 0.4},
            {"name": "B", "ra": 150.5, "dec": 1.0, "grade": "probable"},
            {"name": "far", "ra": 151.0, "dec": 1.0},
            {"name": "cluster", "ra": 150.0, "dec": 1.0, "kind": "cluster"},
            {"name": "C", "ra": 150.0, "dec": 40.0, "grade": "probable"},
            {"name": "ungraded", "ra": 150.5, "dec": 1.0, "grade": "maybe"},
        ]
    )
    t = rows(
        6,
        ra=[150.0, 150.0, 150.5, 151.0, 150.0, 155.0],
        dec=[1.0 + 0.3 / 3600, 1.0 + 0.9 / 3600, 1.0 - 1.2 / 3600, 1.0 + 1.6 / 3600, 40.0, 1.0],
        type=["DEV", "DEV", "PSF", "DEV", "SER", "DEV"],
    )
    pos, summary = crossmatch_positives(t, lenses, radius_arcsec=1.5)
    assert pos.schema == POSITIVE_SCHEMA
    d = pos.to_pydict()
    assert d["name"] == ["A", "B", "C"]
    assert d["row_index"] == [0, 2, 4]
    assert d["tier"] == ["A", "B", "B"]
    assert d["separation_arcsec"][0] == pytest.approx(0.3, abs=1e-6)
    assert d["passes_negative_cuts"] == [True, False, True]
    assert d["failed_cuts"] == ["", "type", ""]
    assert d["in_negative_footprint"] == [True, True, False]
    assert summary["n_matched"] == 3 and summary["unmatched_names"] == ["far"]
    assert summary["n_eligible"] == 1 and summary["n_failing_by_cut"]["type"] == 1
    assert summary["n_graded_galaxy_scale"] == 4


def test_crossmatch_one_row_per_object():
    # Two lenses 0.8" apart share one source: the closer lens keeps it.
    lenses = known_lenses_table(
        [
            {"name": "near", "ra": 150.0, "dec": 1.0 + 0.8 / 3600},
            {"name": "closest", "ra": 150.0, "dec": 1.0 + 0.1 / 3600},
        ]
    )
    pos, summary = crossmatch_positives(rows(1, ra=[150.0], dec=[1.0]), lenses)
    assert pos.column("name").to_pylist() == ["closest"]
    assert summary["n_dropped_shared_source"] == 1


def test_independent_checks_agree_and_catch_violations():
    t = synthetic_sweeps(3000, key="verify")
    ra, dec = t.column("ra").to_numpy(), t.column("dec").to_numpy()
    lenses = known_lenses_table([{"ra": ra[i], "dec": dec[i] + 5 / 3600} for i in range(0, 3000, 50)])
    neg, _ = select_negatives(t, lenses)
    check = ExclusionCheck(lenses, 11.0)  # one check, its lenses' KD-tree kept, table after table
    assert check(neg)["n_violations"] == 0
    assert verify_cuts_with_duckdb(neg)["n_violating"] == 0
    assert verify_split_disjoint(neg)["n_mixed_pixels"] == 0
    # Without the exclusion the astropy check sees the sources near lenses.
    neg_all, _ = select_negatives(t, NO_LENSES)
    assert check(neg_all)["n_violations"] == neg_all.num_rows - neg.num_rows > 0
    assert check(neg)["n_violations"] == 0
    # A corrupted table fails the DuckDB re-check, cut by cut.
    bad = neg.set_column(
        neg.schema.get_field_index("nobs_r"), "nobs_r", pa.array([2] + [4] * (neg.num_rows - 1), pa.int16())
    )
    res = verify_cuts_with_duckdb(bad)
    assert res["n_violating"] == 1 and res["nobs"] == 1
    # A split that disagrees with the pixel of the row is caught from ra/dec, not the stored pixel.
    splits = neg.column("split").to_pylist()
    splits[0] = "test" if splits[0] != "test" else "train"
    twin = neg.slice(0, 1).set_column(neg.schema.get_field_index("split"), "split", pa.array(splits[:1]))
    assert verify_split_disjoint(neg, twin)["n_mixed_pixels"] == 1
    rep = split_fraction_report(neg)
    assert sum(v["n"] for v in rep["fractions"].values()) == neg.num_rows


def test_split_fractions_tolerance_follows_the_pixel_count():
    """A few pixels scatter far from 70/15/15 by chance, a wide area does not; rows dealt to the
    splits one by one (not pixel by pixel) at the wrong fractions are caught on a wide area."""
    rng = np.random.default_rng(7)
    # 24 pixels of nside 128 near (150, 2): the split of each is its hash's, so the fractions are lumpy.
    ra, dec = 150.0 + rng.uniform(0, 1.5, 4000), 2.0 + rng.uniform(0, 1.0, 4000)
    lumpy = pa.table({"ra": ra, "dec": dec, "split": pa.array(sky.split_for_coords(ra, dec).tolist())})
    rep = split_fraction_report(lumpy)
    assert rep["ok"], rep["warnings"]
    assert 10 < rep["n_pixels"] < 60 and rep["fractions"]["train"]["sd"] > 0.05
    # 40,000 rows over ~2,000 pixels: sd ≈ 0.01; a split assigned 50/25/25 row by row is 20 sd off.
    ra, dec = rng.uniform(0, 40, 40000), rng.uniform(-5, 5, 40000)
    wide = pa.table({"ra": ra, "dec": dec, "split": pa.array(sky.split_for_coords(ra, dec).tolist())})
    rep = split_fraction_report(wide)
    assert rep["ok"] and rep["fractions"]["train"]["sd"] < 0.015
    wrong = wide.set_column(2, "split", pa.array(rng.choice(["train", "val", "test"], 40000, p=[0.5, 0.25, 0.25])))
    rep = split_fraction_report(wrong)
    assert not rep["ok"] and any("'train'" in w for w in rep["warnings"])


def _read_raw_sweep(path: Path) -> pa.Table:
    """Lower-cased columns of a raw sweep FITS file, keeping DR8's padded TYPE and int16 MASKBITS."""
    from astropy.io import fits

    with fits.open(path) as hdul:
        data = hdul[1].data
        cols = {}
        for name in data.columns.names:
            arr = np.asarray(data[name])
            if arr.ndim != 1:
                continue
            if arr.dtype.kind in "SU":
                cols[name.lower()] = pa.array(arr.astype(str).tolist(), pa.string())
            else:
                cols[name.lower()] = pa.array(arr.astype(arr.dtype.newbyteorder("=")))
    n = len(data)
    cols["type"] = pa.array([s.ljust(4) for s in cols["type"].to_pylist()], pa.string())  # DR8 pads to 4 chars
    cols["sweep_file"] = pa.array([path.name] * n, pa.string())
    cols["row_index"] = pa.array(np.arange(n), pa.int64())
    return pa.table(cols)


def test_real_dr8_sweep_runs_through_cuts():
    path = require_real_file("sweep-320m005-330p000.fits")
    t = _read_raw_sweep(path)
    assert t.column("maskbits").type == pa.int16()
    neg, funnel = select_negatives(t, NO_LENSES, NegativeSelectionConfig(min_nobs=1, zmag_max=30.0))
    f = funnel[path.name]
    assert f["input"] == t.num_rows and f["selected"] == neg.num_rows
    assert f["type"] == sum(1 for s in t.column("type").to_pylist() if s.strip() not in {"SER", "DEV", "REX", "EXP"})
    assert "PSF" not in neg.column("type").to_pylist()
    assert neg.schema == NEGATIVE_SCHEMA
    # DR8 has no SERSIC / SHAPE_R / PSFSIZE columns: they come out null, never invented.
    assert neg.column("sersic").null_count == neg.num_rows
    # With the default cuts every row is accounted for by some step.
    _, f2 = select_negatives(t, NO_LENSES)
    assert sum(f2[path.name][s] for s in CUT_STEPS) + f2[path.name]["selected"] == t.num_rows
