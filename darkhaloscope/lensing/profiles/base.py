"""The profile interface: a class declaring its parameters over pure, batched torch functions.

A profile is a subclass of ``Profile`` registered by name with ``@register``; its class attributes
declare the parameters (``Param``: the engine's name, unit, valid range, the injection-task column
and the value used when a column is absent) and its static methods take coordinates (B, ...) [arcsec]
and a mapping of per-lens parameters, each (B,) (or any shape that is a prefix of the coordinates').
Parameter names are shared across the profiles of one composition when they mean the same thing
(``center_x``, ``center_y`` of a main deflector and its multipoles), as one lens has one centre.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Mapping

import torch

from ...errors import InputError

Params = Mapping[str, torch.Tensor]


@dataclass(frozen=True)
class Param:
    """One lens parameter: engine ``name``, ``unit``, valid range [low, high] (a value outside it is
    an InputError), the injection-task ``column`` it is read from, ``default`` (the value when it is
    not given; None: required), and for a parameter beyond SIE + shear the injection ``prior`` it is
    drawn from when a plan's lens has it: (kind, lo, hi[, mu, sigma]) as ``lensing.priors.Prior``
    (the SIE's and the shear's are the proposals' own, ``lensing.priors``)."""

    name: str
    unit: str
    low: float
    high: float
    column: str
    default: float | None = 0.0
    doc: str = ""
    prior: tuple | None = None


#: A position on the sky (profile centre), unbounded.
CENTER_X = Param("center_x", "arcsec", -math.inf, math.inf, "lens_center_x_arcsec", 0.0, "mass centre, East")
CENTER_Y = Param("center_y", "arcsec", -math.inf, math.inf, "lens_center_y_arcsec", 0.0, "mass centre, North")
#: Ellipticity components (lenstronomy's e1, e2; |e| is clamped at MAX_ELLIPTICITY by the profiles).
E1 = Param("e1", "", -math.inf, math.inf, "lens_e1", 0.0, "ellipticity (1-q)/(1+q) cos 2phi")
E2 = Param("e2", "", -math.inf, math.inf, "lens_e2", 0.0, "ellipticity (1-q)/(1+q) sin 2phi")
#: Product-average Einstein radius (lenstronomy's theta_E).
THETA_E = Param("theta_e", "arcsec", 0.0, math.inf, "theta_e_arcsec", None, "product-average Einstein radius")


class Profile:
    """A lens mass profile: ``name``, ``params`` and ``hessian_method`` ('analytic' here) declared on
    the class; ``deflection``, ``hessian`` and ``convergence`` are pure functions of (x, y, params)."""

    name: ClassVar[str]
    params: ClassVar[tuple[Param, ...]]
    hessian_method: ClassVar[str] = "analytic"

    @staticmethod
    def deflection(x: torch.Tensor, y: torch.Tensor, p: Params) -> tuple[torch.Tensor, torch.Tensor]:
        """Deflection (alpha_x, alpha_y) [arcsec] at (x, y) [arcsec]."""
        raise NotImplementedError

    @staticmethod
    def hessian(x: torch.Tensor, y: torch.Tensor, p: Params) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Second derivatives of the lensing potential (f_xx, f_xy, f_yy) [dimensionless]."""
        raise NotImplementedError

    @classmethod
    def convergence(cls, x: torch.Tensor, y: torch.Tensor, p: Params) -> torch.Tensor:
        """kappa = (f_xx + f_yy)/2 [dimensionless]."""
        fxx, _, fyy = cls.hessian(x, y, p)
        return 0.5 * (fxx + fyy)

    @staticmethod
    def to_lenstronomy(p: Mapping[str, float]) -> tuple[str, dict]:
        """The same profile in lenstronomy (the reference it is tested against): its profile name
        and keyword arguments, from this profile's parameters ``p`` (floats, this profile's units)."""
        raise NotImplementedError


#: Profiles by name (lenstronomy's names where the convention is lenstronomy's).
REGISTRY: dict[str, type[Profile]] = {}


def register(cls: type[Profile]) -> type[Profile]:
    """Class decorator: add a profile to REGISTRY under ``cls.name`` (a name is registered once)."""
    if cls.name in REGISTRY and REGISTRY[cls.name] is not cls:
        raise ValueError(f"lens profile {cls.name!r} is already registered")
    REGISTRY[cls.name] = cls
    return cls


def get_profile(name: str) -> type[Profile]:
    """The registered profile ``name``; InputError naming the known ones otherwise."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise InputError(f"unknown lens profile {name!r}; known: {sorted(REGISTRY)}") from None


def expand(p: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Reshape per-lens parameters (B,) or (M,) to broadcast against coordinates (B, ...)."""
    return p.reshape(p.shape + (1,) * (like.ndim - p.ndim))
