"""A worked forecast: how many lenses the search finds per square degree, the selection model
(``closure``: P(detected | arc S/N, θ_E, lens z magnitude)) folded with a deflector and a source
population.

Per unit solid angle, with deflectors from a velocity dispersion function φ(σ) [Mpc⁻³ (km/s)⁻¹] at
comoving density constant in z, and sources of differential counts n_s(m) [sr⁻¹ mag⁻¹] at z_s:

    dN/dΩ = ∫ dz_l dV_c/(dz_l dΩ) ∫ dσ φ(σ) ⟨ ∫ dm n_s(m) · f_β π θ_E² · P_det(S/N, θ_E, m_z) ⟩_{z_s}

- θ_E = θ_SIS(σ, z_l, z_s) (``lensing.cosmology``); π θ_E² (radians) is the SIS multiple-image
  cross-section, and f_β = BETA_MAX² keeps the sources within BETA_MAX θ_E of the lens, where the
  injection prior put them (beta_frac ≤ 0.4: arcs and rings) and so where the selection model was
  measured. Doubles from sources farther out are not counted: the forecast counts arcs and rings.
- The arc's S/N for a source of unlensed r magnitude m at θ_E: the injections measure
  log10 S/N + 0.4 m (magnification, source size, seeing and depth of DR10 hosts included) at each θ_E
  of the grid; its quantiles (:func:`snr_offsets`) make S/N(m) a distribution, averaged over.
- The lens's z magnitude m_z(σ, z_l): a least-squares fit over the injection hosts,
  m_z = a + b log10 σ + c z_l + DM(z_l) (:func:`fit_lens_magnitude`), without its scatter.
- ⟨·⟩_{z_s}: the injection prior's source redshifts (U(1, 3)); every counted source lies there, and a
  source at z_s ≤ z_l is not lensed.
- Only lenses whose θ_E and z_l lie inside the selection function's grid are counted (the model is not
  measured outside); the rest are reported apart (``n_outside_grid_per_deg2``).

The VDF is Choi, Park & Vogeley 2007 (ApJ 658, 884; SDSS early types, :data:`CHOI2007`), without
evolution; the source counts are Hogg et al. 1997 (MNRAS 288, 404; R band: 6.3 × 10⁵ deg⁻² to R = 26,
d log N / dm = 0.3, :data:`HOGG1997`), R identified with DR10's r (AB), between SOURCE_MAG_RANGE.
Its check: with P_det = 1, f_β = 1 and no grid limits, the fold is the SIS lensing optical depth of a
non-evolving population in a flat universe (Turner, Ostriker & Gott 1984), τ(z_s) = F/30 (D_C H0/c)³
(:func:`sis_optical_depth`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa
from scipy.special import gamma as gamma_fn

from ..errors import InputError
from ..lensing.cosmology import C_KMS, DEFAULT_COSMOLOGY, distance_modulus, get_cosmology, theta_e_from_sigma_v
from .closure import detection_probability, theta_e_edges

#: Sources within this fraction of θ_E (the injection prior's beta_frac range ends at 0.4).
BETA_MAX = 0.4
#: Unlensed source r magnitudes counted (AB): Hogg et al. 1997's counts reach R = 26.
SOURCE_MAG_RANGE = (20.0, 26.0)
#: Source redshifts: the injection prior's (z_s U(1, 3)).
SOURCE_Z_RANGE = (1.0, 3.0)
#: Velocity dispersions integrated over [km/s] (the hosts' VDISP range, ``lensing.hosts``).
SIGMA_RANGE = (70.0, 450.0)
#: Quantiles of the S/N offset per θ_E.
N_SNR_QUANTILES = 15
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
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(z_l (Z,), σ (S,) [km/s], number of deflectors per steradian in each (z, σ) cell (Z, S)):
    dV_c/(dz dΩ) [Mpc³ sr⁻¹] φ(σ) Δz Δσ, midpoint rule (σ log-spaced)."""
    if not (0 < z_range[0] < z_range[1]) or not (0 < sigma_range[0] < sigma_range[1]):
        raise InputError(f"deflector ranges need 0 < lo < hi: z {z_range}, sigma {sigma_range}")
    c = get_cosmology(cosmology)
    z, dz = _nodes(*z_range, n_z)
    s, ds = _nodes(*sigma_range, n_sigma, log=True)
    dv = c.differential_comoving_volume(z).to_value("Mpc3 / sr")
    h = c.H0.to_value("km / (s Mpc)") / 100.0
    return z, s, (dv * dz)[:, None] * (vdf.phi(s, h) * ds)[None, :]


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


