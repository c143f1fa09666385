"""Point-spread-function kernels (Gaussian and Moffat), batched in torch.

One implementation for the mock sky and the injection engine. Angles in arcsec, kernels on the
pixel grid (``pixel_scale`` arcsec/pixel), odd-sized, centred on the middle pixel and
normalised to unit sum. Kernels are point-sampled at pixel centres (lenstronomy's
``kernel_gaussian`` convention) unless ``subsample`` > 1, which averages subsample**2 points
per pixel (pixel-integrated).
"""

from __future__ import annotations

import math

import torch

from .constants import PIXEL_SCALE_ARCSEC
from .errors import InputError

GAUSSIAN_FWHM_PER_SIGMA = 2.0 * math.sqrt(2.0 * math.log(2.0))
#: Default Moffat index for ground-based seeing: wider wings than the β = 4.765 that Trujillo et al.
#: (2001) derive for pure Kolmogorov turbulence, as seeing-limited coadd PSFs show.
MOFFAT_BETA = 3.5
#: The PSF model of the mock survey's sky and of injected arcs: one model for both, so a lens
#: finder cannot tell injected light from host light by its PSF wings (DECam-like Moffat, β = MOFFAT_BETA).
SURVEY_PSF_PROFILE = "moffat"
#: Largest kernel radius in pixels (63 x 63 kernel), so a kernel never exceeds a 101-pixel stamp.
MAX_KERNEL_RADIUS_PIX = 31


def kernel_radius_pix(fwhm_arcsec: float, pixel_scale: float = PIXEL_SCALE_ARCSEC, n_fwhm: float = 3.0) -> int:
    """Kernel half-size in pixels covering ``n_fwhm`` FWHM, capped at MAX_KERNEL_RADIUS_PIX."""
    return int(min(MAX_KERNEL_RADIUS_PIX, max(2, math.ceil(n_fwhm * fwhm_arcsec / pixel_scale))))


def psf_kernels(
    fwhm_arcsec: torch.Tensor,
    radius_pix: int,
    profile: str = "gaussian",
    beta: float = MOFFAT_BETA,
    e1: torch.Tensor | None = None,
    e2: torch.Tensor | None = None,
    pixel_scale: float = PIXEL_SCALE_ARCSEC,
    subsample: int = 1,
) -> torch.Tensor:
    """Batch of normalised PSF kernels, shape (N, 2*radius_pix+1, 2*radius_pix+1).

    fwhm_arcsec: (N,) FWHM in arcsec (must be > 0). profile: "gaussian" or "moffat" (index ``beta``).
    e1, e2: optional (N,) PSF ellipticity (lenstronomy convention, product-average radius) used
    for PSF anisotropy; the FWHM is then the geometric-mean FWHM.
    """
    fwhm = torch.as_tensor(fwhm_arcsec)
    if fwhm.ndim == 0:
        fwhm = fwhm[None]
    if not torch.all(torch.isfinite(fwhm) & (fwhm > 0)):
        raise InputError(f"PSF FWHM must be finite and > 0 arcsec, got {fwhm.tolist()[:8]}")
    dtype = fwhm.dtype if fwhm.is_floating_point() else torch.float64
    fwhm = fwhm.to(dtype)
    n = 2 * radius_pix + 1
    offs = (torch.arange(subsample, dtype=dtype, device=fwhm.device) + 0.5) / subsample - 0.5
    pix = torch.arange(n, dtype=dtype, device=fwhm.device) - radius_pix
    coords = ((pix[:, None] + offs[None, :]).reshape(-1)) * pixel_scale  # (n*subsample,)
    y, x = torch.meshgrid(coords, coords, indexing="ij")
    x = x[None]
    y = y[None]
    if e1 is not None or e2 is not None:
        e1t = torch.as_tensor(e1 if e1 is not None else 0.0, dtype=dtype, device=fwhm.device).reshape(-1, 1, 1)
        e2t = torch.as_tensor(e2 if e2 is not None else 0.0, dtype=dtype, device=fwhm.device).reshape(-1, 1, 1)
        norm = torch.sqrt(1.0 - e1t**2 - e2t**2)
        x, y = ((1.0 - e1t) * x - e2t * y) / norm, (-e2t * x + (1.0 + e1t) * y) / norm
    r2 = x * x + y * y
    f = fwhm.reshape(-1, 1, 1)
    if profile == "gaussian":
        sigma = f / GAUSSIAN_FWHM_PER_SIGMA
        k = torch.exp(-0.5 * r2 / sigma**2)
    elif profile == "moffat":
        alpha = f / (2.0 * math.sqrt(2.0 ** (1.0 / beta) - 1.0))
        k = (1.0 + r2 / alpha**2) ** (-beta)
    else:
        raise InputError(f"unknown PSF profile {profile!r}; expected 'gaussian' or 'moffat'")
    if subsample > 1:
        k = k.reshape(k.shape[0], n, subsample, n, subsample).mean(dim=(2, 4))
    return k / k.sum(dim=(-2, -1), keepdim=True)
