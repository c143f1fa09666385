"""Composition of profiles by a list of names (as lenstronomy's ``LensModel(lens_model_list)``), and
``LensBatch``, the parameters of B lenses of one composition.

The composition's parameters are the union of its profiles' (a name shared by two profiles, such as
the centre of an EPL and of its multipoles, is one parameter); its deflection and Hessian are the
sums of its profiles', its ray shooting beta = theta - sum of the deflections, subtracted in list
order (for SIE + SHEAR exactly theta - alpha_SIE - alpha_shear, as the engine always computed it).
"""

from __future__ import annotations

import functools
from typing import ClassVar, Mapping, Sequence

import numpy as np
import torch

from ...errors import InputError
from .base import Param, Params, get_profile

#: The injection engine's default lens: an SIE in external shear.
DEFAULT_PROFILES = ("SIE", "SHEAR")


class LensModel:
    """A composition of registered profiles, by name (``LensModel(("EPL", "SHEAR", "MULTIPOLE_M4"))``)."""

    def __init__(self, names: Sequence[str]):
        if not names:
            raise InputError("a lens model needs at least one profile")
        self.names = tuple(names)
        if len(set(self.names)) != len(self.names):
            raise InputError(f"lens profiles {list(self.names)} name a profile twice")
        self.profiles = tuple(get_profile(n) for n in self.names)
        seen: dict[str, Param] = {}
        for prof in self.profiles:
            for par in prof.params:
                if par.name in seen and seen[par.name] != par:
                    raise InputError(f"profiles {list(self.names)} declare parameter {par.name!r} differently")
                seen.setdefault(par.name, par)
        #: The composition's parameters, first declaration first.
        self.params: tuple[Param, ...] = tuple(seen.values())
        self.param_names: tuple[str, ...] = tuple(seen)

    def columns(self) -> dict[str, str]:
        """Injection-task column of each parameter (engine name -> column name)."""
        return {p.name: p.column for p in self.params}

    def deflection(self, x: torch.Tensor, y: torch.Tensor, p: Params):
        """Total deflection (alpha_x, alpha_y) [arcsec] at (x, y) [arcsec]."""
        ax, ay = self.profiles[0].deflection(x, y, p)
        for prof in self.profiles[1:]:
            bx, by = prof.deflection(x, y, p)
            ax, ay = ax + bx, ay + by
        return ax, ay

    def ray_shoot(self, x: torch.Tensor, y: torch.Tensor, p: Params):
        """Source-plane positions beta = theta - sum alpha [arcsec]."""
        bx, by = x, y
        for prof in self.profiles:
            ax, ay = prof.deflection(x, y, p)
            bx, by = bx - ax, by - ay
        return bx, by

    def hessian(self, x: torch.Tensor, y: torch.Tensor, p: Params):
        """Total Hessian (f_xx, f_xy, f_yy) [dimensionless]."""
        fxx, fxy, fyy = self.profiles[0].hessian(x, y, p)
        for prof in self.profiles[1:]:
            gxx, gxy, gyy = prof.hessian(x, y, p)
            fxx, fxy, fyy = fxx + gxx, fxy + gxy, fyy + gyy
        return fxx, fxy, fyy

    def convergence(self, x: torch.Tensor, y: torch.Tensor, p: Params) -> torch.Tensor:
        """Total convergence kappa [dimensionless]."""
        k = self.profiles[0].convergence(x, y, p)
        for prof in self.profiles[1:]:
            k = k + prof.convergence(x, y, p)
        return k

    def magnification(self, x: torch.Tensor, y: torch.Tensor, p: Params) -> torch.Tensor:
        """Signed point magnification mu = 1 / det(I - H)."""
        fxx, fxy, fyy = self.hessian(x, y, p)
        return 1.0 / ((1.0 - fxx) * (1.0 - fyy) - fxy * fxy)


@functools.lru_cache(maxsize=None)
def lens_model(names: tuple[str, ...] = DEFAULT_PROFILES) -> LensModel:
    """The (cached) composition of ``names``."""
    return LensModel(names)


