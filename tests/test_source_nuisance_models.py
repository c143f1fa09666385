"""Source models (sersic | sersic_clumps | cosmos | a mix) and nuisance models (none | survey) of the
injections: COSMOS sources against lenstronomy's INTERPOL, the settings' checks, the per-seed model
choice, the bank and the stream rendering each model and recording it."""

import json

import numpy as np
import pytest
import torch

from darkhaloscope.errors import InputError
from darkhaloscope.lensing.bank import (
    InjectionConfig,
    injection_config,
    plan_injection_grid,
    render_injection_batch,
    selection_conditioning,
)
from darkhaloscope.lensing.nuisance import (
    arc_psf_anisotropy,
    psf_ellipticity,
    psfex_ellipticity_sigma,
    randomization,
)
from darkhaloscope.lensing.render import RenderConfig, lenstronomy_reference, render_lensed_sources
from darkhaloscope.lensing.sie import LensBatch
from darkhaloscope.lensing.source import SourceBatch
from darkhaloscope.lensing.source_models import (
    assign_source_models,
    canonical_source_model,
    packaged_templates,
    parse_source_model,
)
from darkhaloscope.lensing.stream import StreamSpec, draw_injections
from darkhaloscope.psf import psf_kernels
from resources.settings import validate
from tests.test_injection_bank_lib import SMALL, _hosts

torch.set_num_threads(1)
LENS = dict(theta_e=1.2, e1=0.05, e2=-0.03, center_x=0.02, center_y=-0.01, gamma1=0.02, gamma2=0.01)


def _cosmos_pair(flip: int, adaptive: bool, dtype=torch.float64):
    """(ours, lenstronomy's) r-band image of one COSMOS source (template 2 at R_e 0.3″) behind LENS."""
    t = packaged_templates()
    tmpl = t.images[2]
    scale = t.pixel_scale[2] * 0.3 / t.hlr_arcsec[2]
    phi, cx, cy = 0.7, 0.1, -0.05
    cfg = RenderConfig(n_pix=41, supersample=4, psf_profile="gaussian", adaptive=adaptive)
    lens = LensBatch.from_arrays(device="cpu", dtype=dtype, **{k: [v] for k, v in LENS.items()})
    src = SourceBatch.from_arrays(
        flux=[[1.0, 2.0, 3.0]], r_sersic=0.3, n_sersic=1.0, center_x=cx, center_y=cy, dtype=dtype
    ).with_images([tmpl], [0], [scale], [phi], [flip])
    res = render_lensed_sources(lens, src, [[1.0, 1.0, 1.0]], cfg)
    image = dict(template=tmpl[:, ::-1] if flip else tmpl, scale=scale, r_sersic=0.3, phi=phi, center_x=cx, center_y=cy)
    ref, mu = lenstronomy_reference(LENS, {}, 1.0, 2.0, cfg, image=image)
    return res.arc[0, 1].double().numpy(), ref, float(res.magnification[0]), mu


@pytest.mark.parametrize("flip", [0, 1])
def test_cosmos_source_matches_lenstronomy_interpol(flip):
    # float64, every pixel supersampled: the same bilinear interpolation, ray shooting and PSF
    ours, ref, mu, mu_ref = _cosmos_pair(flip, adaptive=False)
    assert np.abs(ours - ref).max() <= 1e-8 * ref.max()
    assert mu == pytest.approx(mu_ref, rel=1e-8)
    # the bank's numerics (float32, adaptive refinement within the template's footprint)
    ours32, ref32, _, _ = _cosmos_pair(flip, adaptive=True, dtype=torch.float32)
    assert np.abs(ours32 - ref32).max() <= 1e-3 * ref32.max()


def test_cosmos_templates_have_unit_flux_and_no_noise_floor():
    t = packaged_templates()
    assert len(t) == 10
    for im in t.images:
        assert im.sum() == pytest.approx(1.0) and im.min() == 0.0


