"""Injection hosts as lenses: each host's own redshift and velocity dispersion.

An injection into the cell (θ_E, z_l) is painted onto a galaxy whose redshift lies in that z_l bin
(HOLISMOKES paints onto SDSS LRGs with their spectroscopic z and σ_v: Cañameras et al. 2020,
Schuldt et al. 2021), so the lens light in the stamp belongs to a galaxy that could host that lens.

- Redshift: the SDSS spectroscopic Z (ZWARNING 0, CLASS GALAXY) where the host has one, else the
  median of its photo-z PDF (Zhou et al. 2023); a host with neither is not a host.
- Velocity dispersion: VDISP (km/s) where SDSS measured one (ZWARNING 0, VDISP_ERR > 0, VDISP in
  VDISP_RANGE), taken as σ_SIS (f_SIE = 1); its uncertainty is VDISP_ERR. Else a luminosity–σ relation
  with its intrinsic scatter, calibrated on the survey's own spectra (:func:`calibrate_sigma_relation`):
  log10 σ is a quadratic in (X, z), X = m_r − DM(z) the dereddened r magnitude less the distance
  modulus, so the k- and evolution corrections are the data's, not a template's. The functional form
  follows Hyde & Bernardi (2009), whose relation (as LensPop uses it, Collett 2015) is
  :func:`hyde_bernardi_log_sigma`.

Every σ is a distribution, log-normal: mean ``log_sigma_mu`` (log10 km/s) and sd ``log_sigma_sd`` (dex).
Units: magnitudes AB, fluxes nanomaggies, σ km/s, angles radians.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa

from ..constants import flux_to_mag
from ..errors import InputError
from .cosmology import DEFAULT_COSMOLOGY, distance_modulus

#: Measured VDISP (km/s) kept as a host's σ_v; outside it SDSS's fits are unreliable.
VDISP_RANGE = (70.0, 450.0)
#: Hosts' TYPEs whose spectra calibrate the luminosity–σ relation (early types, as the hosts are).
CALIBRATION_TYPES = ("DEV", "SER")
#: Fewest spectra a calibration accepts (six coefficients and a scatter).
MIN_CALIBRATION = 30
#: Floor of the relation's intrinsic scatter (dex): never tighter than the measured σ of a spectrum.
MIN_SCATTER_DEX = 0.02

#: Sweep columns :func:`host_lens_properties` reads of each host.
HOST_ROW_COLUMNS = ("object_id", "flux_r", "flux_z", "mw_transmission_r", "mw_transmission_z", "shape_e1", "shape_e2")

HOST_LENS_FIELDS = (
    pa.field("host_z", pa.float64(), metadata={"description": "spec-z where measured, else photo-z median"}),
    pa.field("host_z_source", pa.string(), metadata={"description": "spec or phot"}),
    pa.field("sigma_v_source", pa.string(), metadata={"description": "measured (VDISP) or relation"}),
    pa.field("log_sigma_mu", pa.float64(), metadata={"unit": "dex(km/s)", "description": "σ_v distribution mean"}),
    pa.field("log_sigma_sd", pa.float64(), metadata={"unit": "dex", "description": "σ_v distribution sd"}),
    pa.field("lens_mag_z", pa.float64(), metadata={"unit": "AB mag", "description": "host z mag, dereddened"}),
    pa.field("host_mag_r", pa.float64(), metadata={"unit": "AB mag", "description": "host r mag, dereddened"}),
    pa.field("host_q", pa.float64(), metadata={"description": "axis ratio of the host light (Tractor)"}),
    pa.field("host_phi_rad", pa.float64(), metadata={"unit": "rad", "description": "position angle of the light"}),
)


def hyde_bernardi_log_sigma(m_abs_r) -> np.ndarray:
    """⟨log10 σ / (km/s) | M_r⟩ = −(2.97 + 0.37 M_r + 0.006 M_r²) of early-type galaxies (Hyde &
    Bernardi 2009, MNRAS 394, 1978; the form LensPop uses, Collett 2015 ``EarlyTypeRelations``),
    M_r the rest-frame SDSS r absolute magnitude (AB)."""
    m = np.asarray(m_abs_r, dtype=np.float64)
    return -(2.97 + 0.37 * m + 0.006 * m**2)


def _design(x: np.ndarray, z: np.ndarray) -> np.ndarray:
    x0 = x + 21.0  # centred near the hosts' X, for a well-conditioned fit
    return np.stack([np.ones_like(x0), x0, x0**2, z, x0 * z, z**2], axis=1)


@dataclass(frozen=True)
class SigmaRelation:
    """log10 σ = Σ coef_k f_k(X, z), f = (1, X', X'², z, X' z, z²), X' = m_r − DM(z) + 21, with
    intrinsic scatter ``scatter_dex``; calibrated on ``n_calibration`` spectra spanning ``z_range``
    and ``x_range`` (X, AB mag) in ``cosmology``; ``rms_dex`` the residuals' rms."""

    coef: tuple[float, ...]
    scatter_dex: float
    n_calibration: int
    z_range: tuple[float, float]
    x_range: tuple[float, float]
    rms_dex: float
    cosmology: str = DEFAULT_COSMOLOGY

    def log_sigma(self, mag_r, z) -> np.ndarray:
        """Mean log10 σ [km/s] at dereddened r magnitudes ``mag_r`` and redshifts ``z`` (vectorised);
        X and z are clipped to the calibrated ranges (no extrapolation of the quadratic)."""
        z = np.clip(np.asarray(z, dtype=np.float64), *self.z_range)
        x = np.clip(np.asarray(mag_r, dtype=np.float64) - distance_modulus(z, self.cosmology), *self.x_range)
        return _design(x, z) @ np.asarray(self.coef)

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}


