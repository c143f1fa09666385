"""Pool N2: hard confusers classified from Tractor properties.

A negative that looks like one of the usual lens impostors goes to pool N2 with a category;
everything else is N1. The proxies use only sweep columns, so they are cheap enough to run on
every selected source:

- ``ring_proxy``: TYPE DEV, or SER with Sérsic n >= 4 (a bright concentrated early type, whose
  residual rings and shells mimic arcs), and flux_r >= 5 nMgy.
- ``edge_on_proxy``: ellipticity |ε| >= 0.50 (|ε| = hypot(SHAPE_E1, SHAPE_E2); b/a = (1-|ε|)/(1+|ε|),
  so b/a <= 1/3) and SHAPE_R >= 0.6″. Only when the ellipticity is missing does the proxy fall
  back to SHAPE_R >= 1.8″ (a size-only proxy also takes large round galaxies, so the selection
  always passes SHAPE_E1/E2 and the fallback serves only sweeps without them, such as DR8).
- ``blue_clumpy``: g − r <= 0.4 mag and r <= 20.5 mag (bright blue star-forming galaxies).
- ``large_galaxy``: SHAPE_R >= 2.0″ and flux_r >= 3 nMgy.

Precedence when several apply (the first listed wins, configurable): ring_proxy, edge_on_proxy,
blue_clumpy, large_galaxy. The order follows how arc-like each impostor is: rings and edge-on
discs produce tangential features at lens-like radii, blue clumps produce arc-coloured knots,
and "large" is the least specific.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..errors import InputError

#: Category names in their default precedence order.
CATEGORIES = ("ring_proxy", "edge_on_proxy", "blue_clumpy", "large_galaxy")


@dataclass(frozen=True)
class ConfuserConfig:
    """Thresholds of the N2 proxies. Fluxes in nanomaggies, radii in arcsec, magnitudes AB."""

    ring_sersic_min: float = 4.0
    ring_flux_r_min: float = 5.0
    edge_on_ellipticity_min: float = 0.50
    edge_on_shape_r_min: float = 0.6
    edge_on_fallback_shape_r_min: float = 1.8
    blue_g_minus_r_max: float = 0.4
    blue_r_mag_max: float = 20.5
    large_shape_r_min: float = 2.0
    large_flux_r_min: float = 3.0
    precedence: tuple[str, ...] = CATEGORIES

    def __post_init__(self) -> None:
        object.__setattr__(self, "precedence", tuple(self.precedence))
        if sorted(self.precedence) != sorted(CATEGORIES):
            raise InputError(f"confuser precedence must order exactly {CATEGORIES}, got {self.precedence!r}")

    def to_dict(self) -> dict:
        return asdict(self)


def ellipticity(shape_e1, shape_e2) -> np.ndarray:
    """|ε| = hypot(e1, e2) (dimensionless); NaN where either component is missing."""
    return np.hypot(np.asarray(shape_e1, dtype=np.float64), np.asarray(shape_e2, dtype=np.float64))


def axis_ratio(shape_e1, shape_e2) -> np.ndarray:
    """Minor/major axis ratio b/a = (1 − |ε|)/(1 + |ε|), since Tractor's SHAPE_E1/E2 are the
    components of ε = (a − b)/(a + b)·e^{2iφ}."""
    e = ellipticity(shape_e1, shape_e2)
    return (1.0 - e) / (1.0 + e)


def confuser_flags(
    type_,
    flux_r,
    shape_r,
    shape_e1,
    shape_e2,
    sersic,
    g_minus_r,
    mag_r,
    config: ConfuserConfig = ConfuserConfig(),
) -> dict[str, np.ndarray]:
    """Boolean flag per category (vectorised; missing values, given as NaN, never satisfy a cut).

    Inputs: ``type_`` stripped Tractor TYPE strings; ``flux_r`` nMgy; ``shape_r`` arcsec;
    ``shape_e1``/``shape_e2`` dimensionless; ``sersic`` index; ``g_minus_r`` and ``mag_r`` AB mag.
    """
    t = np.asarray(type_, dtype=object)
    fr = np.asarray(flux_r, dtype=np.float64)
    sr = np.asarray(shape_r, dtype=np.float64)
    n = np.asarray(sersic, dtype=np.float64)
    gr = np.asarray(g_minus_r, dtype=np.float64)
    mr = np.asarray(mag_r, dtype=np.float64)
    e = ellipticity(shape_e1, shape_e2)
    c = config
    concentrated = (t == "DEV") | ((t == "SER") & (n >= c.ring_sersic_min))
    ring = concentrated & (fr >= c.ring_flux_r_min)
    e_known = np.isfinite(e)
    edge_on = np.where(
        e_known,
        (e >= c.edge_on_ellipticity_min) & (sr >= c.edge_on_shape_r_min),
        sr >= c.edge_on_fallback_shape_r_min,
    )
    blue = (gr <= c.blue_g_minus_r_max) & (mr <= c.blue_r_mag_max)
    large = (sr >= c.large_shape_r_min) & (fr >= c.large_flux_r_min)
    return {"ring_proxy": ring, "edge_on_proxy": edge_on, "blue_clumpy": blue, "large_galaxy": large}


def classify_confusers(*args, config: ConfuserConfig = ConfuserConfig(), **kwargs) -> np.ndarray:
    """Confuser category per row (object array: a category name or None), by ``config.precedence``.

    Takes the same inputs as :func:`confuser_flags`.
    """
    flags = confuser_flags(*args, config=config, **kwargs)
    n = len(next(iter(flags.values())))
    out = np.full(n, None, dtype=object)
    # Walk from the lowest to the highest precedence so the winner overwrites the others.
    for name in reversed(config.precedence):
        out[flags[name]] = name
    return out