class LensBatch:
    """Parameters of B lenses of one composition, each a (B,) tensor attribute named as the
    composition's parameters (units as the profiles declare). ``LensBatch`` itself is SIE + SHEAR:
    theta_e [arcsec], e1, e2, center_x, center_y [arcsec], gamma1, gamma2; ``LensBatch.of(names)`` is
    the batch class of another composition. A batch is also a mapping name -> tensor for the
    profiles' functions (``batch["theta_e"]``)."""

    profiles: ClassVar[tuple[str, ...]] = DEFAULT_PROFILES

    def __init__(self, **params: torch.Tensor):
        names = self.model().param_names
        missing = [n for n in names if n not in params]
        extra = [n for n in params if n not in names]
        if missing or extra:
            raise InputError(
                f"lens parameters of {list(self.profiles)}: missing {missing}, unexpected {extra} "
                f"(expected {list(names)})"
            )
        for n in names:
            setattr(self, n, params[n])

    @classmethod
    def model(cls) -> LensModel:
        return lens_model(cls.profiles)

    @staticmethod
    def of(profiles: Sequence[str]) -> type["LensBatch"]:
        """The batch class of the composition ``profiles`` (LensBatch itself for the default)."""
        return _batch_class(tuple(profiles))

    @classmethod
    def from_arrays(cls, device="cpu", dtype=torch.float32, profiles=None, **arrays) -> "LensBatch":
        """Build from array-likes named as the parameters; a parameter not given takes its declared
        default (a required one, such as theta_e, raises InputError). ``profiles``: the composition
        (default: this class's)."""
        klass = cls if profiles is None else LensBatch.of(profiles)
        model = klass.model()
        unknown = [k for k in arrays if k not in model.param_names]
        if unknown:
            raise InputError(f"lens parameters {unknown} are not parameters of {list(klass.profiles)}")
        absent = [p.name for p in model.params if p.default is None and p.name not in arrays]
        if absent:
            raise InputError(f"lens parameters {absent} of {list(klass.profiles)} are required")

        def tensor(v):
            return torch.as_tensor(np.array(v, dtype=np.float64), dtype=dtype, device=device).reshape(-1)

        given = {k: tensor(v) for k, v in arrays.items()}
        lead = next((given[p.name] for p in model.params if p.default is None), None)
        if lead is None:
            lead = next(iter(given.values()), tensor([]))
        out = {}
        for p in model.params:
            v = given[p.name] if p.name in given else tensor(p.default)
            if v.numel() not in (1, lead.numel()):
                raise InputError(f"lens parameter {p.name} has {v.numel()} values, expected 1 or {lead.numel()}")
            out[p.name] = v if v is lead else v.expand_as(lead).clone()
        batch = klass(**out)
        batch.validate()
        return batch

    def validate(self) -> None:
        """Raise InputError on non-finite values, values outside a parameter's range or mismatched shapes."""
        model = self.model()
        n = getattr(self, model.param_names[0]).shape[0]
        for p in model.params:
            v = getattr(self, p.name)
            if v.shape != (n,):
                raise InputError(f"lens parameter {p.name} has shape {tuple(v.shape)}, expected ({n},)")
            if not torch.all(torch.isfinite(v)):
                raise InputError(f"lens parameter {p.name} has non-finite values: {v[~torch.isfinite(v)][:4].tolist()}")
            bad = (v < p.low) | (v > p.high)
            if torch.any(bad):
                raise InputError(
                    f"lens parameter {p.name} must be in [{p.low}, {p.high}] {p.unit}, got {v[bad][:4].tolist()}"
                )

    def __getitem__(self, name: str) -> torch.Tensor:
        return getattr(self, name)

    def as_dict(self) -> dict[str, torch.Tensor]:
        return {n: getattr(self, n) for n in self.model().param_names}

    def to(self, device=None, dtype=None) -> "LensBatch":
        return type(self)(**{k: v.to(device=device, dtype=dtype) for k, v in self.as_dict().items()})

    def index(self, idx: torch.Tensor) -> "LensBatch":
        """Gather rows ``idx`` (any integer tensor shape -> parameters of that shape)."""
        return type(self)(**{k: v[idx] for k, v in self.as_dict().items()})

    def __len__(self) -> int:
        return int(getattr(self, self.model().param_names[0]).shape[0])

    def __reduce__(self):
        return _rebuild, (self.profiles, self.as_dict())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self)} lenses)"


def lens_parameters_from_columns(
    columns: Mapping, profiles: Sequence[str] = DEFAULT_PROFILES, where: str = "table", **given
) -> dict:
    """The parameters of the composition ``profiles`` (engine names) read from injection-task
    ``columns`` (a mapping column name -> values, such as a table's columns or one row), each
    parameter from the column its profile declares unless ``given`` by engine name; InputError naming
    ``where`` and the missing columns otherwise."""
    model = lens_model(tuple(profiles))
    out, missing = {}, []
    for p in model.params:
        if p.name in given:
            out[p.name] = given[p.name]
        elif p.column in columns:
            out[p.name] = columns[p.column]
        else:
            missing.append(p.column)
    if missing:
        raise InputError(f"{where} lacks the lens columns {missing} of {list(model.names)}")
    return out


@functools.lru_cache(maxsize=None)
def _batch_class(profiles: tuple[str, ...]) -> type[LensBatch]:
    if profiles == DEFAULT_PROFILES:
        return LensBatch
    lens_model(profiles)  # unknown or inconsistent profiles fail here, with their names
    return type(f"LensBatch[{'+'.join(profiles)}]", (LensBatch,), {"profiles": profiles})


def _rebuild(profiles: tuple[str, ...], params: Mapping[str, torch.Tensor]) -> LensBatch:
    return LensBatch.of(profiles)(**params)
