"""Named source models of the injections: ``sersic``, ``sersic_clumps``, ``cosmos`` or a mix of them.

A source model spec is one name or a mix ``name:weight,name:weight`` (weights > 0, normalised to
sum 1). Every injection takes one model, chosen from its own seed by a stable hash (salt
``source_model``), so the choice is a pure function of the task seed, whatever batch it is in:

- ``sersic``: the elliptical Sérsic of the priors (clumps only if the registry's ``clump_prob`` > 0,
  which is 0 by default) — the engine as before;
- ``sersic_clumps``: the same Sérsic plus 2–6 Gaussian star-forming clumps on every source
  (``priors.draw_clumps`` with ``clump_prob`` = 1), holding 5–25 % of the flux;
- ``cosmos``: a real HST/ACS F814W COSMOS galaxy (the shipped GalSim real-galaxy set,
  ``cosmos_sources.packaged_real_galaxies``) whose surface brightness is sampled bilinearly at the
  ray-shot source-plane positions (``source.unit_flux_surface_brightness``), as lenstronomy's
  INTERPOL does. Per injection: the galaxy by a stable hash of the seed, a mirror flip (probability
  1/2), a rotation by the drawn source angle ``src_phi_rad``, and a rescaling of the galaxy's
  half-light radius (the catalog's Sérsic-fit ``hlr``) to the drawn ``src_r_sersic_arcsec``; unit
  total flux, times the drawn g, r, z fluxes (one morphology in all bands, like the Sérsic's; the
  colours are the priors'). The drawn Sérsic n and axis ratio are not used by a COSMOS source.

COSMOS images carry the HST noise: pixels below twice the image's noise sigma (its catalog
``NOISE_VARIANCE``) are set to 0, so that the noise is not lensed into a smooth pedestal across the
stamp (it would hold a large part of the flux of the 0.03″ images), at the cost of the galaxy's
faintest wings.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..seeding import unit_hash_array

#: The named source models.
SOURCE_MODELS = ("sersic", "sersic_clumps", "cosmos")
#: The default: the engine's Sérsic sources, unchanged.
DEFAULT_SOURCE_MODEL = "sersic"
#: Pixels below this many noise sigma are set to 0 in a COSMOS template (module docstring).
COSMOS_NOISE_CLIP_SIGMA = 2.0


def parse_source_model(spec: str) -> tuple[tuple[str, float], ...]:
    """((name, weight), ...) of a source model spec (module docstring), weights summing to 1, in
    the order given; InputError naming the spec and the known names otherwise."""
    if not isinstance(spec, str) or not spec.strip():
        raise InputError(f"source model {spec!r} is empty; known: {list(SOURCE_MODELS)} or a mix name:weight,...")
    parts = [p.strip() for p in spec.split(",")]
    if len(parts) == 1 and ":" not in parts[0]:
        parts = [parts[0] + ":1"]
    out: dict[str, float] = {}
    for p in parts:
        name, _, w = p.partition(":")
        name = name.strip()
        if name not in SOURCE_MODELS:
            raise InputError(f"unknown source model {name!r} in {spec!r}; known: {list(SOURCE_MODELS)}")
        if name in out:
            raise InputError(f"source model {name!r} appears twice in {spec!r}")
        try:
            weight = float(w)
        except ValueError:
            raise InputError(f"source model {spec!r}: weight {w!r} of {name!r} is not a number") from None
        if not (np.isfinite(weight) and weight > 0):
            raise InputError(f"source model {spec!r}: weight of {name!r} must be a finite number > 0, got {w!r}")
        out[name] = weight
    total = sum(out.values())
    return tuple((k, v / total) for k, v in out.items())


def canonical_source_model(spec: str) -> str:
    """The spec in one spelling (a single name, or ``name:weight,...`` with normalised weights),
    as it is recorded in table metadata."""
    parsed = parse_source_model(spec)
    if len(parsed) == 1:
        return parsed[0][0]
    return ",".join(f"{k}:{v:.6g}" for k, v in parsed)


def assign_source_models(seeds: np.ndarray, spec: str) -> np.ndarray:
    """(n,) object array: the source model name of each task seed under ``spec`` (a stable hash
    of the seed against the cumulative weights; a single model needs no draw)."""
    parsed = parse_source_model(spec)
    seeds = np.asarray(seeds)
    if len(parsed) == 1:
        return np.full(seeds.shape, parsed[0][0], dtype=object)
    u = unit_hash_array(seeds.astype(np.int64), salt="source_model")
    edges = np.cumsum([w for _, w in parsed])
    k = np.minimum(np.searchsorted(edges, u, side="right"), len(parsed) - 1)
    return np.array([parsed[i][0] for i in k], dtype=object)


@dataclass(frozen=True)
class CosmosTemplates:
    """COSMOS source templates: ``images`` (unit pixel sum, noise clipped; module docstring),
    ``pixel_scale`` [arcsec/pixel], ``hlr_arcsec`` (the catalog's half-light radius) and ``ident``,
    one entry per galaxy."""

    images: tuple[np.ndarray, ...]
    pixel_scale: np.ndarray
    hlr_arcsec: np.ndarray
    ident: np.ndarray

    def __len__(self) -> int:
        return len(self.images)


def cosmos_template(image: np.ndarray, noise_variance: float) -> np.ndarray:
    """A galaxy image as a source template: pixels below COSMOS_NOISE_CLIP_SIGMA noise sigma set
    to 0, normalised to unit sum (float64)."""
    img = np.asarray(image, dtype=np.float64)
    sigma = float(np.sqrt(max(noise_variance, 0.0)))
    out = np.where(img > COSMOS_NOISE_CLIP_SIGMA * sigma, img, 0.0)
    total = out.sum()
    if not total > 0:
        raise InputError(f"COSMOS image has no flux above {COSMOS_NOISE_CLIP_SIGMA} noise sigma")
    return out / total


def templates_from_galaxies(galaxies) -> CosmosTemplates:
    """Templates of ``cosmos_sources.RealGalaxy`` objects (each needs a finite ``hlr_arcsec`` > 0,
    i.e. galaxies read with their ``_fits`` catalog)."""
    if not galaxies:
        raise InputError("no COSMOS galaxies to make source templates from")
    for g in galaxies:
        if not (np.isfinite(g.hlr_arcsec) and g.hlr_arcsec > 0):
            raise InputError(f"COSMOS galaxy {g.ident} has no half-light radius (read it with its _fits catalog)")
    return CosmosTemplates(
        images=tuple(cosmos_template(g.image, g.noise_variance) for g in galaxies),
        pixel_scale=np.array([g.pixel_scale for g in galaxies], dtype=np.float64),
        hlr_arcsec=np.array([g.hlr_arcsec for g in galaxies], dtype=np.float64),
        ident=np.array([g.ident for g in galaxies], dtype=np.int64),
    )


@functools.lru_cache(maxsize=1)
def packaged_templates() -> CosmosTemplates:
    """Templates of the shipped COSMOS galaxies (read once)."""
    from .cosmos_sources import packaged_real_galaxies

    return templates_from_galaxies(packaged_real_galaxies())


def cosmos_draws(seeds: np.ndarray, r_e_arcsec: np.ndarray, templates: CosmosTemplates):
    """Per task seed: (template index (n,) int64, flip (n,) bool, scale (n,) [arcsec per template
    pixel] that rescales the galaxy's half-light radius to ``r_e_arcsec``)."""
    seeds = np.asarray(seeds).astype(np.int64)
    idx = np.minimum(
        (unit_hash_array(seeds, salt="cosmos_galaxy") * len(templates)).astype(np.int64), len(templates) - 1
    )
    flip = unit_hash_array(seeds, salt="cosmos_flip") < 0.5
    scale = templates.pixel_scale[idx] * np.asarray(r_e_arcsec, dtype=np.float64) / templates.hlr_arcsec[idx]
    return idx, flip, scale
