"""External shear (lenstronomy's ``SHEAR`` with ra_0 = dec_0 = 0), deflection and Hessian analytic.

alpha = (g1 x + g2 y, g2 x - g1 y) about the coordinate origin (the stamp centre); relative to a shear
about the lens centre this only translates the source plane by a constant. H = [[g1, g2], [g2, -g1]].
"""

from __future__ import annotations

import torch

from .base import Param, Params, Profile, expand, register

GAMMA1 = Param("gamma1", "", -1.0, 1.0, "shear_g1", 0.0, "external shear component gamma1")
GAMMA2 = Param("gamma2", "", -1.0, 1.0, "shear_g2", 0.0, "external shear component gamma2")


def shear_deflection(x: torch.Tensor, y: torch.Tensor, p: Params):
    """External-shear deflection (g1 x + g2 y, g2 x - g1 y) [arcsec] about the origin (0, 0)."""
    g1 = expand(p["gamma1"], x)
    g2 = expand(p["gamma2"], x)
    return g1 * x + g2 * y, g2 * x - g1 * y


def shear_hessian(x: torch.Tensor, y: torch.Tensor, p: Params):
    """(f_xx, f_xy, f_yy) = (g1, g2, -g1), broadcast to the coordinates' shape."""
    g1 = expand(p["gamma1"], x).expand_as(x)
    g2 = expand(p["gamma2"], x).expand_as(x)
    return g1, g2, -g1


@register
class Shear(Profile):
    """External shear: gamma1, gamma2 [dimensionless]."""

    name = "SHEAR"
    params = (GAMMA1, GAMMA2)
    deflection = staticmethod(shear_deflection)
    hessian = staticmethod(shear_hessian)

    @staticmethod
    def convergence(x, y, p):
        return torch.zeros_like(x)

    @staticmethod
    def to_lenstronomy(p):
        return "SHEAR", {"gamma1": p["gamma1"], "gamma2": p["gamma2"], "ra_0": 0.0, "dec_0": 0.0}