def test_source_model_specs_parse_and_refuse_unknown_names():
    assert parse_source_model("cosmos") == (("cosmos", 1.0),)
    assert canonical_source_model(" sersic:1, cosmos:3 ") == "sersic:0.25,cosmos:0.75"
    for bad, match in (
        ("gaussian", r"unknown source model 'gaussian'.*known: \['sersic', 'sersic_clumps', 'cosmos'\]"),
        ("sersic:0", "must be a finite number > 0"),
        ("sersic:x", "is not a number"),
        ("sersic:1,sersic:2", "appears twice"),
        ("sersic,cosmos", "is not a number"),
        ("", "empty"),
    ):
        with pytest.raises(InputError, match=match):
            parse_source_model(bad)
    with pytest.raises(InputError, match="unknown source model"):
        InjectionConfig(source_model="sersik")
    with pytest.raises(InputError, match=r"unknown nuisance model 'noisy'.*known: \['none', 'survey'\]"):
        InjectionConfig(nuisance="noisy")


def test_settings_refuse_unknown_source_and_nuisance_names_naming_the_variable():
    with pytest.raises(InputError, match=r"DHS_SOURCE_MODEL='real'.*known: \['sersic', 'sersic_clumps', 'cosmos'\]"):
        validate({"DHS_SOURCE_MODEL": "real"})
    with pytest.raises(InputError, match="DHS_NUISANCE='survey2'"):
        validate({"DHS_NUISANCE": "survey2"})
    validate({"DHS_SOURCE_MODEL": "sersic:0.5,cosmos:0.5", "DHS_NUISANCE": "survey"})


def test_a_mix_assigns_each_seed_its_model_by_its_weight():
    seeds = np.arange(4000, dtype=np.int64) * 7919
    m = assign_source_models(seeds, "sersic:0.2,sersic_clumps:0.3,cosmos:0.5")
    frac = {k: float(np.mean(m == k)) for k in ("sersic", "sersic_clumps", "cosmos")}
    assert frac == pytest.approx({"sersic": 0.2, "sersic_clumps": 0.3, "cosmos": 0.5}, abs=0.03)
    # a seed's model depends on the seed only
    np.testing.assert_array_equal(assign_source_models(seeds[::-1], "sersic:0.2,sersic_clumps:0.3,cosmos:0.5"), m[::-1])


def _bank(source_model="sersic", nuisance="none"):
    cfg = InjectionConfig(per_cell=1, render=SMALL, render_chunk=4, source_model=source_model, nuisance=nuisance)
    tasks = plan_injection_grid(_hosts(27), cfg).slice(0, 6)
    host = np.random.default_rng(0).normal(0, 0.005, (6, 3, 61, 61)).astype(np.float32)
    return tasks, render_injection_batch(tasks, host, np.full_like(host, 1 / 0.005**2), config=cfg)


@pytest.mark.parametrize("model", ["sersic_clumps", "cosmos", "sersic:0.5,cosmos:0.5"])
def test_the_bank_renders_each_source_model_reproducibly_with_its_flux(model):
    tasks, (_, arc0, p0) = _bank()
    _, (_, arc, p) = _bank(model)
    _, (_, arc2, _) = _bank(model)
    assert arc.tobytes() == arc2.tobytes()
    assert not np.array_equal(arc, arc0)
    ok = np.array(p.column("success").to_pylist())
    mu = np.array(p.column("magnification").to_pylist())[ok]
    src_r = np.array(tasks.column("src_mag_r").to_pylist())[ok]
    np.testing.assert_allclose(
        np.array(p.column("lensed_mag_r").to_pylist())[ok], src_r - 2.5 * np.log10(mu), atol=0.01
    )


def test_survey_nuisance_makes_the_arcs_psf_elliptical_by_the_psfex_spread():
    _, (_, arc0, _) = _bank()
    _, (_, arc, _) = _bank(nuisance="survey")
    assert not np.array_equal(arc, arc0)
    # the same total flux: the anisotropy reshapes the PSF only
    np.testing.assert_allclose(arc.sum(axis=(2, 3)), arc0.sum(axis=(2, 3)), rtol=1e-3)
    sigma = psfex_ellipticity_sigma()
    assert 0.0 < sigma < 0.3 and randomization("survey").psf_e_sigma == sigma and randomization("none") is None
    e1, e2 = arc_psf_anisotropy("survey", np.arange(2000), "cpu", torch.float64)
    assert float(torch.sqrt(torch.mean(torch.cat([e1[:, 0], e2[:, 0]]) ** 2))) == pytest.approx(sigma, rel=0.1)
    assert arc_psf_anisotropy("none", np.arange(3), "cpu", torch.float64) == (None, None)


