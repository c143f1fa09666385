"""Shortcut scan: a planted core-brightness difference is caught; an arc-only difference is not a core shortcut."""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from darkhaloscope.errors import InputError
from darkhaloscope.imaging.shortcuts import (
    CORE_FEATURES,
    EXPECTED_PHYSICS,
    FEATURE_NAMES,
    core_brightness_ratio,
    core_shortcut_failed,
    feature_aucs,
    flag_for,
    separation_lower_bound,
    shortcut_features,
    shortcut_gate,
)
from darkhaloscope.seeding import rng_for

S = 61
C = S // 2
YY, XX = np.mgrid[:S, :S]
R = np.hypot(YY - C, XX - C)
HOST = np.exp(-0.5 * (R / 3.0) ** 2)
RING = np.exp(-0.5 * ((R - 14.0) / 0.6) ** 2)  # a thin Einstein ring well outside r = 12
COLOURS = np.array([0.5, 1.0, 1.5])[:, None, None]


def population(n, key, core_boost=1.0, ring_amp=0.0):
    rng = rng_for("test-shortcuts", key)
    amp = np.exp(rng.normal(0.0, 0.3, n)) * core_boost
    img = amp[:, None, None, None] * COLOURS * HOST + ring_amp * RING
    img = img + rng.normal(0.0, 0.005, (n, 3, S, S))
    return img.astype(np.float32)


def scan(pos, neg, n_boot=100):
    feats = shortcut_features(np.concatenate([pos, neg]))
    labels = np.r_[np.ones(len(pos)), np.zeros(len(neg))].astype(int)
    return feats, labels, feature_aucs(feats, labels, n_boot=n_boot, seed_key="test")


def row(t, name):
    i = t.column("feature").to_pylist().index(name)
    return {k: t.column(k)[i].as_py() for k in t.column_names}


def test_planted_core_brightness_difference_is_red_and_fails():
    feats, labels, t = scan(population(100, "pos-core", core_boost=1.6), population(100, "neg-core"))
    r8 = row(t, "core_brightness_r8")
    assert r8["auc"] > 0.75 and r8["flag"] == "red" and r8["core_feature"]
    assert r8["n_pos"] == 100 and r8["n_neg"] == 100
    assert core_shortcut_failed(t)
    gate = shortcut_gate(t)
    assert gate["core_shortcut_failed"] and not gate["passed"]
    assert core_brightness_ratio(feats, labels) == pytest.approx(1.6, rel=0.15)


def test_arc_annulus_only_difference_is_not_a_core_shortcut():
    _, labels, t = scan(population(100, "pos-ring", ring_amp=0.2), population(100, "neg-ring"))
    ann = row(t, "annulus_brightness_r")
    assert ann["flag"] == "red" and ann["expected_physics"] and ann["auc"] > 0.7
    for name in CORE_FEATURES:
        assert row(t, name)["flag"] != "red", name
    assert not core_shortcut_failed(t)
    gate = shortcut_gate(t)
    assert not gate["core_shortcut_failed"] and gate["annulus_ok"]


def test_flagging_rule_is_two_sided_and_bootstrap_is_deterministic():
    assert separation_lower_bound(0.75, 0.85) == 0.75
    assert separation_lower_bound(0.15, 0.25) == 0.75  # separates the other way just as well
    assert separation_lower_bound(0.45, 0.62) == 0.5
    assert flag_for(0.71) == "red" and flag_for(0.65) == "yellow" and flag_for(0.6) == "green"
    assert flag_for(float("nan")) == "na"
    feats, labels, t1 = scan(population(60, "p", core_boost=1.6), population(60, "n"), n_boot=50)
    t2 = feature_aucs(feats, labels, n_boot=50, seed_key="test")
    for name in t1.column_names:  # NaN-aware equality (saturation_frac has no AUC)
        np.testing.assert_array_equal(
            t1.column(name).to_numpy(zero_copy_only=False), t2.column(name).to_numpy(zero_copy_only=False)
        )
    t_other = feature_aucs(feats, labels, n_boot=50, seed_key="other")
    col = lambda t, k: t.column(k).to_numpy(zero_copy_only=False)
    np.testing.assert_array_equal(col(t_other, "auc"), col(t1, "auc"))  # the point estimate needs no seed
    assert not np.array_equal(col(t_other, "auc_lo"), col(t1, "auc_lo"), equal_nan=True)
    # Negating a feature mirrors its AUC and keeps its flag.
    neg = pa.table({"core_brightness_r8": pc.negate(feats.column("core_brightness_r8"))})
    t3 = feature_aucs(neg, labels, n_boot=50, seed_key="test", feature_names=("core_brightness_r8",))
    assert row(t3, "core_brightness_r8")["auc"] == pytest.approx(1 - row(t1, "core_brightness_r8")["auc"])
    assert row(t3, "core_brightness_r8")["flag"] == "red"
    # Without maskbits saturation is null, so it cannot be measured rather than looking clean.
    assert row(t1, "saturation_frac")["flag"] == "na" and row(t1, "saturation_frac")["n_pos"] == 0


def test_feature_values_on_hand_built_stamps():
    img = np.ones((2, 3, S, S), dtype=np.float32)
    img[1, :, :3, :] = 0.0  # top edge of coverage missing
    img[1, 0, C + 20, C] = np.nan
    mb = np.zeros((2, S, S), dtype=np.int32)
    mb[0, : S // 2 + 1, :] = 1 << 3  # SATUR_R over (C + 1) rows
    t = shortcut_features(img, maskbits=mb)
    assert t.column_names == list(FEATURE_NAMES) and t.num_rows == 2 and len(FEATURE_NAMES) >= 25
    f = {k: t.column(k).to_numpy(zero_copy_only=False) for k in t.column_names}
    assert f["core_brightness_r8"].tolist() == [1.0, 1.0] and f["color_gr_core"].tolist() == [0.0, 0.0]
    assert f["laplacian_energy_r"][0] == 0.0 and f["radial_gradient_r"][0] == 0.0
    edge_px = S * S - (S - 6) ** 2
    assert f["edge_artifact_frac"].tolist() == [0.0, pytest.approx(3 * S / edge_px)]
    assert f["nonfinite_frac"][1] == pytest.approx(1 / (3 * S * S))
    assert f["saturation_frac"][0] == pytest.approx((C + 1) / S)
    # A lopsided arc in one quadrant raises the azimuthal asymmetry above a symmetric ring's.
    rng = rng_for("test-shortcuts", "asym")
    noise = rng.normal(0, 0.01, (2, 3, S, S))
    sym = noise[0] + RING
    lop = noise[1] + RING * ((YY > C) & (XX > C))
    a = shortcut_features(np.stack([sym, lop]).astype(np.float32)).column("azimuthal_asymmetry_r").to_pylist()
    assert a[1] > 3 * a[0]


def test_bad_inputs():
    with pytest.raises(InputError, match="at least 57"):
        shortcut_features(np.zeros((1, 3, 41, 41), np.float32))
    with pytest.raises(InputError, match="grz stamps"):
        shortcut_features(np.zeros((1, 2, S, S), np.float32))
    feats = shortcut_features(np.ones((2, 3, S, S), np.float32))
    with pytest.raises(InputError, match="labels"):
        feature_aucs(feats, [1, 0, 1])
    with pytest.raises(InputError, match="0 or 1"):
        feature_aucs(feats, [1, 2])
    with pytest.raises(InputError, match="lacks columns"):
        feature_aucs(feats, [1, 0], feature_names=("nope",))
    assert EXPECTED_PHYSICS.isdisjoint(CORE_FEATURES)
