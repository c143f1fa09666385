"""Each registered lens profile against lenstronomy 1.14 (deflection, convergence and Hessian to
1e-5 relative on a grid of parameters), the composition by names, and a toy profile added in this
file alone (the one-module contract of ``darkhaloscope.lensing.profiles``)."""

import itertools
import math
import pickle

import numpy as np
import pytest
import torch

from darkhaloscope.errors import InputError
from darkhaloscope.lensing.profiles import (
    DEFAULT_PROFILES,
    REGISTRY,
    LensBatch,
    Param,
    Profile,
    get_profile,
    lens_model,
    register,
)
from darkhaloscope.lensing.profiles.base import CENTER_X, CENTER_Y, expand
from darkhaloscope.lensing.sie import ellipticity_from_phi_q, hessian, magnification, ray_shoot

pytest.importorskip("lenstronomy")
F64 = torch.float64


def _e(phi, q):
    e1, e2 = ellipticity_from_phi_q(torch.tensor(phi, dtype=F64), torch.tensor(q, dtype=F64))
    return float(e1), float(e2)


def _sie_grid():
    for te, q, phi in itertools.product((0.5, 1.3, 2.7), (0.25, 0.6, 0.95, 0.99999), (0.0, 0.7, 2.4)):
        e1, e2 = _e(phi, q)
        yield {"theta_e": te, "e1": e1, "e2": e2, "center_x": 0.11, "center_y": -0.07}


def _epl_grid():
    for te, gamma, q, phi in itertools.product((0.6, 1.8), (1.55, 1.85, 2.0, 2.25, 2.5), (0.3, 0.7, 0.999), (0.3, 1.9)):
        e1, e2 = _e(phi, q)
        yield {"theta_e": te, "gamma": gamma, "e1": e1, "e2": e2, "center_x": -0.05, "center_y": 0.13}


def _shear_grid():
    for g, phi in itertools.product((0.0, 0.03, 0.12), (0.0, 1.1, 2.5)):
        yield {"gamma1": g * math.cos(2 * phi), "gamma2": g * math.sin(2 * phi)}


def _multipole_grid(m):
    for a, phi in itertools.product((0.001, 0.02, 0.1), (-2.0, 0.0, 0.4, 1.7)):
        yield {f"a{m}": a, f"phi{m}": phi, "center_x": 0.08, "center_y": 0.02}


GRIDS = {
    "SIE": _sie_grid,
    "EPL": _epl_grid,
    "SHEAR": _shear_grid,
    "MULTIPOLE_M3": lambda: _multipole_grid(3),
    "MULTIPOLE_M4": lambda: _multipole_grid(4),
}


def _points(n=400, seed=3):
    rng = np.random.default_rng(seed)
    r = rng.uniform(0.05, 4.0, n)
    a = rng.uniform(0, 2 * np.pi, n)
    return r * np.cos(a), r * np.sin(a)


def _close(ours, ref, label):
    ref = np.asarray(ref, dtype=np.float64)
    scale = np.abs(ref).max()
    # 1e-5 relative per point; components that cancel to ~0 are compared against the field's scale
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-9 * max(scale, 1.0), err_msg=label)


@pytest.mark.parametrize("name", sorted(GRIDS))
def test_profile_matches_lenstronomy_on_a_parameter_grid(name):
    from lenstronomy.LensModel.lens_model import LensModel

    prof = get_profile(name)
    grid = list(GRIDS[name]())
    x, y = _points()
    batch = LensBatch.from_arrays(dtype=F64, profiles=(name,), **{k: [g[k] for g in grid] for k in grid[0]})
    xt = torch.tensor(x, dtype=F64).expand(len(grid), -1)
    yt = torch.tensor(y, dtype=F64).expand(len(grid), -1)
    ax, ay = (t.numpy() for t in prof.deflection(xt, yt, batch))
    kappa = prof.convergence(xt, yt, batch).numpy()
    fxx, fxy, fyy = (t.numpy() for t in prof.hessian(xt, yt, batch))
    for i, p in enumerate(grid):
        lt_name, kw = prof.to_lenstronomy(p)
        lm = LensModel([lt_name])
        rax, ray = lm.alpha(x, y, [kw])
        rxx, rxy, _, ryy = lm.hessian(x, y, [kw])
        label = f"{name} {p}"
        _close(ax[i], rax, label + " alpha_x")
        _close(ay[i], ray, label + " alpha_y")
        _close(kappa[i], lm.kappa(x, y, [kw]), label + " kappa")
        _close(fxx[i], rxx, label + " f_xx")
        _close(fxy[i], rxy, label + " f_xy")
        _close(fyy[i], ryy, label + " f_yy")


