"""Prior registry for injected lens systems: ranges and shapes as data, drawn by stable hashes.

Every parameter has one ``Prior`` (kind, range, optional mean/sigma); a draw always lies in
[lo, hi]. Draws are vectorised and deterministic: parameter ``name`` of the task with seed s is
``Prior.transform(unit_hash_array(s, salt=name))`` (darkhaloscope.seeding), so a task's draws
depend only on its seed, not on the batch it sits in.

Kinds:
- ``uniform``: U(lo, hi);
- ``area``: sqrt(U(lo^2, hi^2)), uniform per unit area of an annulus (beta_frac: a source position
  uniform in the source plane, not crowded towards the caustic centre);
- ``truncnormal``: N(mu, sigma) truncated to [lo, hi] by inverse-CDF (exactly in range);
- ``loguniform``: log-uniform on [lo, hi].

Defaults (units in the names; sources cited in the comments):
the source population follows the discoverable DES-depth population of LensPop (Collett 2015:
unlensed r median 24.2, source R_e median 0.31"): unlensed r 22-26, R_e 0.15-0.5" (smaller sources
render as point-like pairs that look like binary stars, not arcs), n 0.5-2 (n ~ 4 needs
supersampling ss >= 8), q 0.3-1; beta_frac area-weighted in [0.1, 0.4] theta_E (sources farther
out than ~0.4 theta_E form doubles rather than arcs).
Colours: lensed sources at z 1-3 are star-forming, roughly flat in f_nu, so g-r ~ N(0.3, 0.25) and
r-z ~ N(0.3, 0.25) (LensPop's sources have g-r ~ 0; an assumption to calibrate); colours measured
in arc annuli of real lenses (g-r ~ 1.2) are contaminated by the red deflector and are not used.
Lens q U(0.5, 1) and PA U(0, pi), shear components N(0, 0.04) truncated at +-0.1, lens centre
jitter N(0, 0.05") truncated at +-0.15", z_s U(1, 3). Clumps (off by default: a few bright clumps
render as separate blobs rather than a smooth arc at DR10 seeing): 2-6 clumps holding 5-25 % of
the flux, sigma 0.05-0.12".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
from scipy.special import ndtr, ndtri

from ..errors import InputError
from ..seeding import unit_hash_array

_KINDS = ("uniform", "area", "truncnormal", "loguniform")


@dataclass(frozen=True)
class Prior:
    """One parameter's prior on [lo, hi] (kind in uniform | area | truncnormal | loguniform)."""

    kind: str
    lo: float
    hi: float
    mu: float = 0.0
    sigma: float = 1.0

    def __post_init__(self):
        if self.kind not in _KINDS:
            raise InputError(f"prior kind {self.kind!r} not in {_KINDS}")
        if not (math.isfinite(self.lo) and math.isfinite(self.hi) and self.lo <= self.hi):
            raise InputError(f"prior range [{self.lo}, {self.hi}] is not a finite interval")
        if self.kind == "area" and self.lo < 0:
            raise InputError(f"area prior needs lo >= 0, got {self.lo}")
        if self.kind == "loguniform" and self.lo <= 0:
            raise InputError(f"loguniform prior needs lo > 0, got {self.lo}")
        if self.kind == "truncnormal" and not self.sigma > 0:
            raise InputError(f"truncnormal prior needs sigma > 0, got {self.sigma}")

    def transform(self, u: np.ndarray) -> np.ndarray:
        """Map uniforms u in [0, 1) to draws in [lo, hi] (float64)."""
        u = np.asarray(u, dtype=np.float64)
        if self.kind == "uniform":
            v = self.lo + (self.hi - self.lo) * u
        elif self.kind == "area":
            v = np.sqrt(self.lo**2 + (self.hi**2 - self.lo**2) * u)
        elif self.kind == "loguniform":
            v = np.exp(math.log(self.lo) + (math.log(self.hi) - math.log(self.lo)) * u)
        else:
            a = ndtr((self.lo - self.mu) / self.sigma)
            b = ndtr((self.hi - self.mu) / self.sigma)
            v = self.mu + self.sigma * ndtri(a + (b - a) * u)
        # Round-off at the ends (e.g. ndtri near 0 or 1) must not leave the documented range.
        return np.clip(v, self.lo, self.hi)

    def pdf(self, v) -> np.ndarray:
        """Probability density at ``v`` (per unit of the parameter), 0 outside [lo, hi]; the
        importance weights of a population against this prior divide by it."""
        if not self.hi > self.lo:
            raise InputError(f"prior on [{self.lo}, {self.hi}] is a point: it has no density")
        v = np.asarray(v, dtype=np.float64)
        inside = (v >= self.lo) & (v <= self.hi)
        with np.errstate(divide="ignore", invalid="ignore"):
            if self.kind == "uniform":
                d = np.full(v.shape, 1.0 / (self.hi - self.lo))
            elif self.kind == "area":
                d = 2.0 * v / (self.hi**2 - self.lo**2)
            elif self.kind == "loguniform":
                d = 1.0 / (v * math.log(self.hi / self.lo))
            else:
                z = ndtr((self.hi - self.mu) / self.sigma) - ndtr((self.lo - self.mu) / self.sigma)
                d = np.exp(-0.5 * ((v - self.mu) / self.sigma) ** 2) / (self.sigma * math.sqrt(2 * math.pi) * z)
        return np.where(inside, d, 0.0)


