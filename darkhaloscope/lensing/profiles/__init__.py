"""Lens mass profiles as modules: one module per profile, each pure batched torch functions
(deflection, Hessian, convergence) under a ``Profile`` class that declares its parameters' names,
units, ranges and injection-task columns; ``REGISTRY`` by name; ``LensModel`` composes a list of
names as lenstronomy's ``LensModel(lens_model_list)`` does; ``LensBatch`` holds a composition's parameters.

A new profile is one module here (a registered ``Profile`` subclass, imported below) plus its test
against lenstronomy; the batch, the composition and the task columns follow from its ``params``.
"""

from . import epl, multipole, shear, sie  # noqa: F401  (each registers its profiles)
from .base import REGISTRY, Param, Profile, get_profile, register
from .composition import DEFAULT_PROFILES, LensBatch, LensModel, lens_model, lens_parameters_from_columns

__all__ = [
    "REGISTRY",
    "Param",
    "Profile",
    "get_profile",
    "register",
    "DEFAULT_PROFILES",
    "LensBatch",
    "LensModel",
    "lens_model",
    "lens_parameters_from_columns",
]
