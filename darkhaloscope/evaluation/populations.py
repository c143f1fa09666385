"""Lens populations λ the selection function is reweighted to: C(θ_E, z_l | λ) = Σ w d / Σ w over
the injections of a cell, w = p(ψ | λ) / q(ψ) the importance weight of each injection against the
proposal q it was drawn from (``lensing.priors.PROPOSALS``).

What is reweighted. Within a cell the deflector is conditioned on (θ_E, z_l, the host galaxy and the
σ_v it needs: the survey's own galaxies at that redshift), and so is z_s, which the renderer does not
see at fixed θ_E; the source and its place are reweighted: the parameters of :data:`SOURCE_PARAMETERS`
(unlensed r magnitude, half-light radius, Sérsic index, position β/θ_E, axis ratio, colours). A
population's density of them may depend on the injection's z_s, z_l and θ_E (LensPop's source sizes
depend on z_s). A population that leaves a parameter unspecified takes the proposal's distribution
of it (weight 1). Across cells a population weighs the cells by its number of lenses in each
(:attr:`Population.cell_weights`), which gives the marginals C(θ_E), C(z_l) and C overall; a
population without a deflector model has cells only.

Populations shipped (:func:`named_population`):

- ``proposal``: q itself (w = 1; every cell weighs the same, as the grid was injected).
- ``lenspop``: after LensPop (Collett 2015, ApJ 811, 20; its code tcollett/LensPop,
  ``PopulationFunctions.py``): deflectors from the velocity dispersion function of Choi, Park &
  Vogeley (2007) with LensPop's (1 + z)^−2.5 evolution of φ*, lensing cross-section π θ_E²; sources
  with counts dN/dm ∝ 10^(0.3 m) (Hogg et al. 1997, R band) to the proposal's r = 27.5, a redshift
  distribution p(z | m) ∝ z² exp(−z / z0(m)), z0 = 0.0417 m − 0.744 (LSST Science Book 2009, §3.7.2,
  i band; r taken for i, the sources being blue), LensPop's size–magnitude–redshift relation
  log10(r / kpc) = −(M + 18)/4 − 1.2 log10((1 + z)/1.6) with 0.35 dex scatter (``RofMz``: Mosleh et
  al. 2012, Huang et al. 2013), M from m with a flat-f_ν K-correction, LensPop's source flattening
  q = 1 − Rayleigh(0.3) (q > 0.2) and sources uniform in the source plane within θ_E (multiply
  imaged). LensPop's sources are exponential (n = 1), a point the importance weights cannot weight
  to: the Sérsic index is left as the proposal's (0.5–4), which the detection model's dependence on
  n bounds (docs/research, the note on populations).
- ``mock``: the source population the embedded mock survey hides its lenses with
  (:data:`MOCK_SOURCES`, which ``mock_survey.hidden_lenses`` draws from), so that the closure knows λ.
- ``user:<name>``: a Parquet table of ψ samples, optionally weighted (a density given on points), read
  by :func:`population_from_samples`; its density is a Gaussian kernel estimate in the coordinates in
  which the proposal is uniform (r magnitude, log10 R_e, (β/θ_E)², n, q), conditional on (θ_E, z_l).

Units: magnitudes AB, radii arcsec, β in units of θ_E, densities per unit of each column.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pyarrow as pa
from scipy.special import ndtr

from ..errors import InputError
from ..lensing.cosmology import DEFAULT_COSMOLOGY, distance_modulus, get_cosmology, theta_e_from_sigma_v
from ..lensing.priors import SOURCE_PARAMETERS, PriorRegistry

#: Columns a user population's table must have (the rest of SOURCE_PARAMETERS are optional).
USER_REQUIRED = ("theta_e_arcsec", "z_l", "src_mag_r", "src_r_sersic_arcsec", "src_n_sersic", "src_beta_frac")
#: Optional column of a user table: relative weight (density) of each row, > 0.
WEIGHT_COLUMN = "weight"
#: Fewest effective samples (Kish, of the weights) a user population may have: a kernel estimate
#: in up to nine dimensions from fewer is mostly its bandwidth.
MIN_USER_SAMPLES = 200
#: Columns the conditional density of a population may read besides its own parameters.
CONDITIONING_COLUMNS = ("z_s", "z_l", "theta_e_arcsec")

_LN10 = math.log(10.0)
_ARCSEC_PER_RAD = 180.0 / math.pi * 3600.0


@dataclass(frozen=True)
class Population:
    """A lens population: ``log_density(columns)`` is log p(specified parameters | z_s, z_l, θ_E)
    per unit of each column (``columns``: dict of (N,) arrays with ``parameters`` and
    CONDITIONING_COLUMNS), ``support`` the range of each parameter where the density is positive
    (must lie inside the proposal's), ``cell_weights(theta_e_edges, z_l_edges)`` the relative
    number of the population's lenses in each cell (T, Z) or None (cells only)."""

    name: str
    description: str
    parameters: tuple[str, ...]
    log_density: Callable[[dict], np.ndarray]
    support: dict = field(default_factory=dict)
    cell_weights: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None

    def check_support(self, proposal: PriorRegistry) -> None:
        """InputError naming the parameter and both ranges when the population reaches beyond the
        proposal (its importance weights there would be infinite: C cannot be measured for it)."""
        for name in self.parameters:
            lo, hi = self.support.get(name, (proposal[name].lo, proposal[name].hi))
            p = proposal[name]
            if lo < p.lo - 1e-12 or hi > p.hi + 1e-12:
                raise InputError(
                    f"population {self.name!r}: {name} spans [{lo:g}, {hi:g}], outside the proposal's "
                    f"[{p.lo:g}, {p.hi:g}]: the injections cannot measure C for it"
                )


def importance_weights(population: Population, columns: dict, proposal: PriorRegistry) -> np.ndarray:
    """w = p(ψ | λ) / q(ψ) of each injection (``columns``: dict of (N,) arrays with the
    population's parameters and CONDITIONING_COLUMNS), over the parameters the population
    specifies; 1 for the proposal itself. Finite and >= 0 (0 outside the population's support)."""
    population.check_support(proposal)
    n = len(next(iter(columns.values())))
    if not population.parameters:
        return np.ones(n)
    missing = [c for c in population.parameters if c not in columns]
    if missing:
        raise InputError(f"injections lack {missing} to weight them to population {population.name!r}")
    log_q = np.zeros(n)
    for name in population.parameters:
        with np.errstate(divide="ignore"):
            log_q += np.log(proposal[name].pdf(columns[name]))
    if not np.all(np.isfinite(log_q)):
        bad = [c for c in population.parameters if np.any(proposal[c].pdf(columns[c]) <= 0)]
        raise InputError(f"injections outside the proposal's support in {bad}: the proposal recorded is not theirs")
    with np.errstate(over="ignore", invalid="ignore"):
        w = np.exp(population.log_density(columns) - log_q)
    w = np.where(np.isfinite(w), w, 0.0)
    if not np.any(w > 0):
        raise InputError(f"population {population.name!r} gives every injection zero weight")
    return w


# ---------------------------------------------------------------------------------------------
# one-dimensional densities


def _area_logpdf(beta, hi: float) -> np.ndarray:
    """Sources uniform in the source plane within ``hi`` θ_E: p(β) = 2β / hi²."""
    b = np.asarray(beta, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return np.where((b > 0) & (b <= hi), np.log(2.0 * np.maximum(b, 1e-300) / hi**2), -np.inf)


def _truncated_lognormal_logpdf(r, log10_median, sigma_dex, lo: float, hi: float) -> np.ndarray:
    """log p(r) of log10 r ~ N(log10_median, sigma_dex) truncated to [lo, hi], per unit r."""
    r = np.asarray(r, dtype=np.float64)
    mu = np.asarray(log10_median, dtype=np.float64)
    x = (np.log10(np.maximum(r, 1e-300)) - mu) / sigma_dex
    norm = ndtr((math.log10(hi) - mu) / sigma_dex) - ndtr((math.log10(lo) - mu) / sigma_dex)
    with np.errstate(divide="ignore"):
        out = -0.5 * x**2 - np.log(sigma_dex * math.sqrt(2 * math.pi) * r * _LN10 * norm)
    return np.where((r >= lo) & (r <= hi), out, -np.inf)


def _rayleigh_flattening_logpdf(q, scale: float, q_min: float) -> np.ndarray:
    """q = 1 − e, e ~ Rayleigh(scale), kept for q in [q_min, 1] (LensPop's ``draw_flattening``)."""
    e = 1.0 - np.asarray(q, dtype=np.float64)
    norm = 1.0 - math.exp(-((1.0 - q_min) ** 2) / (2 * scale**2))
    with np.errstate(divide="ignore"):
        out = np.log(np.maximum(e, 1e-300) / scale**2) - e**2 / (2 * scale**2) - math.log(norm)
    return np.where((e > 0) & (e <= 1.0 - q_min), out, -np.inf)


# ---------------------------------------------------------------------------------------------
# LensPop (Collett 2015)

#: Faint end of the LensPop-like sources (AB, r): the proposal's.
LENSPOP_MAG_RANGE = (20.0, 27.5)
#: Source-count slope d log N / dm (Hogg et al. 1997, R band).
LENSPOP_COUNT_SLOPE = 0.3
#: LensPop's size scatter (dex) and flattening (Rayleigh scale, floor).
LENSPOP_SIZE_SCATTER_DEX, LENSPOP_Q_RAYLEIGH, LENSPOP_Q_MIN = 0.35, 0.3, 0.2
#: Source positions: uniform in the source plane within this many θ_E (multiply imaged by an SIS).
LENSPOP_BETA_MAX = 1.0
#: Redshifts over which p(z | m) is normalised.
LENSPOP_Z_RANGE = (0.05, 6.0)


def _z0(m) -> np.ndarray:
    """Scale of p(z | m) ∝ z² exp(−z/z0): z0 = 0.0417 m − 0.744 (LSST Science Book 2009), floored."""
    return np.maximum(0.0417 * np.asarray(m, dtype=np.float64) - 0.744, 0.05)


def _p_z_given_m(z, m) -> np.ndarray:
    """p(z | m) = z² exp(−z/z0) / (2 z0³) (a Gamma(3, z0) density, per unit z)."""
    z0 = _z0(m)
    z = np.asarray(z, dtype=np.float64)
    return z**2 * np.exp(-z / z0) / (2.0 * z0**3)


@functools.lru_cache(maxsize=8)
def _lenspop_mag_norm(n_m: int = 400) -> tuple[np.ndarray, np.ndarray]:
    """(z nodes, ∫ n(m) p(z | m) dm at each) for p(m | z) = n(m) p(z | m) / that integral."""
    m = np.linspace(*LENSPOP_MAG_RANGE, n_m)
    z = np.linspace(*LENSPOP_Z_RANGE, 600)
    n = 10 ** (LENSPOP_COUNT_SLOPE * (m - LENSPOP_MAG_RANGE[1]))
    integrand = n[None, :] * _p_z_given_m(z[:, None], m[None, :])
    return z, np.trapezoid(integrand, m, axis=1)


def lenspop_log_p_mag_given_z(m, z_s) -> np.ndarray:
    """log p(m | z_s) of the LensPop-like sources [per mag] on LENSPOP_MAG_RANGE."""
    m = np.asarray(m, dtype=np.float64)
    zs = np.asarray(z_s, dtype=np.float64)
    zn, norm = _lenspop_mag_norm()
    n = 10 ** (LENSPOP_COUNT_SLOPE * (m - LENSPOP_MAG_RANGE[1]))
    with np.errstate(divide="ignore"):
        out = np.log(n * _p_z_given_m(zs, m)) - np.log(np.interp(zs, zn, norm))
    return np.where((m >= LENSPOP_MAG_RANGE[0]) & (m <= LENSPOP_MAG_RANGE[1]), out, -np.inf)


@functools.lru_cache(maxsize=4)
def _distance_tables(cosmology: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    c = get_cosmology(cosmology)
    z = np.linspace(0.01, 8.0, 800)
    return z, c.angular_diameter_distance(z).to_value("kpc"), distance_modulus(z, cosmology)


def lenspop_log10_size_median(m, z_s, cosmology: str = DEFAULT_COSMOLOGY) -> np.ndarray:
    """log10 of the median half-light radius [arcsec] of a LensPop source of unlensed r magnitude
    ``m`` at ``z_s``: LensPop's ``RofMz`` with M = m − DM(z) + 2.5 log10(1 + z) (flat f_ν)."""
    z, da_kpc, dm = _distance_tables(cosmology)
    zs = np.asarray(z_s, dtype=np.float64)
    abs_mag = np.asarray(m, dtype=np.float64) - np.interp(zs, z, dm) + 2.5 * np.log10(1.0 + zs)
    log_r_kpc = -(abs_mag + 18.0) / 4.0 - 1.2 * np.log10((1.0 + zs) / 1.6)
    return log_r_kpc - np.log10(np.interp(zs, z, da_kpc)) + math.log10(_ARCSEC_PER_RAD)


def _lenspop_log_density(proposal: PriorRegistry) -> Callable[[dict], np.ndarray]:
    r_lo, r_hi = proposal["src_r_sersic_arcsec"].lo, proposal["src_r_sersic_arcsec"].hi

    def log_density(c: dict) -> np.ndarray:
        return (
            lenspop_log_p_mag_given_z(c["src_mag_r"], c["z_s"])
            + _truncated_lognormal_logpdf(
                c["src_r_sersic_arcsec"],
                lenspop_log10_size_median(c["src_mag_r"], c["z_s"]),
                LENSPOP_SIZE_SCATTER_DEX,
                r_lo,
                r_hi,
            )
            + _area_logpdf(c["src_beta_frac"], LENSPOP_BETA_MAX)
            + _rayleigh_flattening_logpdf(c["src_q"], LENSPOP_Q_RAYLEIGH, LENSPOP_Q_MIN)
        )

    return log_density


#: LensPop's evolution of the VDF's normalisation: φ* (1 + z)^−2.5 (``PopulationFunctions.phi``).
LENSPOP_VDF_EVOLUTION = -2.5


def lenspop_lens_density(
    theta_e_edges, z_l_edges, cosmology: str = DEFAULT_COSMOLOGY, n_z: int = 16, n_sigma: int = 48, n_zs: int = 40
) -> np.ndarray:
    """LensPop-like lenses per deg² in each (θ_E, z_l) cell (T, Z): deflectors of Choi et al. 2007's
    VDF (``forecast.CHOI2007``) at comoving density φ*(1 + z)^−2.5 (``forecast.deflector_grid``),
    each lensing every source behind it within β < θ_E (cross-section π θ_E², θ_E = θ_SIS(σ, z_l,
    z_s)): the LensPop-like counts over LENSPOP_MAG_RANGE, normalised to Hogg et al. 1997's
    6.3 × 10⁵ deg⁻² at R < 26 (``forecast.HOGG1997``), at their redshifts p(z | m)."""
    from .forecast import CHOI2007, HOGG1997, deflector_grid

    te = np.asarray(theta_e_edges, dtype=np.float64)
    ze = np.asarray(z_l_edges, dtype=np.float64)
    m = np.linspace(*LENSPOP_MAG_RANGE, 300)
    n_m = HOGG1997.differential(m) / 3600.0**2  # sources per arcsec² per mag
    zs_e = np.linspace(LENSPOP_Z_RANGE[0], LENSPOP_Z_RANGE[1], n_zs + 1)
    zs, dzs = 0.5 * (zs_e[1:] + zs_e[:-1]), np.diff(zs_e)
    n_zs = np.trapezoid(n_m[None, :] * _p_z_given_m(zs[:, None], m[None, :]), m, axis=1) * dzs  # per arcsec²
    out = np.zeros((te.size - 1, ze.size - 1))
    for j in range(ze.size - 1):
        zl, s, n_defl = deflector_grid(
            CHOI2007,
            (max(ze[j], 1e-3), ze[j + 1]),
            n_z=n_z,
            n_sigma=n_sigma,
            cosmology=cosmology,
            evolution=LENSPOP_VDF_EVOLUTION,
        )
        n_defl = n_defl * (math.pi / 180.0) ** 2  # per deg²
        for k, z_s in enumerate(zs):
            behind = zl < z_s
            if not behind.any():
                continue
            theta = theta_e_from_sigma_v(s[None, :], zl[behind, None], z_s, cosmology)  # arcsec
            n = n_defl[behind] * math.pi * theta**2 * n_zs[k]
            cell = np.searchsorted(te, theta, side="right") - 1
            ok = (cell >= 0) & (cell < te.size - 1)
            out[:, j] += np.bincount(cell[ok], weights=n[ok], minlength=te.size - 1)
    return out


# ---------------------------------------------------------------------------------------------
# the mock survey's hidden-lens sources


@dataclass(frozen=True)
class MockSources:
    """The source population of the mock survey's hidden lenses (``mock_survey.hidden_lenses``),
    physical in shape and bright enough to be found often (sources to r = 24, whose arcs reach S/N
    ≳ 10 at DR10's depth), so that a closure test with ~150 lenses has the power to see a 15 % bias:
    unlensed r from counts dN/dm ∝ 10^(slope m) on ``mag_range`` (Hogg et al. 1997's slope);
    half-light radius log-normal about R(m) = size_at_ref · 10^(−0.4 size_slope (m − mag_ref)), a
    size–luminosity relation R ∝ L^size_slope (star-forming galaxies: R_e ∝ L^0.27 with ≈ 0.2 dex
    scatter, Shibuya, Ouchi & Harikane 2015, ApJS 219, 15), truncated to ``size_range``; position
    uniform in the source plane within ``beta_max`` θ_E (arcs, rings and doubles). Its Sérsic index,
    axis ratio, angle and colours are distributed as the proposal's (``proposal``), so the
    importance weights carry only the three parameters that differ (:data:`MOCK_PARAMETERS`)."""

    mag_range: tuple[float, float] = (20.5, 24.0)
    count_slope: float = 0.3
    size_at_ref: float = 0.30
    mag_ref: float = 23.0
    size_slope: float = 0.27
    size_scatter_dex: float = 0.2
    size_range: tuple[float, float] = (0.05, 1.0)
    beta_max: float = 1.0
    proposal: str = "broad"

    def log10_size_median(self, m) -> np.ndarray:
        return math.log10(self.size_at_ref) - 0.4 * self.size_slope * (np.asarray(m, np.float64) - self.mag_ref)

    def draw(self, u: np.ndarray) -> dict[str, np.ndarray]:
        """Sources from uniforms ``u`` (N, 9) in [0, 1), one column per quantity: src_mag_r,
        src_r_sersic_arcsec, src_beta_frac, src_beta_angle_rad, then src_n_sersic, src_q,
        src_phi_rad, src_g_minus_r, src_r_minus_z by the proposal's priors."""
        from scipy.special import ndtri

        from ..lensing.priors import proposal

        u = np.asarray(u, dtype=np.float64)
        if u.ndim != 2 or u.shape[1] < 9:
            raise InputError(f"mock source draws need (N, 9) uniforms, got {u.shape}")
        lo, hi = self.mag_range
        k = self.count_slope * _LN10
        m = lo + np.log1p(u[:, 0] * np.expm1(k * (hi - lo))) / k  # inverse CDF of ∝ 10^(slope m)
        mu = self.log10_size_median(m)
        a = ndtr((math.log10(self.size_range[0]) - mu) / self.size_scatter_dex)
        b = ndtr((math.log10(self.size_range[1]) - mu) / self.size_scatter_dex)
        r = 10 ** (mu + self.size_scatter_dex * ndtri(a + (b - a) * u[:, 1]))
        q = proposal(self.proposal)
        return {
            "src_mag_r": m,
            "src_r_sersic_arcsec": np.clip(r, *self.size_range),
            "src_beta_frac": self.beta_max * np.sqrt(u[:, 2]),
            "src_beta_angle_rad": 2 * math.pi * u[:, 3],
            **{name: q[name].transform(u[:, 4 + i]) for i, name in enumerate(MOCK_AS_PROPOSAL)},
        }

    def log_density(self, c: dict) -> np.ndarray:
        """log p of the MOCK_PARAMETERS columns of ``c`` (per mag, per arcsec, per unit β/θ_E)."""
        lo, hi = self.mag_range
        m = np.asarray(c["src_mag_r"], dtype=np.float64)
        k = self.count_slope * _LN10
        log_m = np.where((m >= lo) & (m <= hi), math.log(k / np.expm1(k * (hi - lo))) + k * (m - lo), -np.inf)
        return (
            log_m
            + _truncated_lognormal_logpdf(
                c["src_r_sersic_arcsec"], self.log10_size_median(m), self.size_scatter_dex, *self.size_range
            )
            + _area_logpdf(c["src_beta_frac"], self.beta_max)
        )

    @property
    def support(self) -> dict:
        return {
            "src_mag_r": self.mag_range,
            "src_r_sersic_arcsec": self.size_range,
            "src_beta_frac": (0.0, self.beta_max),
        }


#: The parameters of the mock's sources that differ from the proposal (the importance weights').
MOCK_PARAMETERS = ("src_mag_r", "src_r_sersic_arcsec", "src_beta_frac")
#: The parameters the mock's sources draw as the proposal does.
MOCK_AS_PROPOSAL = ("src_n_sersic", "src_q", "src_phi_rad", "src_g_minus_r", "src_r_minus_z")
#: The mock survey's hidden-lens sources.
MOCK_SOURCES = MockSources()


# ---------------------------------------------------------------------------------------------
# named and user populations


def named_population(name: str, proposal: PriorRegistry, cosmology: str = DEFAULT_COSMOLOGY) -> Population:
    """``proposal``, ``lenspop`` or ``mock`` (module docstring), against the proposal ``proposal``."""
    if name == "proposal":
        return Population(
            "proposal",
            "the injections' own proposal q(ψ) (recorded in the metadata); every cell weighs the same",
            (),
            lambda c: np.zeros(len(next(iter(c.values())))),
            cell_weights=lambda te, zl: np.ones((len(te) - 1, len(zl) - 1)),
        )
    if name == "lenspop":
        r = proposal["src_r_sersic_arcsec"]
        return Population(
            "lenspop",
            "LensPop-like (Collett 2015): Choi et al. 2007 VDF with (1+z)^-2.5 evolution; sources with "
            "counts slope 0.3 to r = 27.5, p(z|m) of the LSST Science Book, LensPop's size-magnitude-redshift "
            "relation (0.35 dex) and flattening, uniform in the source plane within theta_E; "
            "Sersic n as the proposal's",
            ("src_mag_r", "src_r_sersic_arcsec", "src_beta_frac", "src_q"),
            _lenspop_log_density(proposal),
            support={
                "src_mag_r": LENSPOP_MAG_RANGE,
                "src_r_sersic_arcsec": (r.lo, r.hi),
                "src_beta_frac": (0.0, LENSPOP_BETA_MAX),
                "src_q": (LENSPOP_Q_MIN, 1.0),
            },
            cell_weights=lambda te, zl: lenspop_lens_density(te, zl, cosmology),
        )
    if name == "mock":
        return Population(
            "mock",
            "the embedded mock survey's hidden-lens sources (darkhaloscope.evaluation.populations.MOCK_SOURCES); "
            "its deflectors are the mock catalog's galaxies (cells only)",
            MOCK_PARAMETERS,
            MOCK_SOURCES.log_density,
            support=MOCK_SOURCES.support,
        )
    raise InputError(f"unknown population {name!r}; named populations: {list(NAMED_POPULATIONS)}")


#: The populations every selection_populations table holds.
NAMED_POPULATIONS = ("proposal", "lenspop", "mock")


def _user_coordinates(cols: dict, names: tuple[str, ...]) -> np.ndarray:
    """(N, D) coordinates in which the proposal is uniform: r mag, log10 R_e, (β/θ_E)², n, q, colours."""
    out = []
    for n in names:
        v = np.asarray(cols[n], dtype=np.float64)
        if n == "src_r_sersic_arcsec":
            v = np.log10(v)
        elif n == "src_beta_frac":
            v = v**2
        out.append(v)
    return np.stack(out, axis=1)


def _jacobian_log(cols: dict, names: tuple[str, ...]) -> np.ndarray:
    """log |d(coordinates)/d(columns)| of :func:`_user_coordinates` (densities per unit of each column)."""
    j = np.zeros(len(next(iter(cols.values()))))
    for n in names:
        v = np.asarray(cols[n], dtype=np.float64)
        if n == "src_r_sersic_arcsec":
            j -= np.log(v * _LN10)
        elif n == "src_beta_frac":
            j += np.log(np.maximum(2.0 * v, 1e-300))
    return j


def population_from_samples(table: pa.Table, name: str, proposal: PriorRegistry) -> Population:
    """A user population from a table of ψ samples: USER_REQUIRED columns, any more of
    SOURCE_PARAMETERS, and optionally WEIGHT_COLUMN (each row's relative weight, a density given on
    points). InputError naming the column and the range for a missing column, a value outside the
    proposal's support, a non-finite or non-positive weight, or fewer than MIN_USER_SAMPLES
    effective samples."""
    missing = [c for c in USER_REQUIRED if c not in table.column_names]
    if missing:
        raise InputError(f"population {name!r}: missing column(s) {missing} (needs {list(USER_REQUIRED)})")
    params = tuple(c for c in SOURCE_PARAMETERS if c in table.column_names)
    cols = {}
    for c in (*params, "theta_e_arcsec", "z_l"):
        col = table.column(c)
        if col.null_count:
            raise InputError(f"population {name!r}: column {c!r} has {col.null_count} null value(s)")
        cols[c] = np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)
        if not np.all(np.isfinite(cols[c])):
            raise InputError(f"population {name!r}: column {c!r} has non-finite values")
    for c in params:
        p = proposal[c]
        bad = (cols[c] < p.lo) | (cols[c] > p.hi)
        if c == "src_beta_frac":
            bad |= cols[c] <= 0
        if bad.any():
            raise InputError(
                f"population {name!r}: column {c!r} has {int(bad.sum())} value(s) outside the proposal's range "
                f"[{p.lo:g}, {p.hi:g}], e.g. {cols[c][bad][:3].tolist()}"
            )
    for c in ("theta_e_arcsec", "z_l"):
        if np.any(cols[c] <= 0):
            raise InputError(f"population {name!r}: column {c!r} must be > 0")
    if WEIGHT_COLUMN in table.column_names:
        w = np.asarray(table.column(WEIGHT_COLUMN).to_numpy(zero_copy_only=False), dtype=np.float64)
        if not np.all(np.isfinite(w) & (w > 0)):
            raise InputError(
                f"population {name!r}: column {WEIGHT_COLUMN!r} must be finite and > 0 (a density), "
                f"got {int(np.sum(~(np.isfinite(w) & (w > 0))))} value(s) outside (0, inf)"
            )
    else:
        w = np.ones(table.num_rows)
    n_eff = w.sum() ** 2 / np.sum(w**2) if w.size else 0.0
    if n_eff < MIN_USER_SAMPLES:
        raise InputError(
            f"population {name!r}: {n_eff:.0f} effective samples (rows, or Kish's n of column {WEIGHT_COLUMN!r}); "
            f"needs >= {MIN_USER_SAMPLES}"
        )
    from scipy.stats import gaussian_kde

    deflector = np.stack([cols["theta_e_arcsec"], cols["z_l"]], axis=1)
    joint = gaussian_kde(np.concatenate([deflector, _user_coordinates(cols, params)], axis=1).T, weights=w)
    marginal = gaussian_kde(deflector.T, weights=w)

    def log_density(c: dict) -> np.ndarray:
        d = np.stack([np.asarray(c["theta_e_arcsec"], np.float64), np.asarray(c["z_l"], np.float64)], axis=1)
        x = np.concatenate([d, _user_coordinates(c, params)], axis=1)
        with np.errstate(divide="ignore"):
            return joint.logpdf(x.T) - marginal.logpdf(d.T) + _jacobian_log(c, params)

    def cell_weights(te, zl):
        h, _, _ = np.histogram2d(cols["theta_e_arcsec"], cols["z_l"], bins=[np.asarray(te), np.asarray(zl)], weights=w)
        return h

    support = {c: (float(cols[c].min()), float(cols[c].max())) for c in params}
    return Population(
        f"user:{name}",
        f"user population {name!r}: {table.num_rows} samples ({n_eff:.0f} effective) of {list(params)}, "
        "kernel density conditional on (theta_E, z_l)",
        params,
        log_density,
        support=support,
        cell_weights=cell_weights,
    )


# ---------------------------------------------------------------------------------------------
# C(θ_E, z_l | λ)

#: A row whose Kish effective number of injections N_eff = (Σw)² / Σw² is below this is flagged
#: ``sufficient = False`` (at 10 a completeness near 0.5 has a 68 % interval of about ±0.15).
N_EFF_FLOOR = 10.0
#: Cells of the injection grid merged along each axis into one cell of a population's grid, by
#: profile: the demo's bank holds too few injections per cell for the importance weights of a
#: population narrower than the proposal (docs/results.md).
POPULATION_MERGE = {"demo": 2, "full": 1}
#: A marginal row is sufficient only when its cells that are measured hold at least this share of
#: the population's lenses in it (the rest are never filled in).
MIN_MEASURED_SHARE = 0.95

POPULATION_SCHEMA = pa.schema(
    [
        pa.field("population", pa.string(), nullable=False),
        pa.field("threshold_name", pa.string(), nullable=False),
        pa.field("threshold", pa.float64(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("theta_e_centre", pa.float64()),
        pa.field("theta_e_lo", pa.float64()),
        pa.field("theta_e_hi", pa.float64()),
        pa.field("z_l_centre", pa.float64()),
        pa.field("z_l_lo", pa.float64()),
        pa.field("z_l_hi", pa.float64()),
        pa.field("n_injections", pa.int64(), nullable=False),
        pa.field("completeness", pa.float64()),
        pa.field("ci68_lo", pa.float64()),
        pa.field("ci68_hi", pa.float64()),
        pa.field("ci95_lo", pa.float64()),
        pa.field("ci95_hi", pa.float64()),
        pa.field("n_eff", pa.float64(), nullable=False),
        pa.field("n_eff_clustered", pa.float64(), nullable=False),
        pa.field("sufficient", pa.bool_(), nullable=False),
        pa.field("population_share", pa.float64()),
        pa.field("measured_share", pa.float64()),
    ]
)


def grid_edges(values) -> np.ndarray:
    """Edges around grid centres: the midpoints, the outer ones half a step out (finite)."""
    c = np.sort(np.asarray(values, dtype=np.float64))
    step = float(np.min(np.diff(c))) if c.size > 1 else 0.5
    return np.r_[c[0] - step / 2, 0.5 * (c[:-1] + c[1:]), c[-1] + step / 2]


def merged_grid(values, merge: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(centres, edges, coarse index of each fine value) of a grid whose ``merge`` consecutive cells
    are one (the last group may be smaller): the coarse edges are the fine ones at group boundaries."""
    if merge < 1:
        raise InputError(f"cells merged must be >= 1, got {merge}")
    fine = np.sort(np.asarray(values, dtype=np.float64))
    edges = grid_edges(fine)
    index = np.arange(fine.size) // merge
    n = int(index.max()) + 1
    centres = np.array([fine[index == i].mean() for i in range(n)])
    return centres, np.r_[edges[::merge][:n], edges[-1]], index


def _nearest(values: np.ndarray, centres: np.ndarray) -> np.ndarray:
    return np.argmin(np.abs(np.asarray(values, np.float64)[:, None] - centres[None, :]), axis=1)


def injection_columns(injections: pa.Table, names) -> dict[str, np.ndarray]:
    """{name: float64 array} of the columns ``names`` of the injection rows that have them."""
    return {
        c: np.asarray(injections.column(c).to_numpy(zero_copy_only=False), dtype=np.float64)
        for c in names
        if c in injections.column_names
    }


def _rows(est: dict, sel, kind, name, thr, pop, te, zl, n_inj, share, measured, min_n_eff) -> list[dict]:
    out = []
    for j in range(len(est["completeness"])):
        c = est["completeness"][j]
        ok = bool(
            np.isfinite(c) and est["n_eff"][j] >= min_n_eff and (measured is None or measured[j] >= MIN_MEASURED_SHARE)
        )

        def f(k):
            v = est[k][j]
            return float(v) if np.isfinite(v) else None

        out.append(
            {
                "population": pop,
                "threshold_name": name,
                "threshold": thr,
                "kind": kind,
                **{k: (None if v[j] is None else float(v[j])) for k, v in zip(sel, (*te, *zl))},
                "n_injections": int(n_inj[j]),
                "completeness": f("completeness"),
                "ci68_lo": f("ci68_lo"),
                "ci68_hi": f("ci68_hi"),
                "ci95_lo": f("ci95_lo"),
                "ci95_hi": f("ci95_hi"),
                "n_eff": float(est["n_eff"][j]),
                "n_eff_clustered": float(est["n_eff_clustered"][j]),
                "sufficient": ok,
                "population_share": None if share is None else float(share[j]),
                "measured_share": None if measured is None else float(measured[j]),
            }
        )
    return out


def _marginal_rows(cell_rows, est, weights, w, cell, index, grid, detected, arr, rho, variants, labels) -> list[dict]:
    """POPULATION_SCHEMA rows of the marginals over z_l (``'theta_e'``), over θ_E (``'z_l'``) and
    overall (``'all'``): the injections of the sufficient cells weighted by the population's lenses
    per cell (``weights``), insufficient cells left out, never filled. ``index``: each injection's
    θ_E and z_l bin and each cell's; ``grid``: the merged grid's centres and edges; ``labels``:
    (threshold name, threshold, population name, N_eff floor)."""
    from .selection import cell_estimates

    ti, zi, gt, gz = index
    te_c, te_e, zl_c, zl_e = grid
    threshold_name, thr, population_name, min_n_eff = labels
    nt, nz = te_c.size, zl_c.size
    names = ("theta_e_centre", "theta_e_lo", "theta_e_hi", "z_l_centre", "z_l_lo", "z_l_hi")
    ok_cell = np.array([r["sufficient"] for r in cell_rows])
    per_w = np.where(est["sum_w"] > 0, weights / np.where(est["sum_w"] > 0, est["sum_w"], 1.0), 0.0)
    w2 = w * np.where(ok_cell, per_w, 0.0)[cell]  # insufficient cells are left out, never filled
    none = np.full(1, None, dtype=object)
    rows = []
    for kind, group, n_groups, te_sel, zl_sel in (
        ("theta_e", ti, nt, (te_c, te_e[:-1], te_e[1:]), (np.full(nt, None),) * 3),
        ("z_l", zi, nz, (np.full(nz, None),) * 3, (zl_c, zl_e[:-1], zl_e[1:])),
        ("all", np.zeros_like(ti), 1, (none,) * 3, (none,) * 3),
    ):
        g_of_cell = {"theta_e": gt, "z_l": gz, "all": np.zeros(nt * nz, np.int64)}[kind]
        total = np.bincount(g_of_cell, weights=weights, minlength=n_groups)
        measured = np.bincount(g_of_cell, weights=np.where(ok_cell, weights, 0.0), minlength=n_groups)
        g_est = cell_estimates(group, n_groups, w2, detected, arr["host"], rho, variants)
        with np.errstate(invalid="ignore", divide="ignore"):
            m_share = np.clip(np.where(total > 0, measured / total, 0.0), 0.0, 1.0)
        rows += _rows(
            g_est,
            names,
            kind,
            threshold_name,
            thr,
            population_name,
            te_sel,
            zl_sel,
            np.bincount(group, weights=(w2 > 0).astype(float), minlength=n_groups).astype(np.int64),
            np.clip(total / weights.sum(), 0.0, 1.0) if weights.sum() > 0 else np.zeros(n_groups),
            m_share,
            min_n_eff,
        )
    return rows


def _population_grid(cols: dict, theta_e_values, z_l_values, merge: int):
    """((θ_E centres, edges, each injection's θ_E bin), (the same for z_l)) of the population's grid:
    ``merge`` cells of the injection grid (``theta_e_values`` [arcsec], ``z_l_values``) along each
    axis, an injection in the cell of its θ_E and of its host's z_l bin."""
    if "z_l_bin" not in cols or "theta_e_arcsec" not in cols:
        raise InputError("injection scores lack theta_e_arcsec or z_l_bin: the grid cells of the injections")
    out = []
    for values, column in ((theta_e_values, "theta_e_arcsec"), (z_l_values, "z_l_bin")):
        fine = np.sort(np.asarray(values, np.float64))
        centres, edges, index = merged_grid(fine, merge)
        out.append((centres, edges, index[_nearest(cols[column], fine)]))
    return tuple(out)


def _lens_weights(population: Population, te_edges, zl_edges):
    """(the population's lenses per cell (flat, θ_E-major), their shares) — (None, None) for a
    population without a deflector model."""
    if population.cell_weights is None:
        return None, None
    weights = np.asarray(population.cell_weights(te_edges, zl_edges), np.float64).reshape(-1)
    share = np.clip(weights / weights.sum(), 0.0, 1.0) if weights.sum() > 0 else np.zeros_like(weights)
    return weights, share


def selection_for_population(
    population: Population,
    threshold_name: str,
    injections: pa.Table,
    thresholds: pa.Table,
    proposal: PriorRegistry,
    theta_e_values,
    z_l_values,
    min_n_eff: float = N_EFF_FLOOR,
    threshold_uncertainty: bool = True,
    merge: int = 1,
) -> pa.Table:
    """C(θ_E, z_l | population) at the usable threshold ``threshold_name`` (InputError listing the
    usable ones otherwise): POPULATION_SCHEMA rows of every cell of the grid (``kind = 'cell'``)
    and, for a population with deflectors, the marginals over z_l (``'theta_e'``), over θ_E
    (``'z_l'``) and overall (``'all'``), weighting the cells by the population's lenses in them.

    ``injections``: the scored injections (``kind = 'injection'`` rows of ``injection_scores``) with
    the population's parameters, z_s, θ_E, ``z_l_bin``, ``score``, ``valid``, ``host_object_id``;
    ``proposal``: the priors they were drawn from (the plan's conditioning). Each row carries N_eff
    (Kish) and is flagged insufficient below ``min_n_eff``, never filled; intervals are Jeffreys on
    the host-clustered effective size, widened by the threshold's uncertainty unless
    ``threshold_uncertainty`` is False (the closure compares at the realised threshold). ``merge``
    cells of the injection grid along each axis make one cell of the population's grid (importance
    weights spend injections: a population narrower than the proposal needs more per cell)."""
    from .selection import THRESHOLD_QUANTILES, _grid_cells, _injection_arrays, cell_estimates, detection_rho
    from .thresholds import threshold_quantiles, threshold_value

    thr = threshold_value(thresholds, threshold_name)
    arr = _injection_arrays(injections)
    cols = injection_columns(injections, (*SOURCE_PARAMETERS, *CONDITIONING_COLUMNS, "z_l_bin"))
    (te_c, te_e, ti), (zl_c, zl_e, zi) = _population_grid(cols, theta_e_values, z_l_values, merge)
    nt, nz = te_c.size, zl_c.size
    cell = ti * nz + zi
    usable = arr["usable"]
    w = np.zeros(injections.num_rows)
    sub = {k: v[usable] for k, v in cols.items()}
    w[usable] = importance_weights(population, sub, proposal)
    s = np.where(usable, arr["score"], -np.inf)
    detected = s > thr
    variants = None
    if threshold_uncertainty:
        q = threshold_quantiles(thresholds, THRESHOLD_QUANTILES)[threshold_name]
        variants = s[None, :] > q[:, None]
    rho = detection_rho(arr, _grid_cells(injections), thr)
    est = cell_estimates(cell, nt * nz, w, detected, arr["host"], rho, variants)
    n_inj = np.bincount(cell, weights=usable.astype(float), minlength=nt * nz).astype(np.int64)
    gt, gz = np.repeat(np.arange(nt), nz), np.tile(np.arange(nz), nt)
    weights, share = _lens_weights(population, te_e, zl_e)
    names = ("theta_e_centre", "theta_e_lo", "theta_e_hi", "z_l_centre", "z_l_lo", "z_l_hi")
    rows = _rows(
        est,
        names,
        "cell",
        threshold_name,
        thr,
        population.name,
        (te_c[gt], te_e[:-1][gt], te_e[1:][gt]),
        (zl_c[gz], zl_e[:-1][gz], zl_e[1:][gz]),
        n_inj,
        share,
        None,
        min_n_eff,
    )
    if weights is not None:
        rows += _marginal_rows(
            rows,
            est,
            weights,
            w,
            cell,
            (ti, zi, gt, gz),
            (te_c, te_e, zl_c, zl_e),
            detected,
            arr,
            rho,
            variants,
            (threshold_name, thr, population.name, min_n_eff),
        )
    return pa.Table.from_pylist(rows, schema=POPULATION_SCHEMA)
