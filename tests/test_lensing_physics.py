"""Analytic identities, stability and bookkeeping of the torch injection engine (no lenstronomy)."""

import math

import numpy as np
import pytest
import torch

from darkhaloscope.constants import PIXEL_SCALE_ARCSEC, flux_to_mag, mag_to_flux
from darkhaloscope.errors import InputError
from darkhaloscope.lensing.randomize import RandomizationConfig, draw_psf_anisotropy, randomize_pair
from darkhaloscope.lensing.render import RenderConfig, add_poisson_noise, arc_snr, convolve_psf, render_lensed_sources
from darkhaloscope.lensing.sie import (
    LensBatch,
    ellipticity_from_phi_q,
    hessian,
    magnification,
    phi_q_from_ellipticity,
    sie_convergence,
    sie_deflection,
)
from darkhaloscope.lensing.source import SourceBatch, band_fluxes, unit_flux_surface_brightness
from darkhaloscope.seeding import torch_generator_for

F64 = torch.float64
SMALL = RenderConfig(n_pix=61, psf_profile="gaussian")


def _lens(theta_e=1.3, q=0.7, phi=0.4, g1=0.0, g2=0.0, cx=0.0, cy=0.0, dtype=F64):
    e1, e2 = ellipticity_from_phi_q(torch.tensor(phi, dtype=F64), torch.tensor(q, dtype=F64))
    return LensBatch.from_arrays(
        dtype=dtype,
        theta_e=[theta_e],
        e1=[float(e1)],
        e2=[float(e2)],
        center_x=[cx],
        center_y=[cy],
        gamma1=[g1],
        gamma2=[g2],
    )


def test_kappa_half_on_critical_ellipse_axes():
    te, q, phi = 1.3, 0.6, 0.7
    lens = _lens(te, q, phi, cx=0.2, cy=-0.1)
    c, s = math.cos(phi), math.sin(phi)
    pts = []
    for a, b in (
        (te / math.sqrt(q), 0.0),
        (-te / math.sqrt(q), 0.0),
        (0.0, te * math.sqrt(q)),
        (0.0, -te * math.sqrt(q)),
    ):
        pts.append((0.2 + c * a - s * b, -0.1 + s * a + c * b))
    x = torch.tensor([[p[0] for p in pts]], dtype=F64)
    y = torch.tensor([[p[1] for p in pts]], dtype=F64)
    np.testing.assert_allclose(sie_convergence(x, y, lens)[0].numpy(), 0.5, rtol=1e-12)
    back_phi, back_q = phi_q_from_ellipticity(lens.e1, lens.e2)
    assert float(back_q[0]) == pytest.approx(q) and float(back_phi[0]) == pytest.approx(phi)


def test_round_sis_deflection_is_theta_e_and_zero_at_centre():
    lens = _lens(1.7, 1.0, 0.0)
    ang = torch.linspace(0, 2 * math.pi, 13, dtype=F64)[None]
    ax, ay = sie_deflection(1.7 * torch.cos(ang), 1.7 * torch.sin(ang), lens)
    np.testing.assert_allclose(torch.hypot(ax, ay).numpy(), 1.7, rtol=1e-14)
    ax0, ay0 = sie_deflection(torch.zeros(1, 1, dtype=F64), torch.zeros(1, 1, dtype=F64), lens)
    assert float(ax0) == 0.0 and float(ay0) == 0.0


