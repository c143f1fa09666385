"""Shortcut gates: a planted core shortcut fails, arc-only differences pass; model gates measure what they claim;
the look-alike gates pass an arc finder on lenses whose hosts differ from the negatives and fail a model
that learnt the hosts."""

import numpy as np
import pytest
import torch
from torch import nn

from darkhaloscope.training.data import synthetic_arrays
from darkhaloscope.training.gates import (
    arcs_outside_core,
    core_features,
    core_lookalike_gate,
    core_lr_gate,
    core_masked_drop_gate,
    cross_validated_lr_auc,
    hard_negative_gate,
    host_core,
    point_symmetric_part,
    real_lens_shuffle_gate,
    run_gates,
)
from darkhaloscope.training.preprocess import PreprocessSpec, core_mask, preprocess, radial_profile, radius_grid

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


class CoreColour(nn.Module):
    """Scores by how red the r < 5 px core is (z minus g): a model that learnt the lenses' hosts."""

    def forward(self, x):
        m = torch.from_numpy(core_mask(x.shape[-2], x.shape[-1], 5.0))
        return x[:, 2][:, m].mean(dim=1) - x[:, 0][:, m].mean(dim=1)


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
    # the radial profile does see a ring: evidence, which is why no gate reads it on its own
    profile = radial_profile(preprocess(arc.image, SPEC), 1.0, "mean").flatten(1).numpy()
    assert cross_validated_lr_auc(profile, arc.label) > 0.8


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


NAMES = ["core_lr_auc", "core_lookalike_auroc", "real_lens_shuffle_auroc", "core_masked_drop", "hard_negative_auroc"]


def test_run_gates_returns_all_five(arc):
    gates = run_gates(CoherentArc(), SPEC, arc, device="cpu")
    assert [g["name"] for g in gates] == NAMES
    assert all({"name", "value", "threshold", "passed", "blocking"} <= g.keys() for g in gates)


