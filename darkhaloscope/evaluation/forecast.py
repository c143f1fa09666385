"""The forecast: how many lenses the search finds per square degree, and in the area it searched —
the LensPop-like population (``evaluation.populations``, Collett 2015) of lenses in each (θ_E, z_l)
cell times the selection function reweighted to that population, C(θ_E, z_l | lenspop):

    N = Σ_cells n_lenspop(cell) · C(cell | lenspop),

n_lenspop = ∫ dz_l dV_c/(dz_l dΩ) ∫ dσ φ(σ, z_l) ∫ dz_s n_s(z_s) π θ_E² over the cell (θ_E =
θ_SIS(σ, z_l, z_s)): the velocity dispersion function of Choi, Park & Vogeley (2007, :data:`CHOI2007`)
with LensPop's (1 + z)^−2.5 evolution of its normalisation, and every source of the LensPop-like
counts (d log N/dm = 0.3 normalised to Hogg et al. 1997's 6.3 × 10⁵ deg⁻² at R < 26, to r = 27.5, at
the redshifts p(z | m) of the LSST Science Book) within θ_E of the lens — arcs, rings and doubles,
which the proposal now covers. C carries the source's magnitude, size (LensPop's size–magnitude–
redshift relation), profile and position; a cell whose N_eff is below the floor is not measured,
and its lenses are reported apart (``n_unmeasured_per_deg2``), as are the lenses outside the grid.

The deflector integral is checked against the closed-form SIS optical depth of a non-evolving
population in a flat universe (Turner, Ostriker & Gott 1984), τ(z_s) = F/30 (D_C H0/c)³
(:func:`sis_optical_depth`, :func:`analytic_sis_optical_depth`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from scipy.special import gamma as gamma_fn

from ..errors import InputError
from ..lensing.cosmology import C_KMS, DEFAULT_COSMOLOGY, get_cosmology, theta_e_from_sigma_v

#: Velocity dispersions integrated over [km/s] (the hosts' VDISP range, ``lensing.hosts``).
SIGMA_RANGE = (70.0, 450.0)
_ARCSEC = math.pi / 180.0 / 3600.0
_SQDEG = (math.pi / 180.0) ** 2


@dataclass(frozen=True)
class VelocityDispersionFunction:
    """Modified Schechter VDF: φ(σ) dσ = φ* (σ/σ*)^α exp[−(σ/σ*)^β] β / Γ(α/β) dσ/σ, with
    φ* = ``phi_star_h3`` h³ Mpc⁻³ and σ* [km/s]."""

    name: str
    phi_star_h3: float
    sigma_star: float
    alpha: float
    beta: float

    def phi(self, sigma, h: float) -> np.ndarray:
        """φ(σ) [Mpc⁻³ (km/s)⁻¹] at σ [km/s] for the Hubble parameter h = H0 / 100 km/s/Mpc."""
        x = np.asarray(sigma, dtype=np.float64) / self.sigma_star
        shape = x**self.alpha * np.exp(-(x**self.beta)) * self.beta / gamma_fn(self.alpha / self.beta)
        return self.phi_star_h3 * h**3 * shape / np.asarray(sigma, dtype=np.float64)

    def moment(self, k: float, h: float) -> float:
        """∫ σ^k φ(σ) dσ over all σ [Mpc⁻³ (km/s)^k] (closed form: φ* σ*^k Γ((α+k)/β) / Γ(α/β))."""
        return (
            self.phi_star_h3
            * h**3
            * self.sigma_star**k
            * gamma_fn((self.alpha + k) / self.beta)
            / gamma_fn(self.alpha / self.beta)
        )


#: Choi, Park & Vogeley 2007, early-type galaxies of SDSS DR5 (their best fit).
CHOI2007 = VelocityDispersionFunction("Choi et al. 2007 (early types)", 8.0e-3, 161.0, 2.32, 2.67)


@dataclass(frozen=True)
class SourceCounts:
    """Power-law galaxy counts: N(< m) = ``n_ref`` (m_ref) · 10^(slope (m − m_ref)) per deg²."""

    name: str
    n_ref: float
    m_ref: float
    slope: float

    def differential(self, m) -> np.ndarray:
        """dN/dm [deg⁻² mag⁻¹] at magnitudes ``m``."""
        m = np.asarray(m, dtype=np.float64)
        return self.n_ref * self.slope * math.log(10.0) * 10 ** (self.slope * (m - self.m_ref))


#: Hogg et al. 1997: 6.3e5 galaxies deg⁻² to R = 26, d log N / dm ≈ 0.3 in R.
HOGG1997 = SourceCounts("Hogg et al. 1997 (R band)", 6.3e5, 26.0, 0.3)


def _nodes(lo: float, hi: float, n: int, log: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Midpoints of ``n`` equal steps over [lo, hi] (in log when ``log``) and their widths."""
    if log:
        e = np.exp(np.linspace(math.log(lo), math.log(hi), n + 1))
    else:
        e = np.linspace(lo, hi, n + 1)
    return 0.5 * (e[:-1] + e[1:]), np.diff(e)