def test_det_a_is_one_minus_two_kappa_and_hessian_matches_finite_differences():
    lens = _lens(1.1, 0.55, -0.3)
    rng = np.random.default_rng(0)
    x = torch.tensor(rng.uniform(-3, 3, (1, 50)), dtype=F64)
    y = torch.tensor(rng.uniform(-3, 3, (1, 50)), dtype=F64)
    fxx, fxy, fyy = hessian(x, y, lens)
    kappa = sie_convergence(x, y, lens)
    np.testing.assert_allclose(
        ((1 - fxx) * (1 - fyy) - fxy**2).numpy(), (1 - 2 * kappa).numpy(), rtol=1e-12, atol=1e-12
    )
    np.testing.assert_allclose((0.5 * (fxx + fyy)).numpy(), kappa.numpy(), rtol=1e-12)
    h = 1e-6
    axp, ayp = sie_deflection(x + h, y, lens)
    axm, aym = sie_deflection(x - h, y, lens)
    np.testing.assert_allclose(((axp - axm) / (2 * h)).numpy(), fxx.numpy(), atol=1e-6)
    np.testing.assert_allclose(((ayp - aym) / (2 * h)).numpy(), fxy.numpy(), atol=1e-6)
    sheared = _lens(1.1, 0.55, -0.3, g1=0.05, g2=-0.03)
    mu = magnification(x, y, sheared)
    gxx, gxy, gyy = hessian(x, y, sheared)
    np.testing.assert_allclose((gxx - fxx).numpy(), 0.05)
    np.testing.assert_allclose((gxy - fxy).numpy(), -0.03)
    np.testing.assert_allclose(mu.numpy(), (1 / ((1 - gxx) * (1 - gyy) - gxy**2)).numpy())


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_q_to_one_is_continuous_and_equals_sis(dtype):
    x = torch.tensor([[0.3, -1.2, 2.0, 0.01]], dtype=dtype)
    y = torch.tensor([[1.1, 0.4, -0.7, 0.0]], dtype=dtype)
    sis = _lens(1.4, 1.0, 0.0, dtype=dtype)
    ax0, ay0 = sie_deflection(x, y, sis)
    r = torch.hypot(x, y)
    np.testing.assert_allclose(ax0.double().numpy(), (1.4 * x / r).double().numpy(), rtol=1e-6)
    for q in (1 - 1e-9, 1 - 1e-7, 1 - 1e-5, 1 - 1e-3):
        ax, ay = sie_deflection(x, y, _lens(1.4, q, 0.9, dtype=dtype))
        assert torch.all(torch.isfinite(ax)) and torch.all(torch.isfinite(ay)), q
        tol = 5e-6 if dtype == torch.float32 else 1e-9
        np.testing.assert_allclose(ax.double().numpy(), ax0.double().numpy(), atol=tol + 2 * (1 - q), err_msg=str(q))
        np.testing.assert_allclose(ay.double().numpy(), ay0.double().numpy(), atol=tol + 2 * (1 - q), err_msg=str(q))


def test_series_branch_agrees_with_closed_form_at_threshold():
    # f = sqrt(1 - q^2) just above / below 1e-3 must give the same deflection (no jump).
    x = torch.tensor([[0.7, -0.2]], dtype=F64)
    y = torch.tensor([[0.1, 1.3]], dtype=F64)
    qa = math.sqrt(1 - 0.99e-3**2)
    qb = math.sqrt(1 - 1.01e-3**2)
    a = sie_deflection(x, y, _lens(1.0, qa, 0.3))
    b = sie_deflection(x, y, _lens(1.0, qb, 0.3))
    np.testing.assert_allclose(a[0].numpy(), b[0].numpy(), atol=1e-7)


def _system(dtype=F64, clumps=False, beta=(0.15, 0.1)):
    lens = _lens(1.2, 0.75, 0.3, g1=0.02, g2=-0.01, dtype=dtype)
    kw = {}
    if clumps:
        kw = dict(
            clump_flux_frac=0.3,
            clump_x=[[0.1, -0.15]],
            clump_y=[[0.05, 0.1]],
            clump_sigma=[[0.08, 0.1]],
            clump_weight=[[1.0, 2.0]],
        )
    src = SourceBatch.from_arrays(
        flux=band_fluxes([22.0], [0.3], [0.2]),
        r_sersic=0.25,
        n_sersic=1.0,
        e1=0.1,
        e2=-0.05,
        center_x=beta[0],
        center_y=beta[1],
        dtype=dtype,
        **kw,
    )
    return lens, src


@pytest.mark.parametrize("clumps", [False, True])
def test_flux_bookkeeping_source_lensed_and_psf(clumps):
    lens, src = _system(clumps=clumps)
    # mu is the lensed flux over the source's, which the unit-flux profile makes 1: check that total
    # by direct quadrature, clumps included (0.005″ steps over ±4″, 16 half-light radii)
    t = torch.arange(-4.0, 4.0, 0.005, dtype=F64) + 0.0025
    yy, xx = torch.meshgrid(t, t, indexing="ij")
    total = float(unit_flux_surface_brightness(xx[None], yy[None], src).sum()) * 0.005**2
    assert total == pytest.approx(1.0, abs=1e-4)
    psf = torch.tensor([[1.3, 1.2, 1.1]], dtype=F64)
    res = render_lensed_sources(lens, src, psf, RenderConfig(n_pix=81, psf_profile="moffat"))
    fine = render_lensed_sources(lens, src, psf, RenderConfig(n_pix=81, psf_profile="moffat", supersample=16))
    assert float(res.magnification) == pytest.approx(float(fine.magnification), rel=3e-3)  # converged at 4x
    # the PSF conserves the injected flux (arc well inside the stamp)
    np.testing.assert_allclose(res.arc.sum(dim=(2, 3)).numpy(), res.lensed_flux.numpy(), rtol=1e-3)
    assert 1.5 < float(res.magnification) < 100


