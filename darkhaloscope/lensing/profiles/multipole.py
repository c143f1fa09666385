"""Circular multipoles of order m = 3, 4 (lenstronomy's ``MULTIPOLE``), deflection and Hessian analytic.

Xu et al. (2013, MNRAS 435, 1040) appendix B3, eq. B12, as lenstronomy: the potential is
psi = r a_m / (1 - m^2) cos(m (phi - phi_m)) about the lens centre, so kappa = a_m cos(m (phi - phi_m)) / (2 r);
a_m [arcsec] is the strength and phi_m [rad] the orientation. The centre is the lens's (shared
``center_x``, ``center_y``), so a multipole composes with an SIE or EPL as one perturbed deflector.
Each order is its own registered profile (``MULTIPOLE_M3``, ``MULTIPOLE_M4``) with its own parameter
names, so both compose in one lens.
"""

from __future__ import annotations

import math

import torch

from .base import CENTER_X, CENTER_Y, Param, Params, Profile, expand, register

#: Radii below this [arcsec] are clamped in the Hessian, as lenstronomy's Multipole.hessian.
_R_MIN = 1e-6
#: Injection prior of the strength a_m [arcsec]: uniform in [0, 0.03]; an assumption (a range for
#: the engine, not a measured population). The orientation is uniform over the period 2 pi / m.
_A_M_PRIOR = ("uniform", 0.0, 0.03)


def _polar(x: torch.Tensor, y: torch.Tensor, p: Params):
    dx = x - expand(p["center_x"], x)
    dy = y - expand(p["center_y"], y)
    return torch.sqrt(dx * dx + dy * dy), torch.atan2(dy, dx)


def multipole_profile(m: int) -> type[Profile]:
    """The registered circular multipole profile of order ``m`` (parameters a{m}, phi{m})."""
    a_name, phi_name = f"a{m}", f"phi{m}"

    def deflection(x: torch.Tensor, y: torch.Tensor, p: Params):
        r, phi = _polar(x, y, p)
        a = expand(p[a_name], x) / (1.0 - m * m)
        ang = m * (phi - expand(p[phi_name], x))
        cos_m, sin_m = torch.cos(ang), torch.sin(ang)
        cos_p, sin_p = torch.cos(phi), torch.sin(phi)
        return cos_p * a * cos_m + sin_p * m * a * sin_m, sin_p * a * cos_m - cos_p * m * a * sin_m

    def hessian(x: torch.Tensor, y: torch.Tensor, p: Params):
        r, phi = _polar(x, y, p)
        k = expand(p[a_name], x) * torch.cos(m * (phi - expand(p[phi_name], x))) / torch.clamp(r, min=_R_MIN)
        cos_p, sin_p = torch.cos(phi), torch.sin(phi)
        return sin_p * sin_p * k, -cos_p * sin_p * k, cos_p * cos_p * k

    def to_lenstronomy(p):
        kw = {"m": m, "a_m": p[a_name], "phi_m": p[phi_name], "center_x": p["center_x"], "center_y": p["center_y"]}
        return "MULTIPOLE", kw

    attrs = {
        "__doc__": f"Circular multipole m = {m}: {a_name} [arcsec], {phi_name} [rad], center_x, center_y [arcsec].",
        "name": f"MULTIPOLE_M{m}",
        "params": (
            Param(a_name, "arcsec", 0.0, math.inf, f"lens_a{m}_arcsec", 0.0, f"m = {m} multipole strength", _A_M_PRIOR),
            Param(
                phi_name,
                "rad",
                -math.inf,
                math.inf,
                f"lens_phi{m}_rad",
                0.0,
                f"m = {m} multipole orientation",
                ("uniform", 0.0, 2.0 * math.pi / m),
            ),
            CENTER_X,
            CENTER_Y,
        ),
        "deflection": staticmethod(deflection),
        "hessian": staticmethod(hessian),
        "to_lenstronomy": staticmethod(to_lenstronomy),
    }
    return register(type(f"MultipoleM{m}", (Profile,), attrs))


MultipoleM3 = multipole_profile(3)
MultipoleM4 = multipole_profile(4)
