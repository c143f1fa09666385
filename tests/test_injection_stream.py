"""Injections rendered on the fly: reproducible byte for byte from (hosts, spec, key), every host
its own arcs (independent of the other hosts and, to round-off, of the render chunk), fresh every
epoch (no arc twice), accepted by arc S/N, rendered in a central window that loses no arc flux, and
fed to training as host + arc with the host itself as the paired control."""

import json

import numpy as np
import pyarrow as pa
import pytest
import torch

from darkhaloscope.errors import InputError
from darkhaloscope.lensing.bank import InjectionConfig, _col, task_batches
from darkhaloscope.lensing.render import RenderConfig, arc_snr, render_lensed_sources
from darkhaloscope.lensing.stream import StreamSpec, add_window, draw_injections, slot_thresholds, window_of
from darkhaloscope.training import dataset as dataset_module
from darkhaloscope.training.data import make_arrays, validation_arrays, with_hosts
from darkhaloscope.training.dataset import AugmentedStampDataset, batches_for_plan
from darkhaloscope.training.preprocess import PreprocessSpec, arc_clears_core, core_mask, preprocess

torch.set_num_threads(1)
S = 41


def _hosts(n=10):
    return pa.table(
        {
            "object_id": np.arange(n, dtype=np.int64) * 7 + 100,
            "ra": np.linspace(150, 151, n),
            "dec": np.zeros(n),
            "split": ["train"] * n,
            "type": ["DEV"] * n,
            "psfsize_g": np.full(n, 1.3),
            "psfsize_r": np.linspace(1.0, 1.5, n),
            "psfsize_z": np.full(n, 1.1),
            "psfdepth_g": np.full(n, 2e3),
            "psfdepth_r": np.full(n, 1e3),
            "psfdepth_z": np.full(n, 2e2),
            "dx_pix": np.linspace(-0.4, 0.4, n).astype(np.float32),
            "dy_pix": np.zeros(n, np.float32),
        }
    )


def _stamps(n=10, sigma=0.004):
    rng = np.random.default_rng(1)
    yy, xx = np.mgrid[:S, :S] - (S - 1) / 2
    host = np.exp(-0.5 * (xx**2 + yy**2) / 4.0)[None, None] * np.array([0.2, 0.5, 0.8])[None, :, None, None]
    images = (host + rng.normal(0, sigma, (n, 3, S, S))).astype(np.float32)
    return images, np.full_like(images, 1.0 / sigma**2)


def _spec(**kw):
    base = dict(injections_per_host=1, val_injections_per_host=2, min_arc_snr=8.0, window=33, render_chunk=8)
    return StreamSpec(**{**base, **kw})


@pytest.fixture(scope="module")
def drawn():
    _, iv = _stamps()
    return draw_injections(_hosts(), iv, _spec(), ("train", 0, 0), 2)


def test_reproducible_every_host_its_own_arcs_chunk_independent_to_round_off(drawn):
    _, iv = _stamps()
    assert drawn.arcs.shape == (20, 3, 33, 33) and drawn.arcs.dtype == np.float32
    assert np.array_equal(drawn.host_row, np.repeat(np.arange(10), 2))  # two arcs in every host
    again = draw_injections(_hosts(), iv, _spec(), ("train", 0, 0), 2)
    assert again.arcs.tobytes() == drawn.arcs.tobytes() and np.array_equal(again.candidate, drawn.candidate)
    # the render chunk (part of the spec) and the other hosts change the batched FFTs' round-off only
    for other in (
        draw_injections(_hosts(), iv, _spec(render_chunk=5), ("train", 0, 0), 2),
        draw_injections(_hosts().slice(0, 4), iv[:4], _spec(), ("train", 0, 0), 2),
    ):
        k = len(other)
        assert np.array_equal(other.candidate, drawn.candidate[:k]) and np.array_equal(other.seed, drawn.seed[:k])
        np.testing.assert_allclose(other.arcs, drawn.arcs[:k], rtol=0, atol=1e-6 * drawn.arcs.max())