def snr_offsets(injections: pa.Table, theta_e_values, n_quantiles: int = N_SNR_QUANTILES) -> np.ndarray:
    """(len(theta_e_values), n_quantiles) quantiles (at (k + 0.5) / n) of log10(arc S/N) + 0.4 m_r
    [m_r the source's unlensed r, AB] over the valid injections of each θ_E of the grid: the arc's
    S/N of a source of magnitude m at that θ_E is 10^(offset − 0.4 m)."""
    rows = _valid(injections, ("theta_e_arcsec", "arc_snr", "src_mag_r"))
    te, snr, mag = (np.asarray(rows.column(c).to_numpy(zero_copy_only=False), np.float64) for c in rows.column_names)
    ok = snr > 0
    centres = np.asarray(theta_e_values, dtype=np.float64)
    nearest = np.argmin(np.abs(te[ok, None] - centres[None, :]), axis=1)
    off = np.log10(snr[ok]) + 0.4 * mag[ok]
    q = (np.arange(n_quantiles) + 0.5) / n_quantiles
    out = np.empty((len(centres), n_quantiles))
    for i in range(len(centres)):
        if not np.any(nearest == i):
            raise InputError(f"no valid injection with arc S/N > 0 at theta_E = {centres[i]:g} arcsec")
        out[i] = np.quantile(off[nearest == i], q)
    return out


def fit_lens_magnitude(injections: pa.Table, cosmology=DEFAULT_COSMOLOGY) -> np.ndarray:
    """(a, b, c) of m_z = a + b log10 σ + c z + DM(z), least squares over the valid injections'
    hosts (``lens_mag_z`` [AB], ``sigma_v_kms``, ``host_z``), one row per host."""
    rows = _valid(injections, ("host_object_id", "lens_mag_z", "sigma_v_kms", "host_z"))
    _, first = np.unique(np.asarray(rows.column("host_object_id").to_numpy()), return_index=True)
    mag, sigma, z = (
        np.asarray(rows.column(c).to_numpy(zero_copy_only=False), np.float64)[first]
        for c in ("lens_mag_z", "sigma_v_kms", "host_z")
    )
    ok = np.isfinite(mag) & (sigma > 0) & (z > 0)
    if ok.sum() < 3:
        raise InputError(f"{int(ok.sum())} injection hosts with a z magnitude, sigma_v and redshift: need 3")
    x = np.stack([np.ones(ok.sum()), np.log10(sigma[ok]), z[ok]], axis=1)
    coef, *_ = np.linalg.lstsq(x, mag[ok] - distance_modulus(z[ok], cosmology), rcond=None)
    return coef


def lens_magnitude(coef, sigma, z, cosmology=DEFAULT_COSMOLOGY) -> np.ndarray:
    """m_z [AB] of a lens of σ [km/s] at redshift z from :func:`fit_lens_magnitude`'s coefficients."""
    return coef[0] + coef[1] * np.log10(sigma) + coef[2] * z + distance_modulus(z, cosmology)


def _valid(injections: pa.Table, columns: tuple[str, ...]) -> pa.Table:
    missing = [c for c in (*columns, "valid") if c not in injections.column_names]
    if missing:
        raise InputError(f"injection scores lack {missing} for the forecast")
    valid = np.asarray(injections.column("valid").to_numpy(zero_copy_only=False), dtype=bool)
    return injections.filter(pa.array(valid)).select(list(columns))


@dataclass(frozen=True)
class ForecastAssumptions:
    """Everything the forecast assumes (recorded in its metadata)."""

    deflectors: str
    vdf: dict
    vdf_evolution: str
    sources: str
    source_counts: dict
    source_mag_range: tuple[float, float]
    source_z_range: tuple[float, float]
    beta_max: float
    sigma_range: tuple[float, float]
    theta_e_range: tuple[float, float]
    z_l_range: tuple[float, float]
    cosmology: str
    snr_model: str
    lens_magnitude_model: str

    def to_dict(self) -> dict:
        return asdict(self)


