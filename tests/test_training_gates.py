"""Shortcut gates: a planted core shortcut fails, arc-only differences pass; model gates measure what they claim."""

import numpy as np
import pytest
import torch
from torch import nn

from darkhaloscope.training.data import synthetic_arrays
from darkhaloscope.training.gates import (
    arcs_outside_core,
    core_features,
    core_lr_gate,
    core_masked_drop_gate,
    cross_validated_lr_auc,
    hard_negative_gate,
    radial_profile_lr_gate,
    run_gates,
)
from darkhaloscope.training.preprocess import PreprocessSpec, core_mask, preprocess, radius_grid

torch.set_num_threads(1)
SPEC = PreprocessSpec()


@pytest.fixture(scope="module")
def arc():
    return synthetic_arrays(200, 33, seed=11, arc_amplitude=4.0)


@pytest.fixture(scope="module")
def core():
    return synthetic_arrays(200, 33, seed=12, mode="core")


class CoreBrightness(nn.Module):
    """Scores by the mean of the r < 5 px core: the shortcut."""

    def forward(self, x):
        m = torch.from_numpy(core_mask(x.shape[-2], x.shape[-1], 5.0))
        return x[..., m].mean(dim=(1, 2))


class RingFlux(nn.Module):
    """Scores by the mean flux at the arcs' radii (6 <= r < 10 px, whole shuffle bins): blind to the shape."""

    def forward(self, x):
        r = torch.tensor(radius_grid(x.shape[-2], x.shape[-1]))
        return x[..., (r >= 6) & (r < 10)].mean(dim=(1, 2))


class CoherentArc(nn.Module):
    """Scores by the brightest 5x5-smoothed spot at the arcs' radii: needs contiguous (arc-like) flux."""

    def forward(self, x):
        s = nn.functional.avg_pool2d(x.mean(dim=1, keepdim=True), 5, stride=1, padding=2)[:, 0]
        r = torch.tensor(radius_grid(x.shape[-2], x.shape[-1]))
        return s[:, (r > 6.5) & (r < 9.5)].amax(dim=1)


def test_planted_core_shortcut_fails_core_gate(core):
    g = core_lr_gate(core.image, core.label, SPEC)
    assert g["name"] == "core_lr_auc" and g["blocking"] and not g["passed"] and g["value"] > 0.8


def test_arc_data_with_matched_cores_passes_core_gate(arc):
    g = core_lr_gate(arc.image, arc.label, SPEC)
    assert g["passed"] and g["value"] < 0.65
    # the radial profile does see a ring: informative, non-blocking by default
    r = radial_profile_lr_gate(arc.image, arc.label, SPEC)
    assert r["value"] > 0.8 and not r["blocking"]