def _default_priors() -> dict[str, Prior]:
    return {
        "src_mag_r": Prior("uniform", 22.0, 26.0),
        "src_r_sersic_arcsec": Prior("uniform", 0.15, 0.50),
        "src_n_sersic": Prior("uniform", 0.5, 2.0),
        "src_q": Prior("uniform", 0.3, 1.0),
        "src_phi_rad": Prior("uniform", 0.0, math.pi),
        "src_beta_frac": Prior("area", 0.1, 0.4),
        "src_beta_angle_rad": Prior("uniform", 0.0, 2.0 * math.pi),
        "src_g_minus_r": Prior("truncnormal", -0.3, 1.2, mu=0.3, sigma=0.25),
        "src_r_minus_z": Prior("truncnormal", -0.3, 1.2, mu=0.3, sigma=0.25),
        "lens_q": Prior("uniform", 0.5, 1.0),
        "lens_phi_rad": Prior("uniform", 0.0, math.pi),
        "shear_g1": Prior("truncnormal", -0.1, 0.1, mu=0.0, sigma=0.04),
        "shear_g2": Prior("truncnormal", -0.1, 0.1, mu=0.0, sigma=0.04),
        # mass centre relative to the host galaxy's light centre (East, North)
        "lens_offset_x_arcsec": Prior("truncnormal", -0.15, 0.15, mu=0.0, sigma=0.05),
        "lens_offset_y_arcsec": Prior("truncnormal", -0.15, 0.15, mu=0.0, sigma=0.05),
        "z_s": Prior("uniform", 1.0, 3.0),
        # Selection profile: the lens's axis ratio and angle are its host light's plus these offsets
        # (mass and light roughly aligned, the mass rounder or flatter by ~0.1; a mock choice).
        "lens_q_offset": Prior("truncnormal", -0.3, 0.3, mu=0.0, sigma=0.1),
        "lens_phi_offset_rad": Prior("truncnormal", -0.8, 0.8, mu=0.0, sigma=0.17),
        # Training profile only: theta_E and z_l drawn instead of gridded.
        "theta_e_arcsec": Prior("uniform", 0.5, 3.0),
        "z_l": Prior("uniform", 0.1, 0.9),
        # Clumps (used only when clump_prob > 0).
        "clump_flux_frac": Prior("uniform", 0.05, 0.25),
        "clump_sigma_arcsec": Prior("uniform", 0.05, 0.12),
    }


@dataclass(frozen=True)
class PriorRegistry:
    """All injection priors; ``clump_prob`` is the probability that a source has clumps and
    ``n_clumps`` the inclusive range of their number. Replace entries with ``with_overrides``."""

    priors: dict = field(default_factory=_default_priors)
    clump_prob: float = 0.0
    n_clumps: tuple[int, int] = (2, 6)

    def __post_init__(self):
        if not 0.0 <= self.clump_prob <= 1.0:
            raise InputError(f"clump_prob must be in [0, 1], got {self.clump_prob}")
        if not (1 <= self.n_clumps[0] <= self.n_clumps[1]):
            raise InputError(f"n_clumps range {self.n_clumps} must satisfy 1 <= lo <= hi")

    def __getitem__(self, name: str) -> Prior:
        try:
            return self.priors[name]
        except KeyError:
            raise InputError(f"no prior named {name!r}; known: {sorted(self.priors)}") from None

    def with_overrides(self, **changes) -> "PriorRegistry":
        """A copy with some priors replaced (values are Prior or (kind, lo, hi[, mu, sigma]) tuples)."""
        new = dict(self.priors)
        for k, v in changes.items():
            if k not in new:
                raise InputError(f"cannot override unknown prior {k!r}")
            new[k] = v if isinstance(v, Prior) else Prior(*v)
        return replace(self, priors=new)

    def draw(self, name: str, seeds: np.ndarray) -> np.ndarray:
        """Draws of parameter ``name`` for tasks with 64-bit ``seeds`` (vectorised, deterministic)."""
        return self[name].transform(unit_hash_array(np.asarray(seeds, dtype=np.uint64), salt=name))


DEFAULT_PRIORS = PriorRegistry()