def forecast_assumptions(theta_e_range, z_l_range, cosmology=DEFAULT_COSMOLOGY) -> ForecastAssumptions:
    return ForecastAssumptions(
        deflectors="SIS deflectors with the VDF's density at every z_l, θ_E = θ_SIS(σ, z_l, z_s)",
        vdf=asdict(CHOI2007),
        vdf_evolution="none (comoving density and σ constant in z)",
        sources="every galaxy of the counts is a potential source at z_s uniform in the range",
        source_counts=asdict(HOGG1997),
        source_mag_range=SOURCE_MAG_RANGE,
        source_z_range=SOURCE_Z_RANGE,
        beta_max=BETA_MAX,
        sigma_range=SIGMA_RANGE,
        theta_e_range=tuple(float(v) for v in theta_e_range),
        z_l_range=tuple(float(v) for v in z_l_range),
        cosmology=str(cosmology),
        snr_model=f"log10 S/N = offset(θ_E) − 0.4 m_r, {N_SNR_QUANTILES} quantiles of the injections' offsets",
        lens_magnitude_model="m_z = a + b log10 σ + c z_l + DM(z_l), fitted on the injection hosts, no scatter",
    )


def forecast_density(
    model: pa.Table,
    offsets: np.ndarray,
    mag_coef,
    theta_e_values,
    z_l_values,
    cosmology=DEFAULT_COSMOLOGY,
    n_z: int = 24,
    n_sigma: int = 40,
    n_zs: int = 6,
    n_mag: int = 12,
) -> dict[str, np.ndarray]:
    """Expected detected lenses per deg² by θ_E bin of the grid (edges at the midpoints of
    ``theta_e_values``, the outer ones half a step out), for every replica of the selection model
    (``model``: SELECTION_MODEL_SCHEMA rows of one threshold). Returns ``edges`` (B+1,),
    ``per_deg2`` (replicas, B), ``lensed_per_deg2`` (B,) (all lenses within BETA_MAX θ_E, P_det = 1)
    and ``outside_per_deg2`` (lenses with θ_E outside the grid, P_det = 1)."""
    c = np.sort(np.asarray(theta_e_values, dtype=np.float64))
    zc = np.sort(np.asarray(z_l_values, dtype=np.float64))
    edges = theta_e_edges(c)
    zstep = float(np.min(np.diff(zc))) if zc.size > 1 else 0.1
    z_range = (max(zc[0] - zstep / 2, 1e-3), zc[-1] + zstep / 2)
    z, s, n_cell = deflector_grid(CHOI2007, z_range, SIGMA_RANGE, n_z, n_sigma, cosmology)
    zs, dzs = _nodes(*SOURCE_Z_RANGE, n_zs)
    m, dm = _nodes(*SOURCE_MAG_RANGE, n_mag)
    sources = HOGG1997.differential(m) * dm / 3600.0**2  # per arcsec² in each magnitude step
    reps = sorted(set(model.column("replica").to_pylist()))
    nb = len(c)
    per = np.zeros((len(reps), nb))
    lensed = np.zeros(nb)
    outside = 0.0
    q = offsets.shape[1]
    for i, zl in enumerate(z):
        mz = lens_magnitude(mag_coef, s, zl, cosmology)  # (S,)
        for j, z_s in enumerate(zs):
            if z_s <= zl:  # a source in front of the lens is not lensed by it
                continue
            te = theta_e_from_sigma_v(s, zl, z_s, cosmology)  # (S,) arcsec
            w = n_cell[i] * dzs[j] / (SOURCE_Z_RANGE[1] - SOURCE_Z_RANGE[0])  # deflectors per sr, this z_s
            area = math.pi * (BETA_MAX * te) ** 2  # arcsec²
            b = np.searchsorted(edges, te, side="right") - 1
            inside = (b >= 0) & (b < nb)
            n_lensed = w * area * sources.sum()  # lenses per sr with any source in the magnitude range
            outside += float(n_lensed[~inside].sum())
            if not inside.any():
                continue
            lensed += np.bincount(b[inside], weights=n_lensed[inside], minlength=nb)
            k = np.argmin(np.abs(te[inside, None] - c[None, :]), axis=1)  # nearest θ_E of the grid
            log_snr = offsets[k][:, None, :] - 0.4 * m[None, :, None]  # (S', M, Q)
            shape = log_snr.shape
            args = (
                10 ** log_snr.ravel(),
                np.broadcast_to(te[inside, None, None], shape).ravel(),
                np.broadcast_to(mz[inside, None, None], shape).ravel(),
            )
            weight = (w[inside] * area[inside])[:, None] * sources[None, :] / q  # (S', M)
            for r_i, r in enumerate(reps):
                p = detection_probability(model, *args, replica=r).reshape(shape).sum(axis=2)  # (S', M)
                per[r_i] += np.bincount(b[inside], weights=(weight * p).sum(axis=1), minlength=nb)
    return {
        "edges": edges,
        "per_deg2": per * _SQDEG,
        "lensed_per_deg2": lensed * _SQDEG,
        "outside_per_deg2": outside * _SQDEG,
    }