def deflector_grid(
    vdf: VelocityDispersionFunction,
    z_range: tuple[float, float],
    sigma_range: tuple[float, float] = SIGMA_RANGE,
    n_z: int = 40,
    n_sigma: int = 60,
    cosmology=DEFAULT_COSMOLOGY,
    evolution: float = 0.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(z_l (Z,), σ (S,) [km/s], number of deflectors per steradian in each (z, σ) cell (Z, S)):
    dV_c/(dz dΩ) [Mpc³ sr⁻¹] φ(σ) (1 + z)^evolution Δz Δσ, midpoint rule (σ log-spaced)."""
    if not (0 < z_range[0] < z_range[1]) or not (0 < sigma_range[0] < sigma_range[1]):
        raise InputError(f"deflector ranges need 0 < lo < hi: z {z_range}, sigma {sigma_range}")
    c = get_cosmology(cosmology)
    z, dz = _nodes(*z_range, n_z)
    s, ds = _nodes(*sigma_range, n_sigma, log=True)
    dv = c.differential_comoving_volume(z).to_value("Mpc3 / sr")
    h = c.H0.to_value("km / (s Mpc)") / 100.0
    return z, s, (dv * dz * (1.0 + z) ** evolution)[:, None] * (vdf.phi(s, h) * ds)[None, :]


def sis_optical_depth(
    vdf: VelocityDispersionFunction, z_s: float, cosmology=DEFAULT_COSMOLOGY, n_z: int = 200, n_sigma: int = 200
) -> float:
    """Probability that a source at ``z_s`` is multiply imaged by the deflector population
    (the fold with P_det = 1 and the whole Einstein disc): Σ N_cell π θ_E² [sr]."""
    z, s, n = deflector_grid(vdf, (1e-4, z_s * (1 - 1e-6)), (1.0, 20 * vdf.sigma_star), n_z, n_sigma, cosmology)
    theta = theta_e_from_sigma_v(s[None, :], z[:, None], z_s, cosmology) * _ARCSEC
    return float(np.sum(n * math.pi * theta**2))


def analytic_sis_optical_depth(vdf: VelocityDispersionFunction, z_s: float, cosmology=DEFAULT_COSMOLOGY) -> float:
    """Turner, Ostriker & Gott 1984 for a flat universe and a non-evolving population:
    τ = (16 π³ / 30) ⟨n σ⁴⟩ D_C(z_s)³ / c⁴ (D_C comoving [Mpc], ⟨n σ⁴⟩ the VDF's 4th moment)."""
    c = get_cosmology(cosmology)
    if getattr(c, "Ok0", None) != 0:
        raise InputError("the closed-form SIS optical depth holds for a flat universe")
    h = c.H0.to_value("km / (s Mpc)") / 100.0
    dc = c.comoving_distance(z_s).to_value("Mpc")
    return 16 * math.pi**3 / 30 * vdf.moment(4, h) * dc**3 / C_KMS**4


FORECAST_SCHEMA = pa.schema(
    [
        pa.field("threshold_name", pa.string(), nullable=False),
        pa.field("population", pa.string(), nullable=False, metadata={"description": "lens population (lenspop)"}),
        pa.field("bin", pa.string(), nullable=False, metadata={"description": "θ_E bin [lo, hi) or 'all'"}),
        pa.field("theta_e_lo", pa.float64()),
        pa.field("theta_e_hi", pa.float64()),
        pa.field("area_deg2", pa.float64(), nullable=False, metadata={"unit": "deg2", "description": "searched area"}),
        pa.field("n_per_deg2", pa.float64(), nullable=False, metadata={"description": "expected detected lenses"}),
        pa.field("n_per_deg2_sd", pa.float64(), nullable=False, metadata={"description": "from C's intervals"}),
        pa.field("n_in_area", pa.float64(), nullable=False, metadata={"description": "n_per_deg2 × area_deg2"}),
        pa.field("n_in_area_sd", pa.float64(), nullable=False),
        pa.field("n_lensed_per_deg2", pa.float64(), nullable=False, metadata={"description": "all lenses (C = 1)"}),
        pa.field(
            "n_unmeasured_per_deg2",
            pa.float64(),
            nullable=False,
            metadata={"description": "lenses in cells whose N_eff is below the floor (C not measured)"},
        ),
    ]
)


def sphere_box_area_deg2(ra_min: float, ra_max: float, dec_min: float, dec_max: float) -> float:
    """Solid angle [deg²] of an RA/Dec box (degrees)."""
    d = math.radians
    return (ra_max - ra_min) * (math.sin(d(dec_max)) - math.sin(d(dec_min))) * 180.0 / math.pi


def forecast_table(
    cells: pa.Table, density: np.ndarray, theta_e_edges, area_deg2: float, threshold_name: str, population: str
) -> pa.Table:
    """FORECAST_SCHEMA rows per θ_E bin and 'all': ``density`` (T, Z) lenses per deg² of the
    population in each cell, ``cells`` the population's ``kind = 'cell'`` rows of
    ``selection_populations`` at the threshold (θ_E major, as ``selection_for_population`` writes
    them). Insufficient cells add to ``n_unmeasured_per_deg2``, never to ``n_per_deg2``; the sd adds
    the cells' 68 % half-widths in quadrature (the cells' errors taken as independent)."""
    if area_deg2 <= 0:
        raise InputError(f"searched area must be > 0 deg2, got {area_deg2}")
    d = cells.to_pydict()
    dens = np.asarray(density, np.float64)
    t, z = dens.shape
    if len(d["completeness"]) != t * z:
        raise InputError(f"{len(d['completeness'])} cells of C for a {t} x {z} grid of lens densities")
    c = np.array([np.nan if v is None else v for v in d["completeness"]]).reshape(t, z)
    lo = np.array([np.nan if v is None else v for v in d["ci68_lo"]]).reshape(t, z)
    hi = np.array([np.nan if v is None else v for v in d["ci68_hi"]]).reshape(t, z)
    ok = np.asarray(d["sufficient"], bool).reshape(t, z) & np.isfinite(c)
    found = np.where(ok, dens * np.nan_to_num(c), 0.0)
    var = np.where(ok, (dens * 0.5 * np.nan_to_num(hi - lo)) ** 2, 0.0)
    unmeasured = np.where(ok, 0.0, dens)
    edges = np.asarray(theta_e_edges, np.float64)
    rows = []
    groups = [(f"[{edges[i]:g}, {edges[i + 1]:g})", float(edges[i]), float(edges[i + 1]), [i]) for i in range(t)]
    for label, a, b, sel in [*groups, ("all", None, None, list(range(t)))]:
        n, sd = float(found[sel].sum()), float(np.sqrt(var[sel].sum()))
        rows.append(
            {
                "threshold_name": threshold_name,
                "population": population,
                "bin": label,
                "theta_e_lo": a,
                "theta_e_hi": b,
                "area_deg2": float(area_deg2),
                "n_per_deg2": n,
                "n_per_deg2_sd": sd,
                "n_in_area": n * area_deg2,
                "n_in_area_sd": sd * area_deg2,
                "n_lensed_per_deg2": float(dens[sel].sum()),
                "n_unmeasured_per_deg2": float(unmeasured[sel].sum()),
            }
        )
    return pa.Table.from_pylist(rows, schema=FORECAST_SCHEMA)