def test_fresh_arcs_every_epoch_never_the_same_twice(drawn):
    _, iv = _stamps()
    epochs = [drawn] + [draw_injections(_hosts(), iv, _spec(), ("train", 0, e), 2) for e in (1, 2)]
    seeds = np.concatenate([d.seed for d in epochs])
    assert np.unique(seeds).size == seeds.size  # every system of every epoch is a new draw
    arcs = {a.tobytes() for d in epochs for a in d.arcs}
    assert len(arcs) == 60
    te = np.concatenate([d.theta_e_arcsec for d in epochs])
    assert te.min() >= 0.5 and te.max() <= 3.0 and np.unique(te).size == te.size  # θ_E drawn, not gridded
    other_seed = draw_injections(_hosts(), iv, _spec(), ("train", 1, 0), 2)
    assert not np.intersect1d(other_seed.seed, drawn.seed).size


def test_accepted_by_arc_snr_against_the_host_noise(drawn):
    _, iv = _stamps()
    assert np.all(drawn.arc_snr >= 8.0) and drawn.n_below_min == 0
    recomputed = arc_snr(torch.from_numpy(drawn.arcs), torch.from_numpy(window_of(iv, 33)[drawn.host_row].copy()))[:, 1]
    np.testing.assert_allclose(recomputed.numpy(), drawn.arc_snr, rtol=1e-6)
    assert drawn.candidate.max() >= 1  # some tries were too faint and drawn again for their host
    # no try reaches an impossible S/N: every slot keeps its brightest, and says so
    hard = draw_injections(_hosts(2), iv[:2], _spec(min_arc_snr=1e6), ("train", 0, 0), 1)
    assert hard.n_below_min == 2 and np.all(hard.candidate >= 0) and np.all(np.isfinite(hard.arc_snr))


def test_faint_slots_take_the_lower_threshold_in_training_only():
    """A stable-hash share of the slots is accepted at faint_min_arc_snr; the rest, and every
    validation slot, at min_arc_snr; with faint_fraction 0 the stream is the single-threshold one."""
    spec = _spec(min_arc_snr=8.0, faint_fraction=0.5, faint_min_arc_snr=2.0)
    ids = np.arange(4000, dtype=np.int64)
    thr = slot_thresholds(spec, ("train", 0, 0), ids, np.zeros_like(ids))
    assert set(np.unique(thr)) == {2.0, 8.0} and abs(np.mean(thr == 2.0) - 0.5) < 0.03
    assert np.array_equal(thr, slot_thresholds(spec, ("train", 0, 0), ids, np.zeros_like(ids)))
    assert not np.array_equal(
        thr, slot_thresholds(spec, ("train", 0, 1), ids, np.zeros_like(ids))
    )  # re-drawn each epoch
    assert np.all(slot_thresholds(spec.validation, ("val",), ids, np.zeros_like(ids)) == 8.0)
    _, iv = _stamps(40)
    hosts = _hosts(40)
    mixed = draw_injections(hosts, iv, spec, ("train", 0, 0), 1)
    faint = slot_thresholds(spec, ("train", 0, 0), _col(hosts, "object_id", np.int64), np.zeros(40, np.int64)) == 2.0
    assert mixed.n_below_min == 0 and np.all(mixed.arc_snr[~faint] >= 8.0) and np.all(mixed.arc_snr[faint] >= 2.0)
    assert np.any(mixed.arc_snr[faint] < 8.0)  # the faint slots keep arcs the single threshold would redraw
    single = draw_injections(hosts, iv, _spec(min_arc_snr=8.0), ("train", 0, 0), 1)
    same = draw_injections(
        hosts, iv, _spec(min_arc_snr=8.0, faint_fraction=0.0, faint_min_arc_snr=2.0), ("train", 0, 0), 1
    )
    assert same.arcs.tobytes() == single.arcs.tobytes()


