"""Optional domain randomisation of injected stamps, per-injection seeded.

Images are (N, 3, S, S) [nmgy/pixel]; amplitudes are in units of each band's robust noise sigma
(1.4826 x MAD of the *control* image), so the injected stamp and its paired control receive
identical artefacts (``randomize_pair``).

Order, and why:
1. PSF anisotropy - the arc's kernel gets an ellipticity (``draw_psf_anisotropy`` feeds
   ``render_lensed_sources(psf_e1=, psf_e2=)``). It is an atmosphere/optics effect on the sky's
   light, so it acts first and only on the rendered arc; re-convolving the host would blur its
   real PSF twice.
2. Astrometric jitter - a sub-pixel shift per band (band-to-band registration error), done by a
   Fourier phase ramp (exact, flux-conserving). It is a resampling of the sky scene, so it must
   precede the pixel-level artefacts below, which are sharp on the detector grid and must not be
   resampled.
3. Saturation wings - light of a bright star around saturated pixels, fixed on the detector grid.
4. Cosmic rays - sharp tracks in one band; they are never convolved by the PSF, so they come
   after every convolution and resampling (PSF first, cosmic rays after).
5. Background plane - an additive sky-subtraction residual of the coadd, applied last. Steps 3-5
   are additive and commute; the fixed order only fixes the random-number stream.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import InputError
from ..seeding import torch_generator_for


@dataclass(frozen=True)
class RandomizationConfig:
    """Rates (per stamp) and amplitudes [robust noise sigma] of each artefact; 0 disables it.

    psf_e_sigma: sigma of each PSF ellipticity component; jitter_sigma_pix [pixels]; saturation
    r0_pix [pixels]; background_plane_amp: plane amplitude across the stamp half-width.
    """

    psf_e_sigma: float = 0.05
    jitter_sigma_pix: float = 0.25
    saturation_rate: float = 0.08
    saturation_amp: float = 12.0
    saturation_r0_pix: float = 2.0
    cosmic_ray_rate: float = 0.15
    cosmic_ray_amp: float = 8.0
    background_plane_amp: float = 0.02


def _gens(seeds, salt: str, device) -> list[torch.Generator]:
    return [torch_generator_for("domain_randomization", salt, int(s), device=str(device)) for s in np.asarray(seeds)]


def draw_psf_anisotropy(
    seeds, cfg: RandomizationConfig = RandomizationConfig(), device="cpu", dtype=torch.float32
) -> tuple[torch.Tensor, torch.Tensor]:
    """(e1, e2), each (N, 3): one PSF ellipticity per injection, shared by its three bands, with
    components N(0, psf_e_sigma) clipped to |e| <= 0.3."""
    out = []
    for g in _gens(seeds, "psf", device):
        e = torch.randn(2, generator=g, device=device, dtype=torch.float64) * cfg.psf_e_sigma
        norm = torch.linalg.vector_norm(e)
        e = e * torch.clamp(0.3 / torch.clamp(norm, min=1e-12), max=1.0)
        out.append(e)
    e = torch.stack(out).to(dtype) if out else torch.zeros((0, 2), dtype=dtype, device=device)
    return e[:, 0:1].expand(-1, 3).contiguous(), e[:, 1:2].expand(-1, 3).contiguous()


def robust_sigma(images: torch.Tensor) -> torch.Tensor:
    """(N, 3) robust per-band noise sigma = 1.4826 x MAD [nmgy/pixel]."""
    flat = images.reshape(images.shape[0], images.shape[1], -1)
    med = flat.median(dim=-1, keepdim=True).values
    return 1.4826 * (flat - med).abs().median(dim=-1).values


def _fourier_shift(img: torch.Tensor, dx: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """Shift (3, S, S) images by (dx, dy) pixels per band (x = column) with a phase ramp."""
    s = img.shape[-1]
    ky = torch.fft.fftfreq(s, device=img.device, dtype=img.dtype).reshape(1, s, 1)
    kx = torch.fft.rfftfreq(s, device=img.device, dtype=img.dtype).reshape(1, 1, -1)
    phase = -2.0 * math.pi * (kx * dx.reshape(-1, 1, 1) + ky * dy.reshape(-1, 1, 1))
    return torch.fft.irfft2(torch.fft.rfft2(img) * torch.polar(torch.ones_like(phase), phase), s=(s, s))


def apply_artifacts(
    images: torch.Tensor, sigma: torch.Tensor, seeds, cfg: RandomizationConfig = RandomizationConfig()
) -> torch.Tensor:
    """Steps 2-5 of the module docstring on (N, 3, S, S) images with noise scale ``sigma`` (N, 3).

    Draws come from one generator per injection (seeded by its seed), in a fixed sequence, so the
    same seed gives the same artefacts whatever else is in the batch.
    """
    if images.ndim != 4 or images.shape[1] != 3:
        raise InputError(f"images must be (N, 3, S, S), got {tuple(images.shape)}")
    if sigma.shape != images.shape[:2]:
        raise InputError(f"sigma must be (N, 3) = {tuple(images.shape[:2])}, got {tuple(sigma.shape)}")
    n, _, s, _ = images.shape
    dev, dt = images.device, images.dtype
    yy, xx = torch.meshgrid(torch.arange(s, device=dev, dtype=dt), torch.arange(s, device=dev, dtype=dt), indexing="ij")
    out = []
    for i, g in enumerate(_gens(seeds, "artifacts", dev)):
        u = lambda *shape: torch.rand(shape, generator=g, device=dev, dtype=torch.float64).to(dt)  # noqa: E731
        z = lambda *shape: torch.randn(shape, generator=g, device=dev, dtype=torch.float64).to(dt)  # noqa: E731
        img = images[i]
        sig = sigma[i].reshape(3, 1, 1)
        shift = z(2, 3) * cfg.jitter_sigma_pix
        if cfg.jitter_sigma_pix > 0:
            img = _fourier_shift(img, shift[0], shift[1])
        sat_on, sat_xy = u(1), u(2) * (s - 1)
        if cfg.saturation_rate > 0 and float(sat_on) < cfg.saturation_rate:
            r2 = (xx - sat_xy[0]) ** 2 + (yy - sat_xy[1]) ** 2
            img = img + cfg.saturation_amp * sig * (1.0 + r2 / cfg.saturation_r0_pix**2) ** -1.5
        cr_on, cr_band, cr_xy, cr_len, cr_ang = u(1), u(1), u(2) * (s - 1), 2.0 + 6.0 * u(1), math.pi * u(1)
        if cfg.cosmic_ray_rate > 0 and float(cr_on) < cfg.cosmic_ray_rate:
            band = min(2, int(float(cr_band) * 3))
            t = torch.linspace(-0.5, 0.5, 4 * int(math.ceil(float(cr_len))) + 1, device=dev, dtype=dt) * cr_len
            px = torch.round(cr_xy[0] + t * torch.cos(cr_ang)).long().clamp(0, s - 1)
            py = torch.round(cr_xy[1] + t * torch.sin(cr_ang)).long().clamp(0, s - 1)
            track = torch.zeros((s, s), device=dev, dtype=dt)
            track[py, px] = 1.0
            img = img.clone()
            img[band] = img[band] + cfg.cosmic_ray_amp * sig[band, 0, 0] * track
        grad = z(3, 2) * cfg.background_plane_amp
        if cfg.background_plane_amp > 0:
            c = (s - 1) / 2.0
            plane = grad[:, 0].reshape(3, 1, 1) * (xx - c) / c + grad[:, 1].reshape(3, 1, 1) * (yy - c) / c
            img = img + sig * plane
        out.append(img)
    return torch.stack(out) if out else images.clone()


def randomize_pair(
    injected: torch.Tensor, control: torch.Tensor, seeds, cfg: RandomizationConfig = RandomizationConfig()
) -> tuple[torch.Tensor, torch.Tensor]:
    """Apply identical artefacts (steps 2-5) to an injected stamp and its paired control; the
    amplitude scale is the control's robust sigma, so the pair differs only by the (jittered) arc."""
    if injected.shape != control.shape:
        raise InputError(f"injected {tuple(injected.shape)} and control {tuple(control.shape)} differ in shape")
    sigma = robust_sigma(control)
    return apply_artifacts(injected, sigma, seeds, cfg), apply_artifacts(control, sigma, seeds, cfg)