def _calibration_sample(spectra: pa.Table) -> dict[str, np.ndarray]:
    def col(name, dtype=np.float64):
        return np.asarray(spectra.column(name).to_numpy(zero_copy_only=False), dtype=dtype)

    flux, mw = col("flux_r"), col("mw_transmission_r")
    vd, ve, z = col("vdisp"), col("vdisp_err"), col("z")
    ok = (
        good_spectrum(spectra)
        & np.isin(col("type", object), CALIBRATION_TYPES)
        & (ve > 0)
        & (vd >= VDISP_RANGE[0])
        & (vd <= VDISP_RANGE[1])
        & (flux > 0)
        & (mw > 0)
    )
    return {"mag_r": flux_to_mag(flux[ok] / mw[ok]), "z": z[ok], "log_sigma": np.log10(vd[ok]), "err": ve[ok] / vd[ok]}


def good_spectrum(spectra: pa.Table) -> np.ndarray:
    """Rows of a spectra table whose redshift is usable: ZWARNING 0, CLASS GALAXY, 0 < Z < 2."""
    z = np.asarray(spectra.column("z").to_numpy(zero_copy_only=False), dtype=np.float64)
    zw = np.asarray(spectra.column("zwarning").to_numpy(zero_copy_only=False))
    cls = np.asarray(spectra.column("class").to_pylist(), dtype=object)
    return (zw == 0) & (cls == "GALAXY") & np.isfinite(z) & (z > 0) & (z < 2)


def calibrate_sigma_relation(spectra: pa.Table, cosmology: str = DEFAULT_COSMOLOGY) -> SigmaRelation:
    """Least-squares fit of :class:`SigmaRelation` to the early-type spectra with a measured VDISP.

    The intrinsic scatter is the residual variance less the mean measurement variance (in dex,
    VDISP_ERR / (VDISP ln 10)), floored at MIN_SCATTER_DEX. InputError when fewer than
    MIN_CALIBRATION spectra qualify."""
    s = _calibration_sample(spectra)
    n = len(s["z"])
    if n < MIN_CALIBRATION:
        raise InputError(
            f"only {n} early-type spectra with a measured VDISP (need {MIN_CALIBRATION}) to calibrate the "
            "luminosity–σ relation: the survey's spectra table is missing or too small"
        )
    x = s["mag_r"] - distance_modulus(s["z"], cosmology)
    a = _design(x, s["z"])
    coef, *_ = np.linalg.lstsq(a, s["log_sigma"], rcond=None)
    resid = s["log_sigma"] - a @ coef
    meas = np.mean((s["err"] / math.log(10.0)) ** 2)
    scatter = float(np.sqrt(max(np.var(resid) - meas, MIN_SCATTER_DEX**2)))
    return SigmaRelation(
        coef=tuple(float(c) for c in coef),
        scatter_dex=scatter,
        n_calibration=n,
        z_range=(float(s["z"].min()), float(s["z"].max())),
        x_range=(float(x.min()), float(x.max())),
        rms_dex=float(np.sqrt(np.mean(resid**2))),
        cosmology=cosmology,
    )


def _by_id(table: pa.Table, ids: np.ndarray, what: str) -> np.ndarray:
    """Row of ``table`` (object_id unique) for each id, −1 where absent."""
    if table.num_rows == 0:
        return np.full(len(ids), -1, dtype=np.int64)
    tid = np.asarray(table.column("object_id").to_numpy(), dtype=np.int64)
    order = np.argsort(tid, kind="stable")
    st = tid[order]
    if np.any(st[1:] == st[:-1]):
        raise InputError(f"{what}: object_id {int(st[1:][st[1:] == st[:-1]][0])} is not unique")
    pos = np.clip(np.searchsorted(st, ids), 0, len(st) - 1)
    return np.where(st[pos] == ids, order[pos], -1)