def test_every_registered_profile_declares_its_parameters_and_has_a_grid_here():
    assert set(GRIDS) <= set(REGISTRY)
    for name, prof in REGISTRY.items():
        assert prof.name == name
        assert prof.params and all(isinstance(p, Param) and p.unit is not None and p.low <= p.high for p in prof.params)
        assert prof.hessian_method == "analytic"
        for p in prof.params:
            if p.prior is not None:
                assert p.low <= p.prior[1] <= p.prior[2] <= p.high, p


def test_epl_with_gamma_2_is_the_sie():
    x, y = (torch.tensor(v, dtype=F64)[None] for v in _points(200))
    common = dict(theta_e=[1.4], e1=[0.12], e2=[-0.2], center_x=[0.1], center_y=[0.05])
    sie = LensBatch.from_arrays(dtype=F64, profiles=("SIE",), **common)
    epl = LensBatch.from_arrays(dtype=F64, profiles=("EPL",), gamma=[2.0], **common)
    for a, b in zip(get_profile("SIE").deflection(x, y, sie), get_profile("EPL").deflection(x, y, epl)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-13)


def test_epl_series_in_float32_meets_float32_precision():
    x, y = (torch.tensor(v, dtype=torch.float32)[None] for v in _points(200))
    kw = dict(theta_e=[1.4], gamma=[2.3], e1=[0.3], e2=[0.1])
    a32 = get_profile("EPL").deflection(x, y, LensBatch.from_arrays(profiles=("EPL",), **kw))
    a64 = get_profile("EPL").deflection(
        x.double(), y.double(), LensBatch.from_arrays(dtype=F64, profiles=("EPL",), **kw)
    )
    for a, b in zip(a32, a64):
        np.testing.assert_allclose(a.double().numpy(), b.numpy(), rtol=2e-5, atol=2e-6)


