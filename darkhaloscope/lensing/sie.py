"""The injection engine's lens: ray shooting, Hessian and magnification of a ``LensBatch`` through
its composition of profiles (``lensing.profiles``; the default is SIE + external shear), and the
ellipticity conventions.

Conventions (lenstronomy's, which the tests use as the reference):
- angles in arcsec; x is the RA-like axis (East positive), y is Dec (North positive);
- ellipticity (e1, e2) = (1-q)/(1+q) (cos 2phi, sin 2phi), phi the major-axis angle counter-clockwise
  from +x; |e| is clamped at 0.9999 as in ``param_util.ellipticity2phi_q``;
- each profile's parameters, units and ranges are declared by its module in ``lensing/profiles/``.
"""

from __future__ import annotations

import torch

from .profiles.composition import LensBatch
from .profiles.shear import shear_deflection
from .profiles.sie import MAX_ELLIPTICITY, sie_convergence, sie_deflection

__all__ = [
    "MAX_ELLIPTICITY",
    "LensBatch",
    "ellipticity_from_phi_q",
    "phi_q_from_ellipticity",
    "sie_deflection",
    "sie_convergence",
    "shear_deflection",
    "ray_shoot",
    "hessian",
    "magnification",
]


def ellipticity_from_phi_q(phi, q):
    """(e1, e2) from major-axis angle phi [rad] and axis ratio q (lenstronomy ``phi_q2_ellipticity``)."""
    phi = torch.as_tensor(phi)
    q = torch.as_tensor(q, dtype=phi.dtype if phi.is_floating_point() else torch.float64)
    c = (1.0 - q) / (1.0 + q)
    return c * torch.cos(2.0 * phi), c * torch.sin(2.0 * phi)


def phi_q_from_ellipticity(e1, e2):
    """(phi [rad], q) from (e1, e2) (lenstronomy ``ellipticity2phi_q``, |e| clamped at 0.9999)."""
    e1 = torch.as_tensor(e1)
    e2 = torch.as_tensor(e2)
    c = torch.clamp(torch.sqrt(e1 * e1 + e2 * e2), max=MAX_ELLIPTICITY)
    return 0.5 * torch.atan2(e2, e1), (1.0 - c) / (1.0 + c)


def ray_shoot(x: torch.Tensor, y: torch.Tensor, lens: LensBatch):
    """Source-plane positions beta = theta - sum of the lens's deflections [arcsec] at (x, y) [arcsec].

    x, y have shape (B, ...) with B == len(lens) (or any shape whose leading dims match the lens
    parameter shape)."""
    return lens.model().ray_shoot(x, y, lens)


def hessian(x: torch.Tensor, y: torch.Tensor, lens: LensBatch):
    """Lensing Hessian (f_xx, f_xy, f_yy) of the lens's composition [dimensionless]."""
    return lens.model().hessian(x, y, lens)


def magnification(x: torch.Tensor, y: torch.Tensor, lens: LensBatch) -> torch.Tensor:
    """Signed point magnification mu = 1 / det(I - H) at image positions (x, y) [arcsec]."""
    return lens.model().magnification(x, y, lens)