def test_core_features_keep_one_of_each_mirrored_pair_of_the_antisymmetric_channels(core):
    """An antisymmetric channel's core pixel is the negative of its mirror image, so the core gate
    reads half of that core (no information lost) and the planted core shortcut still fails it."""
    spec = PreprocessSpec(residual="append", stretch="asinh", colour_difference=True, antisymmetric=True)
    x = preprocess(core.image[:8], spec)
    k = int(core_mask(33, 33, 5.0).sum())  # 69 pixels, the centre among them
    f = core_features(x, spec)
    assert f.shape == (8, 7 * k + 3 * (k // 2))
    m = torch.from_numpy(core_mask(33, 33, 5.0))
    anti = x[:, spec.antisymmetric_channels()]
    assert torch.equal(anti, -torch.flip(anti, dims=(-2, -1))) and torch.all(anti[:, :, 16, 16] == 0)
    assert np.array_equal(f[:, : 7 * k], x[:, :7][:, :, m].reshape(8, -1).numpy())
    g = core_lr_gate(core.image, core.label, spec)
    assert not g["passed"] and g["value"] > 0.7


def test_cross_validation_is_not_train_on_train():
    # pure noise with more features than samples: train-on-train would reach AUC ~1, CV stays near 0.5
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(100, 300)), np.r_[np.zeros(50), np.ones(50)]
    assert abs(cross_validated_lr_auc(x, y) - 0.5) < 0.2


def test_core_masked_drop_gate(core, arc):
    bad = core_masked_drop_gate(CoreBrightness(), SPEC, core.image, core.label, device="cpu")
    assert not bad["passed"] and bad["auroc_full"] > 0.75 and bad["auroc_core_masked"] == pytest.approx(0.5)
    good = core_masked_drop_gate(RingFlux(), SPEC, arc.image, arc.label, device="cpu")
    assert good["passed"] and abs(good["value"]) < 1e-9 and good["auroc_full"] > 0.9


def test_hard_negative_gate_separates_shape_from_radial_flux(arc, core):
    blind = hard_negative_gate(RingFlux(), SPEC, arc, device="cpu")
    shape = hard_negative_gate(CoherentArc(), SPEC, arc, device="cpu")
    assert blind["n_pairs"] == int(arc.label.sum())
    assert abs(blind["value"] - 0.5) < 0.1 and not blind["passed"]
    assert shape["value"] > 0.7 and shape["passed"]
    skipped = hard_negative_gate(RingFlux(), SPEC, core, device="cpu")
    assert "skipped" in skipped and not skipped["passed"] and not skipped["blocking"]


def test_hard_negative_gate_reads_the_arcs_the_psf_resolves(arc):
    """Pairs of unresolved arcs (θ_E below the PSF FWHM) leave the gate's AUROC but not its record."""
    a = arc.subset(np.ones(len(arc), bool))
    inj = np.flatnonzero(a.label == 1)
    a.psfsize_r = np.full(len(a), 1.2, np.float32)
    a.theta_e_arcsec = np.full(len(a), np.nan, np.float32)
    a.theta_e_arcsec[inj] = np.where(np.arange(inj.size) % 2 == 0, 0.8, 1.5)
    blind = hard_negative_gate(RingFlux(), SPEC, a, device="cpu")
    every = hard_negative_gate(RingFlux(), SPEC, arc, device="cpu")
    assert blind["n_pairs"] == inj.size // 2 and blind["n_pairs_all"] == inj.size  # the odd ones: θ_E 1.5″ in 1.2″
    assert blind["auroc_all_pairs"] == pytest.approx(every["value"]) and blind["value"] != every["value"]
    a.theta_e_arcsec[inj] = 0.8
    none = hard_negative_gate(RingFlux(), SPEC, a, device="cpu")
    assert "only 0 of" in none["skipped"] and not none["passed"]


def test_run_gates_returns_all_five(arc):
    gates = run_gates(CoherentArc(), SPEC, arc, device="cpu")
    assert [g["name"] for g in gates] == [
        "core_lr_auc",
        "core_lr_auc_catalog",
        "radial_profile_lr_auc",
        "core_masked_drop",
        "hard_negative_auroc",
    ]
    assert all({"name", "value", "threshold", "passed", "blocking"} <= g.keys() for g in gates)


def test_gate_registry_owns_thresholds_and_blocking_flags(arc):
    from darkhaloscope.errors import InputError
    from darkhaloscope.training.gates import BLOCKING_GATES, GATES

    assert list(GATES) == [
        "core_lr_auc",
        "core_lr_auc_catalog",
        "radial_profile_lr_auc",
        "core_masked_drop",
        "hard_negative_auroc",
    ]
    assert BLOCKING_GATES == {"core_lr_auc", "core_masked_drop"}
    gates = run_gates(CoherentArc(), SPEC, arc, thresholds={"hard_negative_auroc": 0.999}, device="cpu")
    by = {g["name"]: g for g in gates}
    assert (
        by["hard_negative_auroc"]["threshold"] == 0.999
        and by["core_lr_auc"]["threshold"] == GATES["core_lr_auc"].threshold
    )
    assert all(g["blocking"] == GATES[g["name"]].blocking for g in gates)
    with pytest.raises(InputError, match="unknown gate"):
        run_gates(CoherentArc(), SPEC, arc, thresholds={"core_lr": 0.5}, device="cpu")


def test_core_gates_read_the_training_distribution_and_the_catalog_rows(core, arc):
    """The blocking gate reads what the network learns from (catalog rows and injections); the
    catalog gate reads the real positives and negatives alone, where the hosts can differ."""
    from darkhaloscope.training.data import concat_arrays

    mixed = concat_arrays([core, arc.subset(arc.kind == "injected_positive")])
    gates = {g["name"]: g for g in run_gates(CoherentArc(), SPEC, mixed, device="cpu")}
    assert gates["core_lr_auc"]["n"] == len(mixed) and gates["core_lr_auc_catalog"]["n"] == len(core)
    assert (
        not gates["core_lr_auc_catalog"]["passed"] and not gates["core_lr_auc_catalog"]["blocking"]
    )  # the planted shortcut


def _arcs_in_and_outside_the_core(host_boost: float = 1.0):
    """Negatives, injections of θ_E = 0.5″ (a blue blob in the core) and of θ_E = 2.6″ (a ring at
    r = 7 px, outside the core with a 1.2″ PSF) on hosts drawn alike; ``host_boost`` brightens the
    hosts of the injections (a planted host shortcut)."""
    from darkhaloscope.training.data import make_arrays

    rng = np.random.default_rng(21)
    n, size = 240, 33
    r = radius_grid(size, size)
    kind = np.array(["negative", "injected_positive", "injected_positive"] * (n // 3), object)
    te = np.where(kind == "negative", np.nan, np.tile([np.nan, 0.5, 2.6], n // 3)).astype(np.float32)
    amp = rng.uniform(2.0, 8.0, n) * np.where(kind == "negative", 1.0, host_boost)
    host = (
        amp[:, None, None, None]
        * np.exp(-0.5 * (r / 2.0) ** 2)[None, None]
        * np.array([0.5, 1.0, 1.4])[None, :, None, None]
    )
    blue = np.array([1.2, 1.0, 0.7])[None, :, None, None]
    arc = np.where((te == 0.5)[:, None, None, None], 8.0 * np.exp(-0.5 * (r / 1.5) ** 2)[None, None], 0.0)
    arc = arc + np.where((te == 2.6)[:, None, None, None], 3.0 * np.exp(-0.5 * ((r - 7.0) / 0.8) ** 2)[None, None], 0.0)
    image = (host + blue * arc + rng.standard_normal((n, 3, size, size))).astype(np.float32)
    arrays = make_arrays(image, (kind != "negative").astype(np.int8), kind=kind)
    arrays.theta_e_arcsec, arrays.psfsize_r = te, np.full(n, 1.2, np.float32)
    return arrays


def test_blocking_core_gate_reads_the_rows_whose_core_holds_no_arc():
    """An arc inside the core is evidence, not a shortcut: the blocking gate passes on the rows whose
    core holds no lensed light and records the value over all rows; a host shortcut still fails it."""
    arrays = _arcs_in_and_outside_the_core()
    core = next(g for g in run_gates(CoherentArc(), SPEC, arrays, device="cpu") if g["name"] == "core_lr_auc")
    assert core["passed"] and core["value"] < 0.65 and core["n"] == int(arcs_outside_core(arrays).sum()) == 160
    assert core["auroc_all_rows"] > 0.65 and core["n_all"] == 240  # over all rows the arcs in the core would fail it
    shortcut = _arcs_in_and_outside_the_core(host_boost=2.0)
    core = next(g for g in run_gates(CoherentArc(), SPEC, shortcut, device="cpu") if g["name"] == "core_lr_auc")
    assert not core["passed"] and core["value"] > 0.8


def test_masked_core_gate_is_measured_where_the_core_holds_no_arc():
    from darkhaloscope.training.data import make_arrays

    n = 6
    arrays = make_arrays(
        np.zeros((n, 3, 101, 101), np.float32),
        np.array([0, 0, 1, 1, 1, 1], np.int8),
        kind=np.array(
            ["negative", "negative", "real_positive", "injected_positive", "injected_positive", "injected_positive"],
            object,
        ),
    )
    # 5 px = 1.31 arcsec: an arc at theta_E = 1.0'' lies inside the masked core, one at 2.6'' outside
    # it with a 1.2'' PSF, one at 2.0'' is blurred into it
    arrays.theta_e_arcsec = np.array([np.nan, np.nan, np.nan, 1.0, 2.6, 2.0], np.float32)
    arrays.psfsize_r = np.full(n, 1.2, np.float32)
    assert arcs_outside_core(arrays, radius=5.0).tolist() == [True, True, False, False, True, False]
