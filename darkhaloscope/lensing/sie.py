"""Batched SIE + external-shear lens model in torch, in lenstronomy's convention.

Conventions (lenstronomy's ``SIE`` and ``SHEAR`` profiles, which the tests use as the reference):
- angles in arcsec; x is the RA-like axis (East positive), y is Dec (North positive);
- ``theta_e`` is the product-average (intermediate-axis) Einstein radius: the kappa = 1/2
  isodensity has semi-axes theta_e/sqrt(q) and theta_e*sqrt(q);
- ellipticity (e1, e2) = (1-q)/(1+q) (cos 2phi, sin 2phi), phi the major-axis angle counter-clockwise
  from +x; |e| is clamped at 0.9999 as in ``param_util.ellipticity2phi_q``;
- external shear alpha = (g1 x + g2 y, g2 x - g1 y) about the coordinate origin (the stamp centre),
  lenstronomy's ``SHEAR`` default ra_0 = dec_0 = 0; relative to a shear about the lens centre this
  only translates the source plane by a constant.

The SIE is the s -> 0 limit of Keeton & Kochanek (1998), which equals lenstronomy's
``SIE(NIE=False)`` = ``EPL(gamma=2)`` to <1e-8 arcsec. The Hessian is analytic: for any
isothermal (degree-1 homogeneous) potential H = (2 kappa / r^2) [[dy^2, -dx dy], [-dx dy, dx^2]].
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import torch

from ..errors import InputError

#: lenstronomy's cap on |e| (param_util.ellipticity2phi_q), keeps q >= 5e-5.
MAX_ELLIPTICITY = 0.9999
#: Below this f = sqrt(1 - q^2) the atan/atanh ratios use their Taylor series (q -> 1 limit).
_SERIES_F = 1e-3


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


@dataclass
class LensBatch:
    """Parameters of B lenses, each a (B,) tensor.

    theta_e [arcsec], e1, e2 [dimensionless], center_x, center_y [arcsec], gamma1, gamma2 [dimensionless].
    """

    theta_e: torch.Tensor
    e1: torch.Tensor
    e2: torch.Tensor
    center_x: torch.Tensor
    center_y: torch.Tensor
    gamma1: torch.Tensor
    gamma2: torch.Tensor

    @classmethod
    def from_arrays(cls, device="cpu", dtype=torch.float32, **arrays) -> "LensBatch":
        """Build from array-likes (names as the fields); missing centre/shear default to 0."""
        theta_e = torch.as_tensor(np.array(arrays["theta_e"], dtype=np.float64), dtype=dtype, device=device).reshape(-1)
        out = {"theta_e": theta_e}
        for f in fields(cls):
            if f.name == "theta_e":
                continue
            v = arrays.get(f.name, 0.0)
            out[f.name] = (
                torch.as_tensor(np.array(v, dtype=np.float64), dtype=dtype, device=device)
                .reshape(-1)
                .expand_as(theta_e)
                .clone()
            )
        batch = cls(**out)
        batch.validate()
        return batch

    def validate(self) -> None:
        """Raise InputError on non-finite values, negative theta_e or mismatched shapes."""
        n = self.theta_e.shape[0]
        for f in fields(self):
            v = getattr(self, f.name)
            if v.shape != (n,):
                raise InputError(f"lens parameter {f.name} has shape {tuple(v.shape)}, expected ({n},)")
            if not torch.all(torch.isfinite(v)):
                raise InputError(f"lens parameter {f.name} has non-finite values: {v[~torch.isfinite(v)][:4].tolist()}")
        if torch.any(self.theta_e < 0):
            raise InputError(f"theta_e must be >= 0 arcsec, got {self.theta_e[self.theta_e < 0][:4].tolist()}")

    def to(self, device=None, dtype=None) -> "LensBatch":
        return LensBatch(**{f.name: getattr(self, f.name).to(device=device, dtype=dtype) for f in fields(self)})

    def index(self, idx: torch.Tensor) -> "LensBatch":
        """Gather rows ``idx`` (any integer tensor shape -> parameters of that shape)."""
        return LensBatch(**{f.name: getattr(self, f.name)[idx] for f in fields(self)})

    def __len__(self) -> int:
        return int(self.theta_e.shape[0])


def _expand(p: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Reshape per-lens parameters (B,) or (M,) to broadcast against coordinates (B, ...)."""
    return p.reshape(p.shape + (1,) * (like.ndim - p.ndim))


def _axis_ratio_terms(e1: torch.Tensor, e2: torch.Tensor):
    """cos(phi), sin(phi), q and f = sqrt(1 - q^2), with f computed as 2 sqrt(c)/(1+c) (no cancellation)."""
    c = torch.clamp(torch.sqrt(e1 * e1 + e2 * e2), max=MAX_ELLIPTICITY)
    phi = 0.5 * torch.atan2(e2, e1)
    q = (1.0 - c) / (1.0 + c)
    f = 2.0 * torch.sqrt(c) / (1.0 + c)
    return torch.cos(phi), torch.sin(phi), q, f


