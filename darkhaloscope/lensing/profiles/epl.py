"""Elliptical power law (lenstronomy's ``EPL``), deflection and Hessian analytic.

kappa = (3 - gamma)/2 (theta_e / sqrt(q x'^2 + y'^2/q))^(gamma - 1) in the major-axis frame (x', y'),
theta_e and (e1, e2) as in the SIE (gamma = 2 is the SIE). Tessore & Metcalf (2015, A&A 580, A79;
arXiv:1507.01819), with b = theta_e sqrt(q), t = gamma - 1, Z = q x' + i y', R = |Z|:
alpha = 2/(1+q) (b/R)^t Z 2F1(1, t/2; 2 - t/2; -(1-q)/(1+q) Z/conj(Z))            (their eq. 22-23)
and the shear of their corrected eq. 17, as lenstronomy's ``EPLMajorAxis``. The hypergeometric
function is summed as its power series, whose argument has modulus f = (1-q)/(1+q) < 1 and whose
coefficients (t/2)_n/(2 - t/2)_n decrease for 0 < t < 2, so N terms leave a relative error below
f^N/(1-f): N is chosen per batch to put that under the dtype's epsilon.
"""

from __future__ import annotations

import math

import torch

from .base import CENTER_X, CENTER_Y, E1, E2, THETA_E, Param, Params, Profile, expand, register
from .sie import MAX_ELLIPTICITY

#: The injection prior of the slope: the SLACS lenses' mean 3-d slope 2.078 with intrinsic scatter
#: 0.16 (Auger et al. 2010, ApJ 724, 511), truncated to [1.6, 2.6].
GAMMA = Param(
    "gamma",
    "",
    1.0,
    3.0,
    "lens_gamma",
    2.0,
    "power-law slope of the 3-d density (2: isothermal)",
    prior=("truncnormal", 1.6, 2.6, 2.078, 0.16),
)
#: Radii below this [arcsec] are clamped, as lenstronomy's EPLMajorAxis (R >= 1e-9 in the deflection).
_R_MIN = 1e-9


def _epl_terms(p: Params, x: torch.Tensor, y: torch.Tensor):
    """Per-lens b, t, q, cos/sin of the major-axis angle (expanded to x) and the rotated coordinates."""
    c = torch.clamp(torch.sqrt(p["e1"] ** 2 + p["e2"] ** 2), max=MAX_ELLIPTICITY)
    phi = 0.5 * torch.atan2(p["e2"], p["e1"])
    q = (1.0 - c) / (1.0 + c)
    b = p["theta_e"] * torch.sqrt(q)
    t = p["gamma"] - 1.0
    cos_p, sin_p, q, b, t = (expand(v, x) for v in (torch.cos(phi), torch.sin(phi), q, b, t))
    dx = x - expand(p["center_x"], x)
    dy = y - expand(p["center_y"], y)
    return b, t, q, cos_p, sin_p, cos_p * dx + sin_p * dy, -sin_p * dx + cos_p * dy


def _n_terms(q: torch.Tensor, dtype: torch.dtype) -> int:
    """Series terms for a relative truncation error below the dtype's epsilon at the batch's smallest q."""
    f = float(((1.0 - q) / (1.0 + q)).max()) if q.numel() else 0.0
    if f <= 0.0:
        return 1
    eps = torch.finfo(dtype).eps
    return max(1, math.ceil(math.log(eps * (1.0 - f)) / math.log(f)))


def _major_axis_deflection(xp, yp, b, t, q):
    """(alpha_x', alpha_y') in the major-axis frame (Tessore & Metcalf 2015 eq. 22-23)."""
    zr = q * xp
    zi = yp
    r = torch.clamp(torch.sqrt(zr * zr + zi * zi), min=_R_MIN)
    # w = -f e^{2i phi} with e^{2i phi} = Z / conj(Z) = (zr^2 - zi^2 + 2i zr zi) / R^2
    f = (1.0 - q) / (1.0 + q)
    wr = -f * (zr * zr - zi * zi) / (r * r)
    wi = -f * 2.0 * zr * zi / (r * r)
    a, cc = 0.5 * t, 2.0 - 0.5 * t
    sr, si = torch.ones_like(wr), torch.zeros_like(wr)
    tr, ti, coef = sr, si, torch.ones_like(t)
    for n in range(1, _n_terms(q, xp.dtype) + 1):
        coef = coef * (a + (n - 1)) / (cc + (n - 1))
        tr, ti = tr * wr - ti * wi, tr * wi + ti * wr
        sr = sr + coef * tr
        si = si + coef * ti
    amp = 2.0 / (1.0 + q) * (b / r) ** t
    return amp * (zr * sr - zi * si), amp * (zr * si + zi * sr)


def epl_deflection(x: torch.Tensor, y: torch.Tensor, p: Params):
    """EPL deflection (alpha_x, alpha_y) [arcsec] at (x, y) [arcsec]."""
    b, t, q, cos_p, sin_p, xp, yp = _epl_terms(p, x, y)
    axp, ayp = _major_axis_deflection(xp, yp, b, t, q)
    return cos_p * axp - sin_p * ayp, sin_p * axp + cos_p * ayp


def epl_convergence(x: torch.Tensor, y: torch.Tensor, p: Params) -> torch.Tensor:
    """kappa = (2 - t)/2 (b / sqrt(q^2 x'^2 + y'^2))^t [dimensionless]."""
    b, t, q, _, _, xp, yp = _epl_terms(p, x, y)
    r = torch.clamp(torch.sqrt((q * xp) ** 2 + yp * yp), min=_R_MIN)
    return (2.0 - t) / 2.0 * (b / r) ** t


def epl_hessian(x: torch.Tensor, y: torch.Tensor, p: Params):
    """Analytic EPL Hessian (f_xx, f_xy, f_yy) [dimensionless]: kappa and the shear of Tessore &
    Metcalf's corrected eq. 17 in the major-axis frame, the shear rotated back by 2 phi."""
    b, t, q, cos_p, sin_p, xp, yp = _epl_terms(p, x, y)
    big_r = torch.clamp(torch.sqrt((q * xp) ** 2 + yp * yp), min=_R_MIN)
    kappa = (2.0 - t) / 2.0 * (b / big_r) ** t
    r = torch.clamp(torch.sqrt(xp * xp + yp * yp), min=_R_MIN)
    c, s = xp / r, yp / r
    c2, s2 = 2.0 * c * c - 1.0, 2.0 * s * c
    axp, ayp = _major_axis_deflection(xp, yp, b, t, q)
    g1p = (1.0 - t) * (axp * c - ayp * s) / r - kappa * c2
    g2p = (1.0 - t) * (ayp * c + axp * s) / r - kappa * s2
    cos2, sin2 = 2.0 * cos_p * cos_p - 1.0, 2.0 * sin_p * cos_p
    g1 = cos2 * g1p - sin2 * g2p
    g2 = sin2 * g1p + cos2 * g2p
    return kappa + g1, g2, kappa - g1


@register
class EPL(Profile):
    """Elliptical power law: theta_e [arcsec], gamma, e1, e2, center_x, center_y [arcsec]."""

    name = "EPL"
    params = (THETA_E, GAMMA, E1, E2, CENTER_X, CENTER_Y)
    deflection = staticmethod(epl_deflection)
    hessian = staticmethod(epl_hessian)

    @staticmethod
    def convergence(x, y, p):
        return epl_convergence(x, y, p)

    @staticmethod
    def to_lenstronomy(p):
        keys = ("gamma", "e1", "e2", "center_x", "center_y")
        return "EPL", {"theta_E": p["theta_e"], **{k: p[k] for k in keys}}
