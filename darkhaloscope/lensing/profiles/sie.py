"""Singular isothermal ellipsoid (lenstronomy's ``SIE``), deflection and Hessian analytic.

theta_e is the product-average (intermediate-axis) Einstein radius: the kappa = 1/2 isodensity has
semi-axes theta_e/sqrt(q) and theta_e sqrt(q); (e1, e2) = (1-q)/(1+q) (cos 2phi, sin 2phi), phi the
major-axis angle counter-clockwise from +x, |e| clamped at 0.9999 as lenstronomy's
``param_util.ellipticity2phi_q``. The deflection is the s -> 0 limit of Keeton & Kochanek (1998),
equal to lenstronomy's ``SIE(NIE=False)`` = ``EPL(gamma=2)``. For any isothermal (degree-1
homogeneous) potential the Hessian is H = (2 kappa / r^2) [[dy^2, -dx dy], [-dx dy, dx^2]].
"""

from __future__ import annotations

import torch

from .base import CENTER_X, CENTER_Y, E1, E2, THETA_E, Params, Profile, expand, register

#: lenstronomy's cap on |e| (param_util.ellipticity2phi_q), keeps q >= 5e-5.
MAX_ELLIPTICITY = 0.9999
#: Below this f = sqrt(1 - q^2) the atan/atanh ratios use their Taylor series (q -> 1 limit).
_SERIES_F = 1e-3


def axis_ratio_terms(e1: torch.Tensor, e2: torch.Tensor):
    """cos(phi), sin(phi), q and f = sqrt(1 - q^2), with f computed as 2 sqrt(c)/(1+c) (no cancellation)."""
    c = torch.clamp(torch.sqrt(e1 * e1 + e2 * e2), max=MAX_ELLIPTICITY)
    phi = 0.5 * torch.atan2(e2, e1)
    q = (1.0 - c) / (1.0 + c)
    f = 2.0 * torch.sqrt(c) / (1.0 + c)
    return torch.cos(phi), torch.sin(phi), q, f


def _series(zx: torch.Tensor, zy: torch.Tensor, f: torch.Tensor):
    """atan(f zx)/f and atanh(f zy)/f to O(f^6) (q -> 1, where f = sqrt(1 - q^2) -> 0)."""
    f2 = f * f
    zx2 = zx * zx
    zy2 = zy * zy
    return zx * (1.0 - f2 * zx2 * (1.0 / 3.0 - f2 * zx2 / 5.0)), zy * (1.0 + f2 * zy2 * (1.0 / 3.0 + f2 * zy2 / 5.0))


def sie_deflection(x: torch.Tensor, y: torch.Tensor, p: Params):
    """SIE deflection (alpha_x, alpha_y) [arcsec] at (x, y) [arcsec]; alpha = 0 at the centre (SIS convention)."""
    cos_p, sin_p, q, f = axis_ratio_terms(p["e1"], p["e2"])
    small = f < _SERIES_F
    f_safe = torch.where(small, torch.ones_like(f), f)
    # theta_e sqrt(q) / f folded into one per-lens factor; the series branch has no 1/f.
    pref = p["theta_e"] * torch.sqrt(q)
    scale = expand(torch.where(small, pref, pref / f_safe), x)
    cos_p, sin_p, q, f_safe = (expand(t, x) for t in (cos_p, sin_p, q, f_safe))
    dx = x - expand(p["center_x"], x)
    dy = y - expand(p["center_y"], y)
    xp = cos_p * dx + sin_p * dy
    yp = cos_p * dy - sin_p * dx
    qx = q * xp
    # x'/psi and y'/psi are bounded (<= 1/q, <= 1); at the centre both are 0/0, defined as 0.
    inv_psi = torch.rsqrt(torch.clamp(qx * qx + yp * yp, min=torch.finfo(x.dtype).tiny))
    zx = xp * inv_psi
    zy = yp * inv_psi
    if bool(small.all()):
        ax_p, ay_p = _series(zx, zy, expand(f, x))
    else:
        ax_p = torch.atan(f_safe * zx)
        ay_p = torch.atanh(f_safe * zy)
        if bool(small.any()):
            sx, sy = _series(zx, zy, expand(f, x))
            sm = expand(small, x)
            ax_p = torch.where(sm, sx, ax_p)
            ay_p = torch.where(sm, sy, ay_p)
    ax_p = scale * ax_p
    ay_p = scale * ay_p
    return cos_p * ax_p - sin_p * ay_p, sin_p * ax_p + cos_p * ay_p


def sie_convergence(x: torch.Tensor, y: torch.Tensor, p: Params) -> torch.Tensor:
    """SIE convergence kappa = theta_e / (2 sqrt(q x'^2 + y'^2/q)) [dimensionless]."""
    cos_p, sin_p, q, _ = (expand(t, x) for t in axis_ratio_terms(p["e1"], p["e2"]))
    dx = x - expand(p["center_x"], x)
    dy = y - expand(p["center_y"], y)
    xp = cos_p * dx + sin_p * dy
    yp = -sin_p * dx + cos_p * dy
    r_pa = torch.sqrt(q * xp * xp + yp * yp / q)
    r_pa = torch.clamp(r_pa, min=torch.finfo(x.dtype).tiny)
    return expand(p["theta_e"], x) / (2.0 * r_pa)


def sie_hessian(x: torch.Tensor, y: torch.Tensor, p: Params):
    """Analytic SIE Hessian (f_xx, f_xy, f_yy) [dimensionless] (module docstring)."""
    kappa = sie_convergence(x, y, p)
    dx = x - expand(p["center_x"], x)
    dy = y - expand(p["center_y"], y)
    r2 = torch.clamp(dx * dx + dy * dy, min=torch.finfo(x.dtype).tiny)
    k2 = 2.0 * kappa / r2
    return k2 * dy * dy, -k2 * dx * dy, k2 * dx * dx


@register
class SIE(Profile):
    """Singular isothermal ellipsoid: theta_e [arcsec], e1, e2, center_x, center_y [arcsec]."""

    name = "SIE"
    params = (THETA_E, E1, E2, CENTER_X, CENTER_Y)
    deflection = staticmethod(sie_deflection)
    hessian = staticmethod(sie_hessian)

    @staticmethod
    def convergence(x, y, p):
        return sie_convergence(x, y, p)

    @staticmethod
    def to_lenstronomy(p):
        # EPL with gamma = 2 is lenstronomy's SIE with an analytic Hessian (its default NIE
        # Hessian is a finite difference).
        keys = ("e1", "e2", "center_x", "center_y")
        return "EPL", {"theta_E": p["theta_e"], "gamma": 2.0, **{k: p[k] for k in keys}}