FORECAST_SCHEMA = pa.schema(
    [
        pa.field("threshold_name", pa.string(), nullable=False),
        pa.field(
            "population",
            pa.string(),
            nullable=False,
            metadata={
                "description": "'vdf': CHOI2007 deflectors and HOGG1997 sources; 'mock': the mock's hidden lenses"
            },
        ),
        pa.field("bin", pa.string(), nullable=False, metadata={"description": "θ_E bin [lo, hi) or 'all'"}),
        pa.field("theta_e_lo", pa.float64()),
        pa.field("theta_e_hi", pa.float64()),
        pa.field("area_deg2", pa.float64(), nullable=False, metadata={"unit": "deg2", "description": "searched area"}),
        pa.field("n_per_deg2", pa.float64(), nullable=False, metadata={"description": "expected detected lenses"}),
        pa.field("n_per_deg2_sd", pa.float64(), nullable=False, metadata={"description": "selection model's sd"}),
        pa.field("n_in_area", pa.float64(), nullable=False, metadata={"description": "n_per_deg2 × area_deg2"}),
        pa.field("n_in_area_sd", pa.float64(), nullable=False),
        pa.field(
            "n_lensed_per_deg2",
            pa.float64(),
            metadata={"description": "lenses of the population before detection (P_det = 1)"},
        ),
        pa.field("n_truth", pa.int64(), metadata={"description": "mock: hidden lenses the search recovered"}),
        pa.field(
            "pull", pa.float64(), metadata={"description": "mock: (n_truth − n_in_area) / sd (model and sampling)"}
        ),
    ]
)


def sphere_box_area_deg2(ra_min: float, ra_max: float, dec_min: float, dec_max: float) -> float:
    """Solid angle [deg²] of an RA/Dec box (degrees)."""
    d = math.radians
    return (ra_max - ra_min) * (math.sin(d(dec_max)) - math.sin(d(dec_min))) * 180.0 / math.pi


def _groups(edges: np.ndarray):
    labels = [
        (f"[{edges[i]:g}, {edges[i + 1]:g})", float(edges[i]), float(edges[i + 1])) for i in range(len(edges) - 1)
    ]
    return [*labels, ("all", None, None)]


def vdf_forecast_table(density: dict[str, np.ndarray], area_deg2: float, threshold_name: str) -> pa.Table:
    """FORECAST_SCHEMA rows (population 'vdf') per θ_E bin and 'all' from :func:`forecast_density`:
    the central fit (replica 0) and the sd over the bootstrap replicas."""
    per, lensed = density["per_deg2"], density["lensed_per_deg2"]
    per = np.concatenate([per, per.sum(axis=1, keepdims=True)], axis=1)
    lensed = np.r_[lensed, lensed.sum()]
    sd = per[1:].std(axis=0) if per.shape[0] > 1 else np.zeros(per.shape[1])
    rows = []
    for i, (label, lo, hi) in enumerate(_groups(density["edges"])):
        rows.append(
            {
                "threshold_name": threshold_name,
                "population": "vdf",
                "bin": label,
                "theta_e_lo": lo,
                "theta_e_hi": hi,
                "area_deg2": float(area_deg2),
                "n_per_deg2": float(per[0, i]),
                "n_per_deg2_sd": float(sd[i]),
                "n_in_area": float(per[0, i] * area_deg2),
                "n_in_area_sd": float(sd[i] * area_deg2),
                "n_lensed_per_deg2": float(lensed[i]),
                "n_truth": None,
                "pull": None,
            }
        )
    return pa.Table.from_pylist(rows, schema=FORECAST_SCHEMA)