def test_window_keeps_the_arc_flux_of_a_full_stamp_render():
    """The 65 px window of the largest arcs (θ_E near 3″) against the same systems on 101 px."""
    hosts = _hosts(4)
    spec = StreamSpec(
        window=65,
        min_arc_snr=0.0,
        render_chunk=4,
        injection=InjectionConfig(priors=InjectionConfig().priors.with_overrides(theta_e_arcsec=("uniform", 2.8, 3.0))),
    )
    iv = np.full((4, 3, 101, 101), 1e4, np.float32)
    d = draw_injections(hosts, iv, spec, ("val",), 1)
    # the same systems rendered on the whole stamp by the engine
    from darkhaloscope.lensing.bank import _build_tasks
    from darkhaloscope.lensing.priors import draw_system_parameters

    cfg = spec.config
    params = draw_system_parameters(d.seed, cfg.priors, extra=("theta_e_arcsec", "z_l"))
    tasks, _ = _build_tasks(
        hosts,
        params["theta_e_arcsec"],
        params["z_l"],
        d.seed,
        np.zeros(4, np.int64),
        d.candidate,
        np.full(4, -1),
        "training",
        cfg,
        params,
        host_row=d.host_row,
    )
    lens, src = task_batches(tasks, "cpu", torch.float32, cfg.priors)
    psf = torch.as_tensor(np.stack([_col(tasks, f"psf_fwhm_{b}") for b in "grz"], axis=1), dtype=torch.float32)
    full = render_lensed_sources(lens, src, psf, RenderConfig()).arc.numpy()
    inner = window_of(full, 65)
    assert np.all(1 - d.arcs.sum(axis=(1, 2, 3)) / full.sum(axis=(1, 2, 3)) < 1e-3)
    np.testing.assert_allclose(d.arcs, inner, atol=2e-3 * full.max())


def test_spec_round_trips_and_rejects_bad_values():
    spec = _spec()
    assert StreamSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    mixed = _spec(faint_fraction=0.25, faint_min_arc_snr=3.0)
    assert StreamSpec.from_dict(json.loads(json.dumps(mixed.to_dict()))) == mixed
    # a spec recorded before the faint slots existed reads as a single-threshold stream
    old = {k: v for k, v in spec.to_dict().items() if k not in ("faint_fraction", "faint_min_arc_snr")}
    assert StreamSpec.from_dict(old) == spec and spec.faint_fraction == 0.0
    for bad in (
        {"window": 32},
        {"min_arc_snr": -1.0},
        {"injections_per_host": 0},
        {"faint_fraction": 1.5},
        {"faint_min_arc_snr": float("nan")},
    ):
        with pytest.raises(InputError):
            _spec(**bad)
    with pytest.raises(InputError, match="unknown fields"):
        StreamSpec.from_dict({**spec.to_dict(), "bogus": 1})
    _, iv = _stamps()
    with pytest.raises(InputError, match="r-band PSF size"):
        draw_injections(
            _hosts().set_column(_hosts().schema.get_field_index("psfsize_r"), "psfsize_r", pa.array(np.zeros(10))),
            iv,
            _spec(),
            ("val",),
            2,
        )
    with pytest.raises(InputError, match="lack columns"):
        draw_injections(_hosts().drop(["dx_pix"]), iv, _spec(), ("val",), 2)


def _arrays():
    images, iv = _stamps()
    n_pos = 4
    rng = np.random.default_rng(2)
    pos = (images[:n_pos] + rng.normal(0, 0.01, images[:n_pos].shape)).astype(np.float32)
    a = make_arrays(np.concatenate([pos, images]), np.r_[np.ones(n_pos), np.zeros(10)].astype(np.int8))
    return with_hosts(a, np.arange(n_pos, n_pos + 10), iv, _hosts(), _spec())