def test_psf_ellipticity_recovers_an_elliptical_kernel():
    k = psf_kernels(
        torch.tensor([1.2], dtype=torch.float64),
        15,
        profile="gaussian",
        e1=torch.tensor([0.1], dtype=torch.float64),
        e2=torch.tensor([-0.05], dtype=torch.float64),
        pixel_scale=0.262,
    )
    assert psf_ellipticity(k[0].numpy()) == pytest.approx((0.1, -0.05), abs=1e-6)


def test_the_models_are_recorded_with_the_plan_and_the_stream():
    cfg = injection_config("demo", source_model="cosmos:1,sersic:1", nuisance="survey")
    cond = selection_conditioning(cfg, ("DEV",), {}, {})
    assert cond["source_model"] == "cosmos:0.5,sersic:0.5" and cond["nuisance"] == "survey"
    assert selection_conditioning(InjectionConfig(), ("DEV",), {}, {})["source_model"] == "sersic"
    spec = StreamSpec(injection=InjectionConfig(salt="s", source_model="sersic_clumps", nuisance="survey"))
    d = json.loads(json.dumps(spec.to_dict()))
    assert d["source_model"] == "sersic_clumps" and d["nuisance"] == "survey"
    back = StreamSpec.from_dict(d)
    assert back.config.source_model == "sersic_clumps" and back.config.nuisance == "survey"
    # a stream recorded before the models existed reads as the defaults
    old = {k: v for k, v in d.items() if k not in ("source_model", "nuisance")}
    assert StreamSpec.from_dict(old).config.source_model == "sersic"
    assert StreamSpec.from_dict(old).config.nuisance == "none"


def test_the_stream_draws_cosmos_sources_under_survey_nuisance():
    import tests.test_injection_stream as ts

    _, iv = ts._stamps(4)
    base = dict(injections_per_host=1, val_injections_per_host=1, min_arc_snr=8.0, window=33, render_chunk=8)
    spec = StreamSpec(**base, injection=InjectionConfig(salt="t", source_model="cosmos", nuisance="survey"))
    a = draw_injections(ts._hosts(4), iv, spec, ("train", 0, 0), 1)
    b = draw_injections(ts._hosts(4), iv, spec, ("train", 0, 0), 1)
    assert a.arcs.tobytes() == b.arcs.tobytes() and np.all(a.arc_snr > 0)
    plain = StreamSpec(**base, injection=InjectionConfig(salt="t"))
    assert not np.array_equal(draw_injections(ts._hosts(4), iv, plain, ("train", 0, 0), 1).arcs, a.arcs)


@pytest.mark.parametrize(
    ("source_model", "nuisance"), [("cosmos", "none"), ("sersic_clumps", "survey"), ("sersic:1,cosmos:1", "survey")]
)
def test_the_banks_lenstronomy_audit_renders_each_rows_source_and_psf(source_model, nuisance):
    # the plan records its models and the bank renders by them (whatever the render config says),
    # and the audit re-draws each row's source and PSF from its seed for lenstronomy
    from darkhaloscope.constants import STAMP_SIZE
    from darkhaloscope.lensing.bank import bank_table, plan_source_models, with_conditioning
    from darkhaloscope.lensing.verify import lenstronomy_agreement

    cfg = injection_config("demo", per_cell=1, host_splits=("train", "val", "test"), source_model=source_model)
    cfg = InjectionConfig(**{**cfg.__dict__, "nuisance": nuisance})
    tasks = with_conditioning(plan_injection_grid(_hosts(27), cfg), selection_conditioning(cfg, ["DEV"], {}, {}))
    assert plan_source_models(tasks, InjectionConfig()) == (cfg.source_model, nuisance)
    t = tasks.slice(0, 4)
    host = np.zeros((4, 3, STAMP_SIZE, STAMP_SIZE), np.float32)
    iv = np.full_like(host, 1e6)
    inj, arc, params = render_injection_batch(t, host, iv)
    plain = render_injection_batch(t.replace_schema_metadata(None), host, iv)[1]
    assert np.abs(arc - plain).max() > 1e-3 * np.abs(plain).max()
    agreement = lenstronomy_agreement(bank_table(t, params, inj, host), n_sample=3, priors=cfg.priors)
    assert agreement["ok"] and len(agreement["cases"]) == 3, agreement
