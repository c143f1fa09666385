"""Sérsic light profiles in lenstronomy's convention, batched in torch.

One implementation for mock-sky galaxies and lensed sources.

Conventions (lenstronomy's ``SERSIC`` / ``SERSIC_ELLIPSE`` light profiles, so the two agree):
- ``b_n = 1.9992 n - 0.3271`` (lenstronomy ``SersicUtil.b_n``, floored at 1e-5);
- ``r_sersic`` is the product-average (circularised) half-light radius in arcsec:
  R = sqrt(q x'^2 + y'^2 / q), computed from (e1, e2) without trigonometry;
- ``amp`` is the surface brightness at R = r_sersic in flux per arcsec^2 (nanomaggies/arcsec^2);
- total flux F = amp r^2 2 pi n e^{b_n} b_n^{-2n} Gamma(2n), independent of q.
A catalogue that quotes a semi-major-axis radius ``r_maj`` converts with r_sersic = r_maj sqrt(q).
"""

from __future__ import annotations

import math

import torch

#: Inner radius (arcsec) below which the profile is evaluated at this radius (lenstronomy's R_stable).
R_STABLE_ARCSEC = 1e-4


def sersic_b_n(n: torch.Tensor) -> torch.Tensor:
    """lenstronomy's linear approximation to the Sérsic b_n (dimensionless)."""
    return torch.clamp(1.9992 * n - 0.3271, min=1e-5)


def sersic_total_flux(amp: torch.Tensor, r_sersic: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """Total flux of an untruncated Sérsic: amp [flux/arcsec^2] * r_sersic^2 [arcsec^2] * ... -> flux."""
    n = torch.as_tensor(n)
    b = sersic_b_n(n)
    return amp * r_sersic**2 * 2.0 * math.pi * n * torch.exp(b) * b ** (-2.0 * n) * torch.exp(torch.lgamma(2.0 * n))


def sersic_amp_for_flux(flux: torch.Tensor, r_sersic: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """Surface brightness at r_sersic (flux/arcsec^2) that gives total ``flux``."""
    one = torch.ones_like(torch.as_tensor(flux, dtype=torch.as_tensor(r_sersic).dtype))
    return flux / sersic_total_flux(one, r_sersic, n)


def ellipse_radius(x: torch.Tensor, y: torch.Tensor, e1: torch.Tensor, e2: torch.Tensor) -> torch.Tensor:
    """Product-average elliptical radius sqrt(q x'^2 + y'^2/q) from offsets (arcsec) and (e1, e2)."""
    norm = torch.sqrt(torch.clamp(1.0 - e1 * e1 - e2 * e2, min=1e-12))
    xt = ((1.0 - e1) * x - e2 * y) / norm
    yt = (-e2 * x + (1.0 + e1) * y) / norm
    return torch.sqrt(xt * xt + yt * yt)


def sersic_surface_brightness(
    x: torch.Tensor,
    y: torch.Tensor,
    amp: torch.Tensor,
    r_sersic: torch.Tensor,
    n: torch.Tensor,
    e1: torch.Tensor,
    e2: torch.Tensor,
    center_x: torch.Tensor,
    center_y: torch.Tensor,
) -> torch.Tensor:
    """Elliptical Sérsic surface brightness (amp's units, per arcsec^2) at (x, y) in arcsec.

    All parameters broadcast against x and y (e.g. parameters shaped (B, 1, 1) against a grid (1, H, W)).
    """
    r = ellipse_radius(x - center_x, y - center_y, e1, e2)
    r = torch.clamp(r, min=R_STABLE_ARCSEC)
    b = sersic_b_n(n)
    return amp * torch.exp(-b * ((r / r_sersic) ** (1.0 / n) - 1.0))