def test_gate_registry_owns_thresholds_and_blocking_flags(arc):
    from darkhaloscope.errors import InputError
    from darkhaloscope.training.gates import BLOCKING_GATES, GATES

    assert list(GATES) == NAMES
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
    look-alike gates read the real positives and negatives alone, where the hosts can differ."""
    from darkhaloscope.training.data import concat_arrays

    mixed = concat_arrays([core, arc.subset(arc.kind == "injected_positive")])
    gates = {g["name"]: g for g in run_gates(CoherentArc(), SPEC, mixed, device="cpu")}
    assert gates["core_lr_auc"]["n"] == len(mixed) and gates["core_lookalike_auroc"]["n"] == len(core)
    assert gates["real_lens_shuffle_auroc"]["n_lenses"] == int(core.label.sum())
    assert gates["core_lookalike_auroc"]["n_negatives"] == int((core.label == 0).sum())
    n_neg = int((core.label == 0).sum())
    assert gates["core_lookalike_auroc"]["n_lookalikes"] == min(int(core.label.sum()), n_neg // 2)
    assert not gates["core_lookalike_auroc"]["blocking"] and not gates["real_lens_shuffle_auroc"]["blocking"]


def _lenses_on_their_own_hosts(n: int = 300, seed: int = 31):
    """Catalog rows like the demo's: negatives on hosts of every brightness and colour, and real
    lenses (a quarter of the rows) on the hosts lenses have, brighter and redder than most, with a
    blue arc at 6.5 <= r < 9.5 px (outside the r < 5 px core). Arbitrary flux units, unit noise, 33 px stamps."""
    from darkhaloscope.training.data import make_arrays

    rng = np.random.default_rng(seed)
    size = 33
    r = radius_grid(size, size)
    phi = np.arctan2(*np.mgrid[0:size, 0:size] - (size - 1) / 2.0)
    label = (np.arange(n) % 4 == 0).astype(np.int8)
    red, blue = np.array([0.5, 1.0, 1.4]), np.array([1.2, 1.0, 0.8])
    mix = np.where(label == 1, 1.0, rng.uniform(0.0, 1.0, n))  # share of red light in the host
    colour = mix[:, None] * red + (1.0 - mix[:, None]) * blue
    amp = np.where(label == 1, rng.uniform(5.0, 9.0, n), rng.uniform(2.0, 9.0, n))
    host = amp[:, None, None, None] * colour[:, :, None, None] * np.exp(-0.5 * (r / 2.0) ** 2)[None, None]
    ang = rng.uniform(-np.pi, np.pi, n)
    dphi = np.angle(np.exp(1j * (phi[None] - ang[:, None, None])))
    rad = rng.uniform(6.5, 9.5, n)
    arc = 4.0 * np.exp(-0.5 * ((r[None] - rad[:, None, None]) / 0.8) ** 2) * (np.abs(dphi) < np.pi / 3)
    lensed = label[:, None, None, None] * arc[:, None] * blue[None, :, None, None]
    image = host + lensed + rng.standard_normal((n, 3, size, size))
    return make_arrays(image.astype(np.float32), label)


@pytest.fixture(scope="module")
def lens_hosts():
    return _lenses_on_their_own_hosts()


def test_point_symmetric_part_keeps_the_host_and_half_an_arc(lens_hosts):
    a = lens_hosts
    lens = np.flatnonzero(a.label == 1)
    sym = point_symmetric_part(a.image[lens])
    assert np.allclose(sym, sym[..., ::-1, ::-1]) and np.allclose(point_symmetric_part(sym), sym)
    r = radius_grid(33, 33)
    ring, core = (r >= 6) & (r < 10), r < 2
    # the flux at every radius stays; the host's core stays as it is; the arc's half leaves its side
    assert np.allclose(sym[..., ring].sum(-1), a.image[lens][..., ring].sum(-1), atol=1e-3)
    assert abs((a.image[lens][..., core] - sym[..., core]).mean()) < 0.2
    assert np.abs(a.image[lens] - sym)[..., ring].sum(-1).mean() > 20
    assert host_core(a.image[:4], SPEC).shape == (4, 3 * 5)


def test_core_lookalike_gate_passes_an_arc_finder_on_lens_hosts_and_fails_a_host_shortcut(lens_hosts):
    """The lenses' hosts differ from the negatives (a population difference that the logistic
    regression alone sees, as on the demos); a finder of arcs does not score the negatives that look
    like the lenses' hosts up, a model that learnt the hosts' colour does."""
    a = lens_hosts
    arcs = core_lookalike_gate(CoherentArc(), SPEC, a.image, a.label)
    hosts = core_lookalike_gate(CoreColour(), SPEC, a.image, a.label)
    assert arcs["lr_auroc"] == hosts["lr_auroc"] > 0.8  # the old gate's question: the population, whatever the model
    assert arcs["passed"] and arcs["value"] < 0.65 and not arcs["blocking"]
    assert not hosts["passed"] and hosts["value"] > 0.8
    assert arcs["n_lookalikes"] == int(a.label.sum()) and arcs["n_negatives"] == int((a.label == 0).sum())


def test_real_lens_shuffle_gate_passes_an_arc_finder_and_fails_a_host_shortcut(lens_hosts):
    """A lens against itself with its antisymmetric part shuffled within rings: a finder of arcs
    tells them apart, a model of the hosts' colour cannot (the host stays), nor one of the flux at
    the arcs' radii (it stays too)."""
    a = lens_hosts
    arcs = real_lens_shuffle_gate(CoherentArc(), SPEC, a)
    hosts = real_lens_shuffle_gate(CoreColour(), SPEC, a)
    ring = real_lens_shuffle_gate(RingFlux(), SPEC, a)
    assert arcs["passed"] and arcs["value"] > 0.9 and arcs["n_lenses"] == int(a.label.sum()) and not arcs["blocking"]
    assert not hosts["passed"] and abs(hosts["value"] - 0.5) < 0.1
    assert not ring["passed"] and abs(ring["value"] - 0.5) < 0.1
    none = real_lens_shuffle_gate(CoherentArc(), SPEC, a.subset(a.label == 0))
    assert "skipped" in none and not none["passed"]


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