def test_epoch_holds_rows_and_an_injection_into_every_host():
    a = _arrays()
    spec = PreprocessSpec()
    ds = AugmentedStampDataset(a, spec, seed=3, augment=False)
    n, m, f = len(a), 10, ds.first_injection
    plan = ds.epoch_plan(0)
    assert plan.size == n + m and set(plan.tolist()) == set(range(n)) | set(range(f, f + m))
    draw = ds.prepare_epoch(0)
    hosts = a.host_rows()[draw.host_row]
    assert sorted(hosts.tolist()) == sorted(np.flatnonzero(a.host_index >= 0).tolist())
    x, y, w = ds.__getitems__([(0, f + k) for k in range(m)] + [(0, int(r)) for r in hosts])
    assert y.tolist() == [1.0] * m + [0.0] * m and torch.all(w == 1)
    assert torch.equal(x[:m], preprocess(add_window(a.image[hosts], draw.arcs), spec))  # host + its fresh arc
    assert torch.equal(x[m:], preprocess(a.image[hosts], spec))  # the paired control: the same host, a negative row
    assert not np.array_equal(ds.prepare_epoch(1).arcs, draw.arcs)
    # hard negatives of injections: host + azimuthally shuffled arc, label 0, only when asked for
    hn = AugmentedStampDataset(a, spec, seed=3, augment=False, hard_negative_prob=1.0)
    assert hn.epoch_plan(0).size == n + 2 * m
    _, y_hn, _ = hn.__getitems__([(0, f + m + k) for k in range(m)])
    assert torch.all(y_hn == 0)


def test_rows_preprocessed_once_give_the_batches_preprocessed_every_time(monkeypatch):
    a = _arrays()
    kw = dict(seed=3, hard_negative_prob=0.5, core_dropout_prob=0.3, core_dropout_spares_inner_arcs=True)
    a.psfsize_r = np.full(len(a), 1.1, np.float32)
    once = AugmentedStampDataset(
        a, PreprocessSpec(crop=33, residual="append", stretch="asinh", colour_difference=True), **kw
    )
    assert once._rows_x is not None and once._rows_x.shape == (len(a), 7, 33, 33)
    monkeypatch.setattr(dataset_module, "PREPROCESSED_ROWS_MAX_BYTES", 0)
    every = AugmentedStampDataset(a, once.spec, **kw)
    assert every._rows_x is None
    for epoch in (0, 1):
        for keys in batches_for_plan(
            once.epoch_plan(epoch), epoch, 5
        ):  # mixed batches: rows, injections, hard negatives
            for p, q in zip(once.__getitems__(keys), every.__getitems__(keys)):
                assert torch.equal(p, q)


def test_validation_set_is_fixed_and_pairs_each_injection_with_its_host():
    a = _arrays()
    v1, v2 = validation_arrays(a), validation_arrays(a)
    assert v1.image.tobytes() == v2.image.tobytes()
    inj = np.flatnonzero(v1.kind == "injected_positive")
    assert inj.size == 2 * 10 and np.all(v1.label[inj] == 1) and np.all(v1.arc_snr[inj] >= 8.0)
    hosts = np.flatnonzero(a.host_index >= 0)
    # the control of every injection is its host, itself a negative of the validation set
    for c in v1.controls_for(inj):
        assert any(np.array_equal(c, a.image[h]) for h in hosts)
    assert np.all(v1.label[: len(a)][hosts] == 0)


def test_core_dropout_can_spare_the_injections_whose_arc_reaches_into_the_core():
    a = _arrays()
    a.psfsize_r = np.full(len(a), 1.1, np.float32)  # the hosts' r-band PSF FWHM [arcsec]
    ds = AugmentedStampDataset(a, PreprocessSpec(), seed=3, core_dropout_prob=1.0, core_dropout_spares_inner_arcs=True)
    f, m = ds.first_injection, ds.m
    draw = ds.prepare_epoch(0)
    inside = ~arc_clears_core(draw.theta_e_arcsec, a.psfsize_r[a.host_rows()[draw.host_row]])
    assert inside.any() and not inside.all()
    x, y, _ = ds.__getitems__([(0, f + k) for k in range(m)] + [(0, r) for r in range(len(a))])
    zeroed = (x[..., torch.from_numpy(core_mask(S, S, 5.0))] == 0).flatten(1).all(dim=1)
    # the injections whose arc reaches into the core keep it; every other row loses it
    assert zeroed.tolist() == (~inside).tolist() + [True] * len(a)
    everything = AugmentedStampDataset(a, PreprocessSpec(), seed=3, core_dropout_prob=1.0)
    assert (
        everything.__getitems__([(0, f + k) for k in range(m)])[0][..., torch.from_numpy(core_mask(S, S, 5.0))] == 0
    ).all()