def _broad_priors() -> dict[str, Prior]:
    """The selection proposal q(ψ): wider than every population the selection function is
    reweighted to (``evaluation.populations``), so that each has support under it.

    - unlensed r 20–27.5: LensPop's sources reach beyond r = 27 (Collett 2015), and an arc of a
      source fainter than the DR10 depth (r ≈ 23.9 for a point source) can still be detected when
      it is magnified ~10×;
    - half-light radius log-uniform 0.03–1.0″: from sources that render as point-like images
      (Herle, O'Riordan & Vegetti 2024 find CNN selection steepest near R_S ≈ 0.18″, so the
      proposal must reach well below it) to the largest high-z star formers;
    - Sérsic n 0.5–4, axis ratio 0.2–1 (LensPop's source flattening floor, Collett 2015);
    - source position area-uniform out to 1.2 θ_E: rings, arcs and doubles inside the cut (β < θ_E
      for an SIS) and singly imaged sources beyond it, so that a population of sources uniform in the
      source plane has constant weight;
    - z_s 0.6–4; colours g−r, r−z ~ N(0.3, 0.35) in [−0.5, 1.5]; shear N(0, 0.05) within ±0.15.
    Everything else as the training prior.
    """
    p = _default_priors()
    p.update(
        src_mag_r=Prior("uniform", 20.0, 27.5),
        src_r_sersic_arcsec=Prior("loguniform", 0.03, 1.0),
        src_n_sersic=Prior("uniform", 0.5, 4.0),
        src_q=Prior("uniform", 0.2, 1.0),
        src_beta_frac=Prior("area", 0.0, 1.2),
        src_g_minus_r=Prior("truncnormal", -0.5, 1.5, mu=0.3, sigma=0.35),
        src_r_minus_z=Prior("truncnormal", -0.5, 1.5, mu=0.3, sigma=0.35),
        shear_g1=Prior("truncnormal", -0.15, 0.15, mu=0.0, sigma=0.05),
        shear_g2=Prior("truncnormal", -0.15, 0.15, mu=0.0, sigma=0.05),
        z_s=Prior("uniform", 0.6, 4.0),
    )
    return p


def lens_profile_priors() -> PriorRegistry:
    """Priors of the lens parameters beyond SIE + shear, by injection-task column, as the registered
    profiles declare them (``Param.prior`` in ``lensing/profiles/``), drawn only for a plan whose
    lens composition has them (``InjectionConfig.lens_profiles``)."""
    from .profiles import REGISTRY

    return PriorRegistry(
        priors={p.column: Prior(*p.prior) for prof in REGISTRY.values() for p in prof.params if p.prior is not None}
    )


#: Named proposals of the selection-function injections (``DHS_SELECTION_PROPOSAL``): ``broad``
#: (the default: :func:`_broad_priors`) or ``training`` (the training stream's prior, which the
#: selection function used before the proposal was widened).
PROPOSALS = {"broad": PriorRegistry(priors=_broad_priors()), "training": DEFAULT_PRIORS}


def proposal(name: str) -> PriorRegistry:
    """The named selection proposal (:data:`PROPOSALS`); InputError listing the names otherwise."""
    try:
        return PROPOSALS[name]
    except KeyError:
        raise InputError(f"unknown selection proposal {name!r}; known: {sorted(PROPOSALS)}") from None


#: The source parameters the bank records under these column names and a population may reweight
#: (the position angles are drawn uniformly and no population reweights them).
SOURCE_PARAMETERS = (
    "src_mag_r",
    "src_r_sersic_arcsec",
    "src_n_sersic",
    "src_beta_frac",
    "src_q",
    "src_g_minus_r",
    "src_r_minus_z",
)

#: Parameters drawn for every injection (both profiles); theta_e_arcsec and z_l only for training.
SYSTEM_PARAMETERS = (
    "src_mag_r",
    "src_r_sersic_arcsec",
    "src_n_sersic",
    "src_q",
    "src_phi_rad",
    "src_beta_frac",
    "src_beta_angle_rad",
    "src_g_minus_r",
    "src_r_minus_z",
    "lens_q",
    "lens_phi_rad",
    "shear_g1",
    "shear_g2",
    "lens_offset_x_arcsec",
    "lens_offset_y_arcsec",
    "z_s",
)


def draw_system_parameters(
    seeds: np.ndarray, registry: PriorRegistry = DEFAULT_PRIORS, extra: tuple[str, ...] = ()
) -> dict[str, np.ndarray]:
    """All per-system parameters (SYSTEM_PARAMETERS + ``extra``) for tasks with ``seeds``, float64."""
    return {name: registry.draw(name, seeds) for name in SYSTEM_PARAMETERS + tuple(extra)}


def draw_clumps(seed: int, r_sersic: float, registry: PriorRegistry = DEFAULT_PRIORS):
    """Clumps of one source: (flux_frac, x [arcsec], y [arcsec], sigma [arcsec], weight) arrays.

    With probability 1 - clump_prob (or clump_prob = 0) returns flux_frac 0 and empty arrays.
    Clump centres are area-uniform within 1.5 r_sersic of the source centre; weights U(0.5, 1.5).
    """
    from ..seeding import rng_for

    rng = rng_for("clumps", int(seed))
    if registry.clump_prob <= 0 or rng.random() >= registry.clump_prob:
        e = np.zeros(0)
        return 0.0, e, e, e, e
    k = int(rng.integers(registry.n_clumps[0], registry.n_clumps[1] + 1))
    frac = float(registry["clump_flux_frac"].transform(rng.random()))
    rad = 1.5 * r_sersic * np.sqrt(rng.random(k))
    ang = 2.0 * math.pi * rng.random(k)
    sig = registry["clump_sigma_arcsec"].transform(rng.random(k))
    w = 0.5 + rng.random(k)
    return frac, rad * np.cos(ang), rad * np.sin(ang), sig, w