def test_composition_matches_lenstronomy_lens_model():
    from lenstronomy.LensModel.lens_model import LensModel

    names = ("EPL", "SHEAR", "MULTIPOLE_M3", "MULTIPOLE_M4")
    p = dict(theta_e=1.2, gamma=2.15, e1=0.1, e2=-0.05, center_x=0.07, center_y=-0.03)
    p.update(gamma1=0.03, gamma2=-0.02, a3=0.01, phi3=0.4, a4=0.02, phi4=-0.3)
    lens = LensBatch.from_arrays(dtype=F64, profiles=names, **{k: [v] for k, v in p.items()})
    assert lens.model().param_names == tuple(p)  # the centre is shared, declared once
    x, y = _points(300)
    xt, yt = torch.tensor(x, dtype=F64)[None], torch.tensor(y, dtype=F64)[None]
    lt_names, kws = zip(*(get_profile(n).to_lenstronomy(p) for n in names))
    lm = LensModel(list(lt_names))
    bx, by = ray_shoot(xt, yt, lens)
    rbx, rby = lm.ray_shooting(x, y, list(kws))
    np.testing.assert_allclose(bx[0].numpy(), rbx, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(by[0].numpy(), rby, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(
        1 / magnification(xt, yt, lens)[0].numpy(), 1 / lm.magnification(x, y, list(kws)), rtol=1e-7, atol=1e-9
    )
    assert hessian(xt, yt, lens)[0].shape == xt.shape


def test_default_batch_is_sie_plus_shear_and_round_trips():
    lens = LensBatch.from_arrays(theta_e=[1.0, 2.0], gamma1=0.01)
    assert type(lens) is LensBatch and lens.profiles == DEFAULT_PROFILES == ("SIE", "SHEAR")
    assert set(vars(lens)) == {"theta_e", "e1", "e2", "center_x", "center_y", "gamma1", "gamma2"}
    assert lens_model(DEFAULT_PROFILES).columns() == {
        "theta_e": "theta_e_arcsec",
        "e1": "lens_e1",
        "e2": "lens_e2",
        "center_x": "lens_center_x_arcsec",
        "center_y": "lens_center_y_arcsec",
        "gamma1": "shear_g1",
        "gamma2": "shear_g2",
    }
    epl = LensBatch.from_arrays(profiles=("EPL", "MULTIPOLE_M4"), theta_e=[1.0], gamma=[2.2], a4=[0.01])
    back = pickle.loads(pickle.dumps(epl))
    assert back.profiles == ("EPL", "MULTIPOLE_M4") and torch.equal(back.a4, epl.a4)
    assert epl.index(torch.tensor([0, 0])).gamma.tolist() == pytest.approx([2.2, 2.2])


def test_bad_lens_parameters_name_the_parameter():
    with pytest.raises(InputError, match="gamma"):
        LensBatch.from_arrays(profiles=("EPL",), theta_e=[1.0], gamma=[3.5])
    with pytest.raises(InputError, match="a4"):
        LensBatch.from_arrays(profiles=("SIE", "MULTIPOLE_M4"), theta_e=[1.0], a4=[-0.1])
    with pytest.raises(InputError, match="NFW_TYPO"):
        LensBatch.from_arrays(profiles=("NFW_TYPO",), theta_e=[1.0])
    with pytest.raises(InputError, match="gamma"):
        LensBatch.from_arrays(theta_e=[1.0], gamma=[2.0])  # not a parameter of SIE + SHEAR
    with pytest.raises(InputError, match="theta_e"):
        LensBatch.from_arrays(profiles=("EPL",), gamma=[2.0])
    with pytest.raises(InputError, match="e1 has 2 values, expected 1 or 3"):
        LensBatch.from_arrays(theta_e=[1.0, 1.1, 1.2], e1=[0.1, 0.2])


@pytest.fixture
def point_mass():
    """A toy profile defined in this test only: a point mass of Einstein radius theta_p."""

    class PointMass(Profile):
        name = "TOY_POINT_MASS"
        params = (
            Param("theta_p", "arcsec", 0.0, math.inf, "toy_theta_p_arcsec", None, prior=("uniform", 0.8, 1.2)),
            CENTER_X,
            CENTER_Y,
        )

        @staticmethod
        def deflection(x, y, p):
            dx, dy = x - expand(p["center_x"], x), y - expand(p["center_y"], y)
            k = expand(p["theta_p"], x) ** 2 / (dx * dx + dy * dy)
            return k * dx, k * dy

        @staticmethod
        def hessian(x, y, p):
            dx, dy = x - expand(p["center_x"], x), y - expand(p["center_y"], y)
            r2 = dx * dx + dy * dy
            k = expand(p["theta_p"], x) ** 2 / (r2 * r2)
            return k * (dy * dy - dx * dx), -2 * k * dx * dy, k * (dx * dx - dy * dy)

        @staticmethod
        def to_lenstronomy(p):
            return "POINT_MASS", {"theta_E": p["theta_p"], "center_x": p["center_x"], "center_y": p["center_y"]}

    register(PointMass)
    yield PointMass
    del REGISTRY["TOY_POINT_MASS"]


def test_a_profile_added_in_one_place_composes_and_renders(point_mass):
    from darkhaloscope.lensing.render import RenderConfig, render_lensed_sources
    from darkhaloscope.lensing.source import SourceBatch

    names = ("TOY_POINT_MASS", "SHEAR")
    assert lens_model(names).columns()["theta_p"] == "toy_theta_p_arcsec"
    lens = LensBatch.from_arrays(dtype=F64, profiles=names, theta_p=[1.0], gamma1=[0.02])
    x = torch.tensor([[2.0, -1.0]], dtype=F64)
    y = torch.tensor([[0.0, 1.0]], dtype=F64)
    bx, by = ray_shoot(x, y, lens)
    assert bx[0].tolist() == pytest.approx([2.0 - 0.5 - 0.04, -1.0 + 0.5 + 0.02])
    src = SourceBatch.from_arrays(flux=[[1.0] * 3], dtype=F64, r_sersic=0.3, n_sersic=1.0, center_x=0.1)
    res = render_lensed_sources(lens, src, torch.tensor([[1.2] * 3], dtype=F64), RenderConfig(n_pix=31))
    assert float(res.magnification[0]) > 1.5


def test_a_profile_added_in_one_place_is_planned_and_injected(point_mass):
    from darkhaloscope.constants import STAMP_SIZE
    from darkhaloscope.lensing.bank import (
        injection_config,
        plan_injection_grid,
        render_injection_batch,
        selection_conditioning,
        with_conditioning,
    )
    from tests.test_injection_bank_lib import _hosts

    cfg = injection_config("demo", per_cell=1, host_splits=("test",), lens_profiles=("TOY_POINT_MASS", "SHEAR"))
    tasks = with_conditioning(plan_injection_grid(_hosts(27), cfg), selection_conditioning(cfg, ["DEV"], {}, {}))
    theta_p = tasks.column("toy_theta_p_arcsec").to_numpy()
    assert ((theta_p >= 0.8) & (theta_p <= 1.2)).all()
    host = np.zeros((2, 3, STAMP_SIZE, STAMP_SIZE), np.float32)
    _, arc, params = render_injection_batch(tasks.slice(0, 2), host, np.full_like(host, 1e6))
    assert params.column("success").to_pylist() == [True, True] and arc.max() > 0


@pytest.mark.parametrize("profile", ["gaussian", "moffat"])
def test_epl_with_multipoles_render_matches_lenstronomy_image(profile):
    """The engine's image of an EPL + shear + m = 3, 4 multipoles lens against lenstronomy's
    ImageModel with the same PSF kernel, supersampling every pixel, to 1e-4 of the peak."""
    from darkhaloscope.lensing.render import RenderConfig, lenstronomy_reference, render_lensed_sources
    from darkhaloscope.lensing.source import SourceBatch
    from darkhaloscope.psf import kernel_radius_pix, psf_kernels

    names = ("EPL", "SHEAR", "MULTIPOLE_M3", "MULTIPOLE_M4")
    lp = dict(theta_e=1.3, gamma=2.2, e1=0.08, e2=-0.12, center_x=0.05, center_y=-0.04)
    lp.update(gamma1=0.025, gamma2=0.01, a3=0.015, phi3=0.6, a4=0.03, phi4=-0.2)
    sp = dict(r_sersic=0.25, n_sersic=1.2, e1=0.1, e2=0.05, center_x=0.12, center_y=0.06)
    fwhm = 1.1
    cfg = RenderConfig(n_pix=41, supersample=4, psf_profile=profile, adaptive=False)
    r = kernel_radius_pix(fwhm, cfg.pixel_scale, cfg.psf_n_fwhm)
    kernel = psf_kernels(torch.tensor([fwhm], dtype=F64), r, profile=profile)[0].numpy()
    ref, mu_ref = lenstronomy_reference(lp, sp, fwhm, 1.0, cfg, psf_kernel=kernel, profiles=names)
    lens = LensBatch.from_arrays(dtype=F64, profiles=names, **{k: [v] for k, v in lp.items()})
    src = SourceBatch.from_arrays(flux=[[1.0] * 3], dtype=F64, **sp)
    res = render_lensed_sources(lens, src, torch.tensor([[fwhm] * 3], dtype=F64), cfg)
    ours = res.arc[0, 1].numpy()
    assert np.abs(ours - ref).max() <= 1e-4 * ref.max()
    assert float(res.magnification[0]) == pytest.approx(mu_ref, rel=1e-6)
    # the perturbations matter at this tolerance: the plain EPL's image differs by far more
    plain = LensBatch.from_arrays(
        dtype=F64, profiles=("EPL", "SHEAR"), **{k: [lp[k]] for k in lens_model(("EPL", "SHEAR")).param_names}
    )
    other = render_lensed_sources(plain, src, torch.tensor([[fwhm] * 3], dtype=F64), cfg).arc[0, 1].numpy()
    assert np.abs(other - ref).max() > 1e-2 * ref.max()


def test_the_injection_task_contract_carries_the_default_lens_columns_with_their_units():
    from table_registry.injection import INJECTION_TASK

    task = {c.name: c for c in INJECTION_TASK}
    for p in lens_model(DEFAULT_PROFILES).params:
        assert p.column in task, p
        assert task[p.column].unit == p.unit, p


def test_a_plan_with_another_lens_draws_records_renders_and_verifies_it():
    from darkhaloscope.constants import STAMP_SIZE
    from darkhaloscope.lensing.bank import (
        bank_table,
        extra_lens_columns,
        injection_config,
        plan_injection_grid,
        plan_lens_profiles,
        render_injection_batch,
        selection_conditioning,
        with_conditioning,
    )
    from darkhaloscope.lensing.priors import lens_profile_priors
    from darkhaloscope.lensing.verify import lenstronomy_agreement
    from tests.test_injection_bank_lib import _hosts

    names = ("EPL", "SHEAR", "MULTIPOLE_M3", "MULTIPOLE_M4")
    splits = ("train", "val", "test")
    cfg = injection_config("demo", per_cell=1, host_splits=splits, lens_profiles=names)
    tasks = with_conditioning(plan_injection_grid(_hosts(27), cfg), selection_conditioning(cfg, ["DEV"], {}, {}))
    assert plan_lens_profiles(tasks) == names
    extra = extra_lens_columns(names)
    assert extra == ("lens_gamma", "lens_a3_arcsec", "lens_phi3_rad", "lens_a4_arcsec", "lens_phi4_rad")
    for name in extra:
        v, p = tasks.column(name).to_numpy(), lens_profile_priors()[name]
        assert ((v >= p.lo) & (v <= p.hi)).all() and np.ptp(v) > 0, name
    # every other draw is the default plan's: the composition only adds its own parameters
    default_cfg = injection_config("demo", per_cell=1, host_splits=splits)
    assert plan_injection_grid(_hosts(27), default_cfg).equals(tasks.drop_columns(list(extra)))
    assert "lens_profiles" not in selection_conditioning(default_cfg, ["DEV"], {}, {})

    t = tasks.slice(0, 4)
    host = np.zeros((4, 3, STAMP_SIZE, STAMP_SIZE), np.float32)
    iv = np.full_like(host, 1e6)
    inj, arc, params = render_injection_batch(t, host, iv)
    sie_arc = render_injection_batch(t.replace_schema_metadata(None), host, iv)[1]
    assert np.abs(arc - sie_arc).max() > 1e-3 * np.abs(sie_arc).max()
    agreement = lenstronomy_agreement(bank_table(t, params, inj, host), n_sample=2)
    assert agreement["ok"] and len(agreement["cases"]) == 2, agreement


def test_the_lens_model_setting_names_registered_profiles():
    from resources.settings import BY_NAME

    check = BY_NAME["DHS_LENS_MODEL"].check
    assert BY_NAME["DHS_LENS_MODEL"].default == "+".join(DEFAULT_PROFILES)
    check("EPL+SHEAR+MULTIPOLE_M3+MULTIPOLE_M4")
    with pytest.raises(InputError, match="NOPE"):
        check("EPL+NOPE")