def test_psf_convolution_has_no_shift_and_conserves_flux():
    n = 71
    img = torch.zeros((2, 1, n, n), dtype=F64)
    img[0, 0, 35, 35] = 1.0
    img[1, 0, 25, 45] = 2.0
    out = convolve_psf(img, torch.tensor([[1.0, 1.5, 2.0], [1.2, 1.2, 1.2]], dtype=F64), RenderConfig(n_pix=n))
    yy, xx = torch.meshgrid(torch.arange(n, dtype=F64), torch.arange(n, dtype=F64), indexing="ij")
    for b, (j, i, f) in enumerate(((35, 35, 1.0), (25, 45, 2.0))):
        for band in range(3):
            o = out[b, band]
            assert divmod(int(o.argmax()), n) == (j, i)
            assert float((o * xx).sum() / o.sum()) == pytest.approx(i, abs=1e-9)
            assert float((o * yy).sum() / o.sum()) == pytest.approx(j, abs=1e-9)
            assert float(o.sum()) == pytest.approx(f, rel=1e-12)


def test_float32_matches_float64_and_adaptive_matches_full():
    res = {}
    for dtype in (torch.float32, F64):
        lens, src = _system(dtype)
        res[dtype] = render_lensed_sources(lens, src, torch.tensor([[1.3, 1.2, 1.1]], dtype=dtype), SMALL)
    a, b = res[torch.float32].arc.double(), res[F64].arc
    assert float((a - b).abs().max()) <= 1e-4 * float(b.max())
    assert float(res[torch.float32].magnification) == pytest.approx(float(res[F64].magnification), rel=1e-4)
    lens, src = _system()
    full = render_lensed_sources(
        lens,
        src,
        torch.tensor([[1.3, 1.2, 1.1]], dtype=F64),
        RenderConfig(n_pix=61, psf_profile="gaussian", adaptive=False),
    )
    assert float((full.arc - b).abs().max()) <= 1e-4 * float(b.max())


def test_render_is_deterministic_and_batch_independent():
    lens, src = _system(torch.float32)
    lens2 = LensBatch(**{k: torch.cat([v, v * 0 + v.mean() * 0.9]) for k, v in vars(lens).items()})
    src2 = SourceBatch(**{k: torch.cat([v, v]) for k, v in vars(src).items() if v is not None})
    fw = torch.tensor([[1.3, 1.2, 1.1]], dtype=torch.float32)
    a = render_lensed_sources(lens, src, fw, SMALL).arc.numpy()
    b = render_lensed_sources(lens, src, fw, SMALL).arc.numpy()
    c = render_lensed_sources(lens2, src2, torch.cat([fw, fw * 1.4]), SMALL).arc[:1].numpy()
    assert a.tobytes() == b.tobytes()
    np.testing.assert_allclose(c, a, atol=1e-6 * float(a.max()))


def test_poisson_noise_zero_where_no_arc_and_seeded():
    arc = torch.zeros((2, 3, 21, 21))
    arc[:, :, 10, 10] = 5.0
    gens = lambda: [torch_generator_for("poisson", s) for s in (1, 2)]  # noqa: E731
    a = add_poisson_noise(arc, 150.0, gens())
    b = add_poisson_noise(arc, 150.0, gens())
    assert torch.equal(a, b)
    assert float(a[:, :, :10].abs().sum()) == 0.0  # no noise where there is no arc (no clamp of the rate to >= 1 e-)
    assert not torch.equal(a[0], a[1])
    assert float(a[:, :, 10, 10].mean()) == pytest.approx(5.0, rel=0.05)
    with pytest.raises(InputError):
        add_poisson_noise(arc, 0.0, gens())