def snr_averaged_probability(model: pa.Table, theta_e, lens_mag_z, snr_range, n_nodes: int = 64) -> np.ndarray:
    """(replicas, N): P_det of lenses at θ_E [arcsec] and lens z magnitude [AB], averaged over an arc
    S/N log-uniform on ``snr_range`` (midpoint rule over ``n_nodes`` steps in log S/N)."""
    te = np.asarray(theta_e, dtype=np.float64)
    mz = np.asarray(lens_mag_z, dtype=np.float64)
    lo, hi = snr_range
    if not (0 < lo < hi):
        raise InputError(f"arc S/N range must have 0 < lo < hi, got {snr_range}")
    snr = np.exp(_nodes(math.log(lo), math.log(hi), n_nodes)[0])
    shape = (len(te), n_nodes)
    args = (np.broadcast_to(snr[None, :], shape).ravel(), np.repeat(te, n_nodes), np.repeat(mz, n_nodes))
    reps = sorted(set(model.column("replica").to_pylist()))
    return np.stack([detection_probability(model, *args, replica=r).reshape(shape).mean(axis=1) for r in reps])


def mock_forecast_table(
    model: pa.Table,
    hidden: pa.Table,
    recovered,
    theta_e_values,
    snr_range: tuple[float, float],
    area_deg2: float,
) -> pa.Table:
    """FORECAST_SCHEMA rows (population 'mock') per θ_E bin and 'all': the selection model folded
    with the mock's populations — the hidden lenses' deflectors (their θ_E and lens z magnitude,
    ``hidden``: ``theta_e_arcsec``, ``lens_mag_z``) and the mock's sources (arc S/N log-uniform on
    ``snr_range``) — against the hidden lenses the search recovered (``recovered``, bool per row).
    sd: √(var over the bootstrap replicas + Σ p̄ (1 − p̄)) (the model's and the sampling's)."""
    te = np.asarray(hidden.column("theta_e_arcsec").to_numpy(zero_copy_only=False), np.float64)
    mz = np.asarray(hidden.column("lens_mag_z").to_numpy(zero_copy_only=False), np.float64)
    rec = np.asarray(recovered, dtype=bool)
    if rec.shape != te.shape:
        raise InputError(f"{rec.size} recovery flags for {te.size} hidden lenses")
    if area_deg2 <= 0:
        raise InputError(f"searched area must be > 0 deg2, got {area_deg2}")
    p = snr_averaged_probability(model, te, mz, snr_range)
    edges = theta_e_edges(theta_e_values)
    b = np.searchsorted(edges, te, side="right") - 1
    rows = []
    for i, (label, lo, hi) in enumerate(_groups(edges)):
        sel = np.ones(te.size, dtype=bool) if label == "all" else b == i
        central = float(p[0, sel].sum())
        boot = p[1:, sel].sum(axis=1) if p.shape[0] > 1 else np.zeros(1)
        sd = float(np.sqrt(np.var(boot) + np.sum(p[0, sel] * (1 - p[0, sel]))))
        k = int(rec[sel].sum())
        rows.append(
            {
                "threshold_name": model.column("threshold_name")[0].as_py(),
                "population": "mock",
                "bin": label,
                "theta_e_lo": lo,
                "theta_e_hi": hi,
                "area_deg2": float(area_deg2),
                "n_per_deg2": central / area_deg2,
                "n_per_deg2_sd": sd / area_deg2,
                "n_in_area": central,
                "n_in_area_sd": sd,
                "n_lensed_per_deg2": float(sel.sum()) / area_deg2,
                "n_truth": k,
                "pull": (k - central) / sd if sd > 0 else None,
            }
        )
    return pa.Table.from_pylist(rows, schema=FORECAST_SCHEMA)