def sie_deflection(x: torch.Tensor, y: torch.Tensor, lens: LensBatch):
    """SIE deflection (alpha_x, alpha_y) in arcsec at image positions (x, y) [arcsec].

    x, y have shape (B, ...) with B == len(lens) (or any shape whose leading dims match the lens
    parameter shape). alpha = 0 exactly at the lens centre (the SIS convention).
    """
    cos_p, sin_p, q, f = _axis_ratio_terms(lens.e1, lens.e2)
    small = f < _SERIES_F
    f_safe = torch.where(small, torch.ones_like(f), f)
    # theta_e sqrt(q) / f folded into one per-lens factor; the series branch has no 1/f.
    pref = lens.theta_e * torch.sqrt(q)
    scale = _expand(torch.where(small, pref, pref / f_safe), x)
    cos_p, sin_p, q, f_safe = (_expand(t, x) for t in (cos_p, sin_p, q, f_safe))
    dx = x - _expand(lens.center_x, x)
    dy = y - _expand(lens.center_y, y)
    xp = cos_p * dx + sin_p * dy
    yp = cos_p * dy - sin_p * dx
    qx = q * xp
    # x'/psi and y'/psi are bounded (<= 1/q, <= 1); at the centre both are 0/0, defined as 0.
    inv_psi = torch.rsqrt(torch.clamp(qx * qx + yp * yp, min=torch.finfo(x.dtype).tiny))
    zx = xp * inv_psi
    zy = yp * inv_psi
    if bool(small.all()):
        ax_p, ay_p = _series(zx, zy, _expand(f, x))
    else:
        ax_p = torch.atan(f_safe * zx)
        ay_p = torch.atanh(f_safe * zy)
        if bool(small.any()):
            sx, sy = _series(zx, zy, _expand(f, x))
            sm = _expand(small, x)
            ax_p = torch.where(sm, sx, ax_p)
            ay_p = torch.where(sm, sy, ay_p)
    ax_p = scale * ax_p
    ay_p = scale * ay_p
    return cos_p * ax_p - sin_p * ay_p, sin_p * ax_p + cos_p * ay_p


def _series(zx: torch.Tensor, zy: torch.Tensor, f: torch.Tensor):
    """atan(f zx)/f and atanh(f zy)/f to O(f^6) (q -> 1, where f = sqrt(1 - q^2) -> 0)."""
    f2 = f * f
    zx2 = zx * zx
    zy2 = zy * zy
    return zx * (1.0 - f2 * zx2 * (1.0 / 3.0 - f2 * zx2 / 5.0)), zy * (1.0 + f2 * zy2 * (1.0 / 3.0 + f2 * zy2 / 5.0))


def shear_deflection(x: torch.Tensor, y: torch.Tensor, lens: LensBatch):
    """External-shear deflection (g1 x + g2 y, g2 x - g1 y) [arcsec] about the origin (0, 0)."""
    g1 = _expand(lens.gamma1, x)
    g2 = _expand(lens.gamma2, x)
    return g1 * x + g2 * y, g2 * x - g1 * y


def ray_shoot(x: torch.Tensor, y: torch.Tensor, lens: LensBatch):
    """Source-plane positions beta = theta - alpha_SIE - alpha_shear [arcsec]."""
    ax, ay = sie_deflection(x, y, lens)
    sx, sy = shear_deflection(x, y, lens)
    return x - ax - sx, y - ay - sy


def sie_convergence(x: torch.Tensor, y: torch.Tensor, lens: LensBatch) -> torch.Tensor:
    """SIE convergence kappa = theta_e / (2 sqrt(q x'^2 + y'^2/q)) (dimensionless)."""
    cos_p, sin_p, q, _ = (_expand(t, x) for t in _axis_ratio_terms(lens.e1, lens.e2))
    dx = x - _expand(lens.center_x, x)
    dy = y - _expand(lens.center_y, y)
    xp = cos_p * dx + sin_p * dy
    yp = -sin_p * dx + cos_p * dy
    r_pa = torch.sqrt(q * xp * xp + yp * yp / q)
    r_pa = torch.clamp(r_pa, min=torch.finfo(x.dtype).tiny)
    return _expand(lens.theta_e, x) / (2.0 * r_pa)


def hessian(x: torch.Tensor, y: torch.Tensor, lens: LensBatch):
    """Analytic lensing Hessian (f_xx, f_xy, f_yy) of SIE + shear (dimensionless)."""
    kappa = sie_convergence(x, y, lens)
    dx = x - _expand(lens.center_x, x)
    dy = y - _expand(lens.center_y, y)
    r2 = torch.clamp(dx * dx + dy * dy, min=torch.finfo(x.dtype).tiny)
    k2 = 2.0 * kappa / r2
    g1 = _expand(lens.gamma1, x)
    g2 = _expand(lens.gamma2, x)
    return k2 * dy * dy + g1, -k2 * dx * dy + g2, k2 * dx * dx - g1


def magnification(x: torch.Tensor, y: torch.Tensor, lens: LensBatch) -> torch.Tensor:
    """Signed point magnification mu = 1 / det(I - H) at image positions (x, y) [arcsec]."""
    fxx, fxy, fyy = hessian(x, y, lens)
    det = (1.0 - fxx) * (1.0 - fyy) - fxy * fxy
    return 1.0 / det