def test_arc_snr_is_the_matched_filter_snr():
    arc = torch.zeros((1, 3, 5, 5), dtype=F64)
    arc[0, :, 2, 1:4] = torch.tensor([0.5, 2.0, 3.0], dtype=F64)
    iv = torch.full_like(arc, 4.0)  # sigma = 0.5 per pixel
    iv[0, 2, 2, 2] = 0.0  # masked pixel is excluded
    snr = arc_snr(arc, iv)[0]
    assert float(snr[0]) == pytest.approx(math.sqrt(4.0 * (0.25 + 4.0 + 9.0)))  # every pixel counts, 0.5 sigma ones too
    assert float(snr[2]) == pytest.approx(math.sqrt(4.0 * (0.25 + 9.0)))
    assert float(arc_snr(arc * 0, iv)[0, 1]) == 0.0
    assert torch.allclose(arc_snr(7.0 * arc, iv), 7.0 * arc_snr(arc, iv))  # linear in the source flux
    # at or above every aperture S/N sum(arc)/sqrt(sum sigma^2) (Cauchy-Schwarz), here that of all three pixels
    assert float(snr[0]) >= 5.5 / math.sqrt(3 * 0.25)


def test_arc_snr_of_a_point_source_is_its_psf_weighted_snr():
    """An unresolved source of flux F in a Gaussian PSF of width s px on a sky of sigma per pixel has
    matched-filter S/N F / (sigma sqrt(4 pi s^2)): the noise-equivalent area 4 pi s^2 (the point-source
    depth of the Legacy Surveys' PSFDEPTH)."""
    n, s_px, flux, sigma = 61, 2.0, 3.0, 0.05
    img = torch.zeros((1, 3, n, n), dtype=F64)
    img[0, :, n // 2, n // 2] = flux
    fwhm = s_px * 2.0 * math.sqrt(2.0 * math.log(2.0)) * PIXEL_SCALE_ARCSEC
    psf = convolve_psf(img, torch.full((1, 3), fwhm, dtype=F64), RenderConfig(n_pix=n, psf_profile="gaussian"))
    snr = arc_snr(psf, torch.full_like(psf, sigma**-2))[0]
    assert torch.allclose(
        snr, torch.full((3,), flux / (sigma * math.sqrt(4 * math.pi * s_px**2)), dtype=F64), rtol=2e-3
    )


def test_magnitudes_and_colours():
    assert mag_to_flux(22.0) == pytest.approx(1.5848932, rel=1e-7)
    f = band_fluxes([22.0], [0.5], [0.3])[0]
    np.testing.assert_allclose(flux_to_mag(f), [22.5, 22.0, 21.7])
    assert np.isnan(flux_to_mag(0.0))
    with pytest.raises(InputError):
        band_fluxes([np.nan], [0.0], [0.0])


def test_bad_inputs_raise_input_error():
    with pytest.raises(InputError, match="theta_e"):
        LensBatch.from_arrays(theta_e=[-1.0])
    with pytest.raises(InputError, match="r_sersic"):
        SourceBatch.from_arrays(flux=[[1, 1, 1]], r_sersic=0.0, n_sersic=1.0)
    with pytest.raises(InputError, match="clump_flux_frac"):
        SourceBatch.from_arrays(flux=[[1, 1, 1]], r_sersic=0.2, n_sersic=1.0, clump_flux_frac=1.0)
    lens, src = _system()
    with pytest.raises(InputError, match="FWHM"):
        render_lensed_sources(lens, src, torch.tensor([[0.0, 1.0, 1.0]], dtype=F64), SMALL)


def test_domain_randomization_pairs_and_determinism():
    g = torch.Generator().manual_seed(0)
    ctrl = torch.randn((3, 3, 41, 41), generator=g) * 0.01
    arc = torch.zeros_like(ctrl)
    arc[:, :, 20, 20] = 1.0
    cfg = RandomizationConfig(saturation_rate=1.0, cosmic_ray_rate=1.0)
    a1, c1 = randomize_pair(ctrl + arc, ctrl, [5, 6, 7], cfg)
    a2, c2 = randomize_pair(ctrl + arc, ctrl, [5, 6, 7], cfg)
    assert torch.equal(a1, a2) and torch.equal(c1, c2)
    # The pair differs only by the (jittered) arc: the difference carries exactly the arc's flux.
    np.testing.assert_allclose((a1 - c1).sum(dim=(2, 3)).numpy(), 1.0, rtol=1e-4)
    assert not torch.equal(c1, ctrl)
    e1, e2 = draw_psf_anisotropy([5, 6])
    assert e1.shape == (2, 3) and torch.all(torch.hypot(e1, e2) <= 0.3 + 1e-6)