def host_lens_properties(
    ids: np.ndarray, rows: pa.Table, photo_z: pa.Table, spectra: pa.Table, relation: SigmaRelation
) -> tuple[pa.Table, dict]:
    """HOST_LENS_FIELDS of hosts ``ids`` (int64 object ids) and counts.

    ``rows``: their sweep rows (object_id, flux_r, flux_z, mw_transmission_r, mw_transmission_z,
    shape_e1, shape_e2); ``photo_z``: photo-z rows (object_id, z_phot_median); ``spectra``: the
    spectra table. Hosts without any redshift get null ``host_z`` (counted, never guessed)."""
    ids = np.asarray(ids, dtype=np.int64)
    n = len(ids)
    ir, ip, isp = _by_id(rows, ids, "host sweep rows"), _by_id(photo_z, ids, "photo_z"), _by_id(spectra, ids, "spectra")
    if np.any(ir < 0):
        raise InputError(f"hosts {ids[ir < 0][:5].tolist()} are not in the sweeps")

    def col(t, name, idx, fill=np.nan):
        v = np.asarray(t.column(name).to_numpy(zero_copy_only=False), dtype=np.float64) if t.num_rows else np.zeros(0)
        out = np.full(n, fill)
        ok = idx >= 0
        out[ok] = v[idx[ok]]
        return out

    good = good_spectrum(spectra) if spectra.num_rows else np.zeros(0, bool)
    spec_ok = np.zeros(n, bool)
    spec_ok[isp >= 0] = good[isp[isp >= 0]]
    z_spec = col(spectra, "z", isp)
    z_phot = col(photo_z, "z_phot_median", ip) if photo_z.num_rows else np.full(n, np.nan)
    phot_ok = np.isfinite(z_phot) & (z_phot > 0)
    host_z = np.where(spec_ok, z_spec, np.where(phot_ok, z_phot, np.nan))
    source = np.where(spec_ok, "spec", np.where(phot_ok, "phot", None)).astype(object)

    vd, ve = col(spectra, "vdisp", isp), col(spectra, "vdisp_err", isp)
    measured = spec_ok & (ve > 0) & (vd >= VDISP_RANGE[0]) & (vd <= VDISP_RANGE[1])
    mag_r = flux_to_mag(col(rows, "flux_r", ir) / col(rows, "mw_transmission_r", ir))
    mag_z = flux_to_mag(col(rows, "flux_z", ir) / col(rows, "mw_transmission_z", ir))
    has_z = np.isfinite(host_z)
    mu = np.full(n, np.nan)
    sd = np.full(n, np.nan)
    rel = has_z & ~measured & np.isfinite(mag_r)
    if rel.any():
        mu[rel] = relation.log_sigma(mag_r[rel], host_z[rel])
        sd[rel] = relation.scatter_dex
    mu[measured] = np.log10(vd[measured])
    sd[measured] = np.maximum(ve[measured] / (vd[measured] * math.log(10.0)), 1e-3)
    sigma_source = np.where(measured, "measured", np.where(rel, "relation", None)).astype(object)

    e1, e2 = col(rows, "shape_e1", ir, 0.0), col(rows, "shape_e2", ir, 0.0)
    e = np.clip(np.hypot(np.nan_to_num(e1), np.nan_to_num(e2)), 0.0, 0.95)
    q = (1.0 - e) / (1.0 + e)  # Tractor ε = (a − b)/(a + b) (science.md §2.5)
    phi = np.mod(0.5 * np.arctan2(np.nan_to_num(e2), np.nan_to_num(e1)), math.pi)

    cols = {
        "host_z": pa.array(host_z, mask=~has_z),
        "host_z_source": pa.array(source.tolist(), pa.string()),
        "sigma_v_source": pa.array(sigma_source.tolist(), pa.string()),
        "log_sigma_mu": pa.array(mu, mask=~np.isfinite(mu)),
        "log_sigma_sd": pa.array(sd, mask=~np.isfinite(sd)),
        "lens_mag_z": pa.array(mag_z, mask=~np.isfinite(mag_z)),
        "host_mag_r": pa.array(mag_r, mask=~np.isfinite(mag_r)),
        "host_q": pa.array(q),
        "host_phi_rad": pa.array(phi),
    }
    counts = {
        "n_hosts": n,
        "host_z_spec": int(spec_ok.sum()),
        "host_z_phot": int((~spec_ok & phot_ok).sum()),
        "host_without_redshift": int((~has_z).sum()),
        "sigma_measured": int(measured.sum()),
        "sigma_relation": int(rel.sum()),
    }
    return pa.table(cols, schema=pa.schema(list(HOST_LENS_FIELDS))), counts
