"""Injection engine: batched lensing of Sérsic sources in torch (lenstronomy conventions), by SIE +
external shear unless another composition of mass profiles is asked for.

Modules: ``cosmology`` (theta_E <-> sigma_v), ``profiles`` (one module per mass profile: SIE, EPL,
SHEAR, MULTIPOLE_M3/M4; their registry and composition by names, ``LensBatch``), ``sie`` (ray
shooting, Hessian, magnification of a ``LensBatch``, ellipticity conventions),
``source`` (Sérsic + clumps, band fluxes), ``render`` (supersampled, PSF-convolved arcs, mu, arc S/N),
``randomize`` (domain randomisation), ``priors`` (prior registry), ``bank`` (injection-bank tasks,
rendering into hosts, known-lens arcs for the mock sky), ``stream`` (injections rendered on the fly
for training).
"""

from .bank import InjectionConfig, plan_injection_grid, plan_summary, render_injection_batch
from .cosmology import get_cosmology, sigma_v_from_theta_e, theta_e_from_sigma_v
from .priors import DEFAULT_PRIORS, Prior, PriorRegistry
from .profiles import DEFAULT_PROFILES, REGISTRY, LensModel, lens_model
from .render import RenderConfig, arc_snr, convolve_psf, render_lensed_sources
from .sie import LensBatch, hessian, magnification, ray_shoot
from .source import SourceBatch, band_fluxes

__all__ = [
    "InjectionConfig",
    "plan_injection_grid",
    "plan_summary",
    "render_injection_batch",
    "get_cosmology",
    "sigma_v_from_theta_e",
    "theta_e_from_sigma_v",
    "DEFAULT_PRIORS",
    "Prior",
    "PriorRegistry",
    "RenderConfig",
    "arc_snr",
    "convolve_psf",
    "render_lensed_sources",
    "DEFAULT_PROFILES",
    "REGISTRY",
    "LensModel",
    "lens_model",
    "LensBatch",
    "hessian",
    "magnification",
    "ray_shoot",
    "SourceBatch",
    "band_fluxes",
]
