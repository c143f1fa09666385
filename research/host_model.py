"""The host model of the host-fit diagnostics: an elliptical Sérsic convolved with the catalog's
Moffat PSF, fitted to the central ``FIT_SIZE`` px of a stamp, and the linearised refit of host plus
a faint arc.

The mock sky draws every galaxy as an elliptical Sérsic convolved with a Moffat (β = 3.5) of the
catalog's PSFSIZE in each band, the model Tractor fits to DR10. :func:`fit_hosts` fits that model
(one shape for the three bands: centre, half-light radius, Sérsic index, e1, e2 by
Levenberg–Marquardt with finite-difference Jacobians; a flux and a constant background per band
solved linearly at each step, variable projection). A host fitted to the noise has a residual
orthogonal to the model's tangent space, so a faint arc's refit moves the model by the arc's
projection on that space (:func:`refit_change`); :func:`refit_share_kept` is the share of the arc's
S/N the refit leaves, with Gaussian priors on the host's colours and shape (Fisher form).

Used by ``research.ablate_host_fit`` and ``research.bound_host_colour_prior``; tested by
``research/tests/test_host_model.py``. A diagnostic's model, not a pipeline step: the mock's
galaxies are exactly this model, so the fit is better than it would be on DR10's galaxies.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from darkhaloscope.constants import PIXEL_SCALE_ARCSEC
from darkhaloscope.profiles import sersic_surface_brightness, sersic_total_flux
from darkhaloscope.psf import MOFFAT_BETA, psf_kernels

#: Side (px) of the fitted region: the demo finder's crop.
FIT_SIZE = 49
#: Margin (px) rendered around it, the PSF kernel's radius, so light from outside is convolved in.
MARGIN = 12
#: Sub-pixels per pixel side of the rendered Sérsic (pixel-integrated).
SUPERSAMPLE = 2
#: Finite-difference steps of the shape parameters: x0, y0 [px], ln R, ln n, e1, e2.
STEPS = (0.01, 0.01, 0.005, 0.005, 0.003, 0.003)
N_SHAPE = len(STEPS)
#: Shape parameters, then a flux and a background per band: the columns of the tangent space.
N_TANGENT = N_SHAPE + 6
_DT = torch.float64


def _grid() -> tuple[torch.Tensor, torch.Tensor]:
    """Sub-pixel centres (arcsec from the stamp's centre pixel) of the rendered region, (S, S) each."""
    g = FIT_SIZE + 2 * MARGIN
    px = (
        torch.arange(g, dtype=_DT)[:, None]
        + (torch.arange(SUPERSAMPLE, dtype=_DT) + 0.5) / SUPERSAMPLE
        - 0.5
        - (g - 1) / 2
    )
    y, x = torch.meshgrid(px.reshape(-1) * PIXEL_SCALE_ARCSEC, px.reshape(-1) * PIXEL_SCALE_ARCSEC, indexing="ij")
    return x, y


_X, _Y = _grid()
_FFT = FIT_SIZE + 4 * MARGIN  # the rendered region plus the kernel, so the convolution does not wrap


def psf_transforms(fwhm_arcsec: np.ndarray) -> torch.Tensor:
    """(N, 3, F, F//2+1) Fourier transforms of the Moffat kernels of FWHM (N, 3) arcsec."""
    k = psf_kernels(
        torch.as_tensor(fwhm_arcsec, dtype=_DT).reshape(-1), MARGIN, "moffat", beta=MOFFAT_BETA, subsample=3
    )
    return torch.fft.rfft2(k.reshape(-1, 3, 2 * MARGIN + 1, 2 * MARGIN + 1), s=(_FFT, _FFT))


def unit_models(shape: torch.Tensor, psf_ft: torch.Tensor) -> torch.Tensor:
    """(M, 3, FIT_SIZE, FIT_SIZE) unit-flux host images [per pixel] of shape parameters (M, 6)."""
    x0, y0, ln_r, ln_n, e1, e2 = (shape[:, i].reshape(-1, 1, 1) for i in range(N_SHAPE))
    r, n = torch.exp(ln_r), torch.exp(ln_n)
    one = torch.ones_like(r)
    sb = sersic_surface_brightness(
        _X[None], _Y[None], one, r, n, e1, e2, x0 * PIXEL_SCALE_ARCSEC, y0 * PIXEL_SCALE_ARCSEC
    )
    g = FIT_SIZE + 2 * MARGIN
    img = (
        sb.reshape(-1, g, SUPERSAMPLE, g, SUPERSAMPLE).mean((2, 4))
        * PIXEL_SCALE_ARCSEC**2
        / sersic_total_flux(one, r, n)
    )
    conv = torch.fft.irfft2(torch.fft.rfft2(img[:, None], s=(_FFT, _FFT)) * psf_ft, s=(_FFT, _FFT))
    return conv[..., 2 * MARGIN : 2 * MARGIN + FIT_SIZE, 2 * MARGIN : 2 * MARGIN + FIT_SIZE]


def linear_fit(models: torch.Tensor, data: torch.Tensor, inv_sigma: torch.Tensor):
    """Per stamp and band, data ≈ flux · model + background by least squares: (flux (N, 3),
    background (N, 3) [nmgy per pixel], residual over σ (N, 3·FIT_SIZE²))."""
    m, y = models.flatten(2), data.flatten(2)
    npix = m.shape[-1]
    smm, sm, sy, smy = (m * m).sum(-1), m.sum(-1), y.sum(-1), (m * y).sum(-1)
    det = smm * npix - sm * sm
    flux, bg = (smy * npix - sm * sy) / det, (smm * sy - sm * smy) / det
    return flux, bg, ((y - flux[..., None] * m - bg[..., None]) * inv_sigma[..., None]).flatten(1)


def bounded(shape: torch.Tensor) -> torch.Tensor:
    """Shape parameters held where the model is defined: |offset| ≤ 6 px, 0.02″ ≤ R ≤ 8″, 0.4 ≤ n ≤ 8, |e| ≤ 0.85."""
    s = shape.clone()
    s[:, 0:2] = s[:, 0:2].clamp(-6.0, 6.0)
    s[:, 2] = s[:, 2].clamp(math.log(0.02), math.log(8.0))
    s[:, 3] = s[:, 3].clamp(math.log(0.4), math.log(8.0))
    e = torch.hypot(s[:, 4], s[:, 5])
    s[:, 4:6] *= torch.where(e > 0.85, 0.85 / e.clamp(min=1e-12), torch.ones_like(e))[:, None]
    return s


def moment_start(data: torch.Tensor) -> torch.Tensor:
    """Shape parameters (N, 6) from the Gaussian-windowed (σ 5 px) moments of the r + z light."""
    light = data[:, 1] + data[:, 2]
    o = torch.arange(FIT_SIZE, dtype=_DT) - (FIT_SIZE - 1) / 2
    yy, xx = torch.meshgrid(o, o, indexing="ij")
    w = (light * torch.exp(-(xx**2 + yy**2) / 50.0)).clamp(min=0)
    tot = w.sum((-1, -2)) + 1e-12
    x0, y0 = (w * xx).sum((-1, -2)) / tot, (w * yy).sum((-1, -2)) / tot
    dx, dy = xx - x0[:, None, None], yy - y0[:, None, None]
    mxx, myy, mxy = ((w * p).sum((-1, -2)) / tot for p in (dx * dx, dy * dy, dx * dy))
    trace = mxx + myy + 1e-9
    chi1, chi2 = (mxx - myy) / trace, 2 * mxy / trace
    chi = torch.hypot(chi1, chi2).clamp(max=0.95)
    # distortion (1 - q²)/(1 + q²) to lenstronomy's ellipticity (1 - q)/(1 + q)
    f = torch.where(chi > 0, 1.0 / (1.0 + torch.sqrt(1.0 - chi**2)), torch.zeros_like(chi))
    r = (torch.sqrt(trace / 2) * PIXEL_SCALE_ARCSEC).clamp(0.05, 3.0)
    return bounded(torch.stack([x0, y0, torch.log(r), torch.full_like(x0, math.log(2.0)), chi1 * f, chi2 * f], 1))


def fit_hosts(
    stamps: np.ndarray,
    fwhm_arcsec: np.ndarray,
    sigma: np.ndarray,
    iters: int = 8,
    tangent: bool = False,
    chunk: int = 48,
    columns: bool = False,
) -> dict:
    """Fit the host model to the central FIT_SIZE px of stamps (N, 3, H, H) [nmgy] with per-band PSF
    FWHM (N, 3) [arcsec] and pixel σ (N, 3) [nmgy]: {"model" (N, 3, FIT_SIZE, FIT_SIZE) float32 nmgy,
    "chi2" (N,) per pixel, "flux" (N, 3) nmgy, "tangent" (N, 3·FIT_SIZE², N_TANGENT) float32 orthonormal
    basis of the model's tangent space in σ units (shape, flux and background per band; only with
    ``tangent``), "columns" (N, 3·FIT_SIZE², N_TANGENT) float32 the derivatives it spans, in σ units:
    the model's per unit of each shape parameter (x0, y0 px; ln R; ln n; e1; e2), per nmgy of each
    band's flux, per nmgy of each band's background (only with ``columns``)}."""
    steps = torch.tensor(STEPS, dtype=_DT)
    out: dict[str, list] = {"model": [], "chi2": [], "flux": [], "tangent": [], "columns": []}
    lo = (stamps.shape[-1] - FIT_SIZE) // 2
    for s in range(0, len(stamps), chunk):
        data = torch.as_tensor(
            np.ascontiguousarray(stamps[s : s + chunk, :, lo : lo + FIT_SIZE, lo : lo + FIT_SIZE]), dtype=_DT
        )
        n = data.shape[0]
        inv_sigma = 1.0 / torch.as_tensor(sigma[s : s + chunk], dtype=_DT)
        psf_ft = psf_transforms(fwhm_arcsec[s : s + chunk])
        shape = moment_start(data - data.flatten(2).median(-1).values[..., None, None])
        damping = torch.full((n,), 1e-2, dtype=_DT)
        psf_each = psf_ft.repeat_interleave(N_SHAPE, 0)
        data_each, inv_sigma_each = data.repeat_interleave(N_SHAPE, 0), inv_sigma.repeat_interleave(N_SHAPE, 0)

        def residual(p):
            return linear_fit(unit_models(p, psf_ft), data, inv_sigma)[2]

        def stepped(p):
            """Unit models (n·N_SHAPE, 3, FIT_SIZE, FIT_SIZE) with each shape parameter in turn moved by its step."""
            return unit_models((p[:, None, :] + torch.diag(steps)[None]).reshape(-1, N_SHAPE), psf_each)

        r = residual(shape)
        cost = (r * r).sum(-1)
        for _ in range(iters):
            jac = (
                linear_fit(stepped(shape), data_each, inv_sigma_each)[2].reshape(n, N_SHAPE, -1) - r[:, None]
            ) / steps[None, :, None]
            a = jac @ jac.transpose(1, 2)
            a = (
                a
                + damping[:, None, None] * torch.diag_embed(torch.diagonal(a, dim1=1, dim2=2))
                + 1e-9 * torch.eye(N_SHAPE, dtype=_DT)
            )
            trial = bounded(shape - torch.linalg.solve(a, jac @ r[..., None])[..., 0])
            rt = residual(trial)
            ct = (rt * rt).sum(-1)
            better = ct < cost
            shape, r, cost = (
                torch.where(better[:, None], trial, shape),
                torch.where(better[:, None], rt, r),
                torch.where(better, ct, cost),
            )
            damping = torch.where(better, damping * 0.3, damping * 10.0).clamp(1e-6, 1e6)
        unit = unit_models(shape, psf_ft)
        flux, bg, _ = linear_fit(unit, data, inv_sigma)
        out["model"].append((flux[..., None, None] * unit + bg[..., None, None]).float())
        out["chi2"].append(cost / (3 * FIT_SIZE**2))
        out["flux"].append(flux.float())
        if tangent or columns:
            d_unit = stepped(shape).reshape(n, N_SHAPE, 3, FIT_SIZE, FIT_SIZE) - unit[:, None]
            eye = torch.eye(3, dtype=_DT)[None, :, :, None, None]
            w = inv_sigma[:, None, :, None, None]
            cols = (
                torch.cat(
                    [
                        d_unit / steps[None, :, None, None, None] * flux[:, None, :, None, None] * w,
                        unit[:, None] * eye * w,
                        torch.ones_like(unit)[:, None] * eye * w,
                    ],
                    1,
                )
                .reshape(n, N_TANGENT, -1)
                .transpose(1, 2)
            )
            if tangent:
                out["tangent"].append(torch.linalg.qr(cols)[0].float())
            if columns:
                out["columns"].append(cols.float())
    return {k: torch.cat(v) for k, v in out.items() if v}


def less_host(stamps: np.ndarray, fit: dict) -> np.ndarray:
    """Stamps (N, 3, H, H) with the central FIT_SIZE px replaced by stamp minus fitted host (float32)."""
    out = np.array(stamps, dtype=np.float32, copy=True)
    lo = (out.shape[-1] - FIT_SIZE) // 2
    out[:, :, lo : lo + FIT_SIZE, lo : lo + FIT_SIZE] -= fit["model"].numpy()
    return out


def refit_change(arcs: np.ndarray, basis: torch.Tensor, sigma: torch.Tensor) -> np.ndarray:
    """Arcs (N, 3, W, W) [nmgy] with their central FIT_SIZE px less the projection on each host's
    tangent basis (N, 3·FIT_SIZE², N_TANGENT) in units of its σ (N, 3): what a fit of host plus a
    faint arc leaves of the arc, to first order (the host's residual is orthogonal to that space)."""
    out = np.array(arcs, dtype=np.float32, copy=True)
    lo = (out.shape[-1] - FIT_SIZE) // 2
    s = sigma[:, :, None, None]
    a = (torch.from_numpy(out[:, :, lo : lo + FIT_SIZE, lo : lo + FIT_SIZE].copy()) / s).flatten(1)
    a = a - (basis @ (basis.transpose(1, 2) @ a[..., None]))[..., 0]
    out[:, :, lo : lo + FIT_SIZE, lo : lo + FIT_SIZE] = (a.reshape(-1, 3, FIT_SIZE, FIT_SIZE) * s).numpy()
    return out


def refit_share_kept(
    arcs: np.ndarray,
    fit: dict,
    sigma: torch.Tensor,
    colour_sd_mag: tuple[float, float] | None = None,
    shape_sd: np.ndarray | None = None,
) -> np.ndarray:
    """(N,) share of each arc's S/N (its norm in σ units over the central FIT_SIZE px of arcs (N, 3, W,
    W) nmgy) that a linearised refit of host plus arc leaves, with Gaussian priors of standard
    deviations ``colour_sd_mag`` = (g − r, r − z) [mag] on the host's colours and ``shape_sd`` (N,
    N_SHAPE) on its shape parameters (x0, y0 px; ln R; ln n; e1; e2) (None or inf: free, the tangent
    space's projection; 0: the host's fitted value held). ``fit``: :func:`fit_hosts` of the arcs'
    hosts with ``columns``; ``sigma`` (N, 3) nmgy. Fisher form: the statistic left is dᵀd −
    dᵀA(AᵀA + Λ)⁻¹Aᵀd over the columns A of the shape, the backgrounds and the host's magnitudes (all
    bands together, g − r, r − z), Λ the priors' precisions."""
    lo = (arcs.shape[-1] - FIT_SIZE) // 2
    d = (
        torch.from_numpy(np.ascontiguousarray(arcs[:, :, lo : lo + FIT_SIZE, lo : lo + FIT_SIZE])).to(_DT)
        / sigma.to(_DT)[:, :, None, None]
    ).flatten(1)
    out = np.empty(len(d))
    for s in range(0, len(d), 64):
        cols, flux = fit["columns"][s : s + 64].to(_DT), fit["flux"][s : s + 64].to(_DT)
        light = cols[..., N_SHAPE : N_SHAPE + 3] * flux[:, None, :]  # each band's host light
        # d(host)/d(magnitude): z moves every band; g − r at fixed r moves g; r − z at fixed z moves g and r
        mags = -0.4 * math.log(10.0) * torch.stack([light.sum(-1), light[..., 0], light[..., 0] + light[..., 1]], -1)
        a = torch.cat([cols[..., :N_SHAPE], cols[..., N_SHAPE + 3 :], mags], -1)
        precision = torch.zeros((len(a), a.shape[-1]), dtype=_DT)
        if colour_sd_mag is not None:
            precision[:, -2:] = 1.0 / torch.tensor(colour_sd_mag, dtype=_DT).clamp(min=1e-9) ** 2
        if shape_sd is not None:
            precision[:, :N_SHAPE] = 1.0 / torch.as_tensor(shape_sd[s : s + 64], dtype=_DT).clamp(min=1e-9) ** 2
        ds = d[s : s + 64]
        atd = a.transpose(1, 2) @ ds[..., None]
        normal = a.transpose(1, 2) @ a + torch.diag_embed(precision) + 1e-10 * torch.eye(a.shape[-1], dtype=_DT)
        explained = (atd.transpose(1, 2) @ torch.linalg.solve(normal, atd))[:, 0, 0]
        total = (ds * ds).sum(1)
        out[s : s + 64] = (torch.clamp(total - explained, min=0.0) / total).sqrt().numpy()
    return out
