"""Redshift companions of the embedded mock survey, in DR10's data models (``darkhaloscope.survey.redshifts``):
one photo-z sweep per sweep file (row-matched) and the SDSS-matched spectra (the survey file of
Tractor photometry and the SDSS ``specObj-dr16.fits`` it is row-matched to).

Every galaxy gets a true redshift drawn from p(z | type, m_r, r − z) ∝ dV_c/dz · φ(M_r(z)) · N(r − z; c(z), s)
on a grid, with the population's luminosity function φ (Gaussian in M_r) and colour–redshift track c(z)
per type class (the mock's choices below), M_r = m_r − DM(z) − K(z) with the mock's K-correction
K(z) = K_PER_Z · z; so bright red galaxies lie far, faint blue ones near. Known and hidden lenses
take their truth's z_lens instead.

Photo-zs: the median scatters around the truth with σ = σ_0 (1 + z), σ_0 = PZ_SIGMA_RED for red
galaxies (DEV, SER) and PZ_SIGMA_BLUE for the rest at z-band magnitude < PZ_RELIABLE_MAG, growing by
PZ_SIGMA_GROWTH per magnitude fainter (DR10's photo-zs: σ_NMAD ≈ 0.014–0.023, reliable to z < 21,
science.md §2.3a), with a share PZ_OUTLIER_RATE of outliers drawn uniformly over PZ_OUTLIER_RANGE;
−99 in every photo-z column where a band has NOBS 0 (the ``_I`` set also needs NOBS_I).

Spectra: early types (DEV, SER) brighter than SPEC_LRG_MAG_I in i (BOSS's LRG limit) and every galaxy
brighter than SPEC_MAIN_MAG_R in r (SDSS's main sample), each kept with probability
SPEC_COMPLETENESS, get Z (the truth plus SPEC_Z_ERR (1 + z)), ZWARNING (4 for a share SPEC_ZWARNING_RATE)
and VDISP: log10 σ = Hyde & Bernardi (2009)'s ⟨log σ | M_r⟩ plus the mock's intrinsic scatter
SIGMA_SCATTER_DEX, observed with VDISP_ERR of VDISP_REL_ERR (a fraction growing fainter); the lenses'
σ is their SIS σ from θ_E, z_lens and z_source. A share SPEC_UNMATCHED of the SDSS rows match no
DR10 source (OBJID −1 in the survey file), as fibres on objects Tractor did not keep.

Determinism: every draw comes from ``unit_hash_array`` of the object id, salted by the seed and
the quantity, so a row's redshift does not depend on which file or chunk holds it.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
from astropy.io import fits
from scipy.special import ndtri

from darkhaloscope.constants import flux_to_mag
from darkhaloscope.lensing.cosmology import DEFAULT_COSMOLOGY, distance_modulus, get_cosmology, sigma_v_from_theta_e
from darkhaloscope.lensing.hosts import hyde_bernardi_log_sigma
from darkhaloscope.seeding import unit_hash_array
from darkhaloscope.survey.redshifts import (
    DR10_PHOTO_Z_DIR,
    DR10_SPECOBJ_SDSS,
    DR10_SPECOBJ_SURVEY,
    PZ_FILL,
    pz_filename,
)
from darkhaloscope.survey.sweeps import read_sweep

from .writers import atomic_write

#: Type classes: early (DEV, SER), disc (EXP, REX), compact (PSF).
CLASSES = {"DEV": "early", "SER": "early", "EXP": "disc", "REX": "disc"}
#: Luminosity function per class: (mean, sd) of M_r (AB), a Gaussian (mock choice).
LUMINOSITY = {"early": (-21.4, 0.9), "disc": (-20.4, 1.1), "compact": (-19.6, 1.2)}
#: Colour track r − z = c0 + c1 z and its scatter per class (mock choice).
COLOUR_TRACK = {"early": (0.5, 1.1, 0.25), "disc": (0.3, 0.6, 0.3), "compact": (0.2, 0.4, 0.35)}
#: The mock's K-correction K_r(z) = K_PER_Z · z (mag) per class.
K_PER_Z = {"early": 1.6, "disc": 0.8, "compact": 0.5}
#: Redshift grid of the true-redshift draw.
Z_GRID = np.linspace(0.01, 1.6, 318)
#: Photo-z errors (module doc).
PZ_SIGMA_RED, PZ_SIGMA_BLUE, PZ_RELIABLE_MAG, PZ_SIGMA_GROWTH = 0.02, 0.035, 21.0, 1.0
PZ_OUTLIER_RATE, PZ_OUTLIER_RANGE = 0.015, (0.02, 1.5)
#: The spectroscopic sample (module doc).
SPEC_LRG_MAG_I, SPEC_MAIN_MAG_R, SPEC_COMPLETENESS = 19.9, 17.77, 0.85
SPEC_Z_ERR, SPEC_ZWARNING_RATE, SPEC_UNMATCHED = 3e-5, 0.02, 0.03
SIGMA_SCATTER_DEX = 0.08
#: VDISP_ERR / VDISP: (at r = 17 and brighter, at r = 19.6 and fainter), linear between.
VDISP_REL_ERR = (0.04, 0.12)
#: Sweep columns the companions read.
READ_COLUMNS = (
    "release",
    "brickid",
    "objid",
    "object_id",
    "ra",
    "dec",
    "type",
    "flux_g",
    "flux_r",
    "flux_i",
    "flux_z",
    "mw_transmission_g",
    "mw_transmission_r",
    "mw_transmission_i",
    "mw_transmission_z",
    "nobs_g",
    "nobs_r",
    "nobs_i",
    "nobs_z",
)


def _u(ids: np.ndarray, seed: int, what: str) -> np.ndarray:
    return unit_hash_array(np.asarray(ids, dtype=np.int64).view(np.uint64), salt=("mock-redshift", seed, what))


def _gauss(ids, seed, what) -> np.ndarray:
    return ndtri(np.clip(_u(ids, seed, what), 1e-12, 1 - 1e-12))


def _mags(rows: pa.Table) -> dict[str, np.ndarray]:
    out = {}
    for b in [b for b in "griz" if f"mw_transmission_{b}" in rows.column_names]:
        f = np.asarray(rows.column(f"flux_{b}").to_numpy(), np.float64)
        mw = np.asarray(rows.column(f"mw_transmission_{b}").to_numpy(), np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            out[b] = flux_to_mag(np.where(mw > 0, f / mw, np.nan))
    return out


def type_classes(types) -> np.ndarray:
    """Class (early, disc, compact) of each TYPE string."""
    return np.array([CLASSES.get(str(t).strip(), "compact") for t in types], dtype=object)


def true_redshifts(ids, classes, mag_r, r_minus_z, seed: int, cosmology: str = DEFAULT_COSMOLOGY) -> np.ndarray:
    """True redshifts drawn from p(z | class, m_r, r − z) on Z_GRID (module doc); rows without a
    finite m_r draw from the class's p(z | colour) alone."""
    cosmo = get_cosmology(cosmology)
    log_dv = np.log(cosmo.differential_comoving_volume(Z_GRID).value)
    dm = distance_modulus(Z_GRID, cosmology)
    u = _u(ids, seed, "z_true")
    out = np.empty(len(ids))
    for cls in ("early", "disc", "compact"):
        sel = np.flatnonzero(classes == cls)
        mu_m, sd_m = LUMINOSITY[cls]
        c0, c1, sc = COLOUR_TRACK[cls]
        for start in range(0, len(sel), 65536):
            s = sel[start : start + 65536]
            m = np.nan_to_num(mag_r[s], nan=mu_m + 40.0)[:, None]
            m_abs = m - dm[None, :] - K_PER_Z[cls] * Z_GRID[None, :]
            logp = log_dv[None, :] - 0.5 * ((m_abs - mu_m) / sd_m) ** 2 * np.isfinite(mag_r[s])[:, None]
            col = np.nan_to_num(r_minus_z[s], nan=c0 + 0.4 * c1)[:, None]
            logp = logp - 0.5 * ((col - c0 - c1 * Z_GRID[None, :]) / sc) ** 2
            cdf = np.cumsum(np.exp(logp - logp.max(axis=1, keepdims=True)), axis=1)
            cdf /= cdf[:, -1:]
            k = np.minimum((cdf < u[s, None]).sum(axis=1), len(Z_GRID) - 1)
            out[s] = Z_GRID[k]
    # jitter inside the grid step so redshifts are continuous
    return np.clip(out + (_u(ids, seed, "z_jitter") - 0.5) * (Z_GRID[1] - Z_GRID[0]), 0.005, None)


def mock_log_sigma(mag_r, z, classes) -> np.ndarray:
    """Mean log10 σ [km/s] of the mock's galaxies: Hyde & Bernardi (2009) at M_r = m_r − DM(z) − K(z)."""
    k = np.array([K_PER_Z[c] for c in classes])
    return hyde_bernardi_log_sigma(mag_r - distance_modulus(z) - k * z)


def lens_truth_overrides(truths: list[pa.Table]) -> dict[int, tuple[float, float]]:
    """object_id -> (z_lens, SIS σ [km/s] from θ_E, z_lens, z_source) of every painted lens."""
    out: dict[int, tuple[float, float]] = {}
    for t in truths:
        if t.num_rows == 0:
            continue
        # the known lenses' truth names the redshifts z_lens, z_source; the hidden lenses' (ψ in the
        # injection bank's names) z_l, z_s
        names = ("z_lens", "z_source") if "z_lens" in t.column_names else ("z_l", "z_s")
        zl, zs = (np.asarray(t.column(c).to_numpy(), np.float64) for c in names)
        te = np.asarray(t.column("theta_e_arcsec").to_numpy(), np.float64)
        sig = sigma_v_from_theta_e(te, zl, np.maximum(zs, zl + 1e-3))
        for oid, a, b in zip(t.column("object_id").to_pylist(), zl, sig):
            out[int(oid)] = (float(a), float(b))
    return out


def galaxy_z_and_sigma(rows: pa.Table, seed: int) -> dict[str, np.ndarray]:
    """The mock's truth of catalog ``rows`` (object_id, type, flux and mw_transmission in r and z, and
    in g and i when present): ``ids``, ``classes``, dereddened ``mags``, true redshift ``z`` and
    ``log_sigma`` (log10 km/s, the relation plus the galaxy's own scatter; NaN without an r flux).
    The same for a row whichever table holds it (draws keyed by object id)."""
    ids = np.asarray(rows.column("object_id").to_numpy(), np.int64)
    classes = type_classes(rows.column("type").to_pylist())
    mags = _mags(rows)
    z = true_redshifts(ids, classes, mags["r"], mags["r"] - mags["z"], seed)
    log_sig = np.full(len(ids), np.nan)
    ok = np.isfinite(mags["r"])
    log_sig[ok] = mock_log_sigma(mags["r"][ok], z[ok], classes[ok]) + SIGMA_SCATTER_DEX * _gauss(ids[ok], seed, "sigma")
    return {"ids": ids, "classes": classes, "mags": mags, "z": z, "log_sigma": log_sig}


def _galaxy_truth(rows: pa.Table, seed: int, lenses: dict[int, tuple[float, float]]) -> dict[str, np.ndarray]:
    t = galaxy_z_and_sigma(rows, seed)
    ids, z, log_sig = t["ids"], t["z"], t["log_sigma"]
    is_lens = np.array([int(i) in lenses for i in ids], dtype=bool)
    for i in np.flatnonzero(is_lens):
        z[i], s = lenses[int(ids[i])]
        log_sig[i] = math.log10(s)
    return {**t, "is_lens": is_lens}


def _photo_z_columns(rows: pa.Table, truth: dict, seed: int, suffix: str) -> dict[str, np.ndarray]:
    ids, z, mags = truth["ids"], truth["z"], truth["mags"]
    red = truth["classes"] == "early"
    sig0 = np.where(red, PZ_SIGMA_RED, PZ_SIGMA_BLUE) * (0.85 if suffix else 1.0)
    faint = np.clip(np.nan_to_num(mags["z"], nan=25.0) - PZ_RELIABLE_MAG, 0.0, None)
    sigma = sig0 * (1.0 + z) * (1.0 + PZ_SIGMA_GROWTH * faint)
    med = z + sigma * _gauss(ids, seed, "pz" + suffix)
    out = _u(ids, seed, "pz_outlier" + suffix) < PZ_OUTLIER_RATE
    lo, hi = PZ_OUTLIER_RANGE
    med = np.where(out, lo + (hi - lo) * _u(ids, seed, "pz_outlier_z" + suffix), med)
    med = np.clip(med, 0.001, None)
    bands = ("g", "r", "i", "z") if suffix else ("g", "r", "z")
    covered = np.logical_and.reduce([np.asarray(rows.column(f"nobs_{b}").to_numpy()) >= 1 for b in bands])
    cols = {
        "Z_PHOT_MEAN": med + 0.1 * sigma * _gauss(ids, seed, "pz_mean" + suffix),
        "Z_PHOT_MEDIAN": med,
        "Z_PHOT_STD": sigma,
        "Z_PHOT_L68": np.clip(med - sigma, 0.0, None),
        "Z_PHOT_U68": med + sigma,
        "Z_PHOT_L95": np.clip(med - 2 * sigma, 0.0, None),
        "Z_PHOT_U95": med + 2 * sigma,
    }
    return {f"{k}{suffix}": np.where(covered, v, PZ_FILL).astype(np.float32) for k, v in cols.items()}


def _spec_selected(truth: dict, seed: int) -> np.ndarray:
    mags, classes = truth["mags"], truth["classes"]
    lrg = (classes == "early") & (np.nan_to_num(mags["i"], nan=99.0) < SPEC_LRG_MAG_I)
    main = (classes != "compact") & (np.nan_to_num(mags["r"], nan=99.0) < SPEC_MAIN_MAG_R)
    return (lrg | main) & (_u(truth["ids"], seed, "spec_target") < SPEC_COMPLETENESS)


def write_photo_z(path: Path, rows: pa.Table, truth: dict, spec: np.ndarray, z_spec: np.ndarray, seed: int) -> None:
    """The photo-z sweep of one sweep file's ``rows`` (in file order) at ``path``."""
    n = rows.num_rows
    cols = [
        fits.Column("RELEASE", "I", array=np.asarray(rows.column("release").to_numpy(), np.int16)),
        fits.Column("BRICKID", "J", array=np.asarray(rows.column("brickid").to_numpy(), np.int32)),
        fits.Column("OBJID", "J", array=np.asarray(rows.column("objid").to_numpy(), np.int32)),
        fits.Column("Z_SPEC", "E", array=np.where(spec, z_spec, PZ_FILL).astype(np.float32)),
        fits.Column("SURVEY", "12A", array=np.where(spec, "SDSS", "").astype("S12")),
    ]
    for suffix in ("", "_I"):
        for name, v in _photo_z_columns(rows, truth, seed, suffix).items():
            cols.append(fits.Column(name, "E", array=v))
        cols.append(fits.Column(f"TRAINING{suffix}", "L", array=spec.copy()))
        kfold = (_u(truth["ids"], seed, "kfold") * 5).astype(np.int16)
        cols.append(fits.Column(f"KFOLD{suffix}", "I", array=np.where(spec, kfold, -1).astype(np.int16)))
    hdu = fits.BinTableHDU.from_columns(cols, nrows=n)
    atomic_write(path, lambda tmp: fits.HDUList([fits.PrimaryHDU(), hdu]).writeto(tmp))


def write_redshift_companions(root: Path, sweep_files, truths: list[pa.Table], seed: int) -> list[Path]:
    """Write the photo-z sweep of every sweep file and the SDSS-matched spectra pair under ``root``
    (a mock DR10 mirror); returns the paths written."""
    lenses = lens_truth_overrides(truths)
    (root / DR10_PHOTO_Z_DIR).mkdir(parents=True, exist_ok=True)
    written, spec_rows = [], []
    for path in sweep_files:
        rows = read_sweep(path, columns=READ_COLUMNS)
        truth = _galaxy_truth(rows, seed, lenses)
        spec = _spec_selected(truth, seed) & np.isfinite(truth["log_sigma"])
        ids = truth["ids"]
        z_spec = truth["z"] + SPEC_Z_ERR * (1 + truth["z"]) * _gauss(ids, seed, "z_spec")
        out = root / DR10_PHOTO_Z_DIR / pz_filename(Path(path).name)
        write_photo_z(out, rows, truth, spec, z_spec, seed)
        written.append(out)
        sel = np.flatnonzero(spec)
        spec_rows.append((rows.take(pa.array(sel)), {k: v[sel] for k, v in truth.items() if k != "mags"}, z_spec[sel]))
    written += _write_spectra(root, spec_rows, seed)
    return written


def _write_spectra(root: Path, parts, seed: int) -> list[Path]:
    rows = pa.concat_tables([p[0] for p in parts]) if parts else None
    ids = np.concatenate([p[1]["ids"] for p in parts])
    z = np.concatenate([p[2] for p in parts])
    log_sig = np.concatenate([p[1]["log_sigma"] for p in parts])
    n = len(ids)
    mag_r = _mags(rows)["r"]
    rel = np.interp(mag_r, (17.0, 19.6), VDISP_REL_ERR)
    vdisp = 10**log_sig * (1.0 + rel * _gauss(ids, seed, "vdisp"))
    zwarn = np.where(_u(ids, seed, "zwarning") < SPEC_ZWARNING_RATE, 4, 0).astype(np.int32)
    unmatched = _u(ids, seed, "unmatched") < SPEC_UNMATCHED
    plate = (3000 + (_u(ids, seed, "plate") * 6000)).astype(np.int32)
    mjd = (55000 + (_u(ids, seed, "mjd") * 3000)).astype(np.int32)
    fiber = (1 + (_u(ids, seed, "fiber") * 1000)).astype(np.int32)

    def tractor(name, dtype):
        return np.asarray(rows.column(name).to_numpy(zero_copy_only=False)).astype(dtype)

    keys = {
        "RELEASE": np.where(unmatched, 0, tractor("release", np.int16)).astype(np.int16),
        "BRICKID": np.where(unmatched, 0, tractor("brickid", np.int32)).astype(np.int32),
        "OBJID": np.where(unmatched, -1, tractor("objid", np.int32)).astype(np.int32),
    }
    survey_cols = [
        fits.Column("RELEASE", "I", array=keys["RELEASE"]),
        fits.Column("BRICKID", "J", array=keys["BRICKID"]),
        fits.Column("OBJID", "J", array=keys["OBJID"]),
        fits.Column("TYPE", "3A", array=np.asarray([str(t).strip() for t in rows.column("type").to_pylist()], "S3")),
        fits.Column("RA", "D", array=tractor("ra", np.float64)),
        fits.Column("DEC", "D", array=tractor("dec", np.float64)),
    ]
    for b in "grz":
        survey_cols.append(fits.Column(f"FLUX_{b.upper()}", "E", array=tractor(f"flux_{b}", np.float32)))
        survey_cols.append(
            fits.Column(f"MW_TRANSMISSION_{b.upper()}", "E", array=tractor(f"mw_transmission_{b}", np.float32))
        )
    pairing = [
        fits.Column("PLATE", "J", array=plate),
        fits.Column("MJD", "J", array=mjd),
        fits.Column("FIBERID", "J", array=fiber),
    ]
    sdss_cols = pairing + [
        fits.Column("Z", "E", array=z.astype(np.float32)),
        fits.Column("Z_ERR", "E", array=(SPEC_Z_ERR * (1 + z)).astype(np.float32)),
        fits.Column("ZWARNING", "J", array=zwarn),
        fits.Column("CLASS", "6A", array=np.full(n, "GALAXY", "S6")),
        fits.Column("VDISP", "E", array=vdisp.astype(np.float32)),
        fits.Column("VDISP_ERR", "E", array=(rel * vdisp).astype(np.float32)),
    ]
    paths = [root / DR10_SPECOBJ_SURVEY, root / DR10_SPECOBJ_SDSS]
    paths[0].parent.mkdir(parents=True, exist_ok=True)
    for path, cols in zip(paths, (survey_cols + pairing, sdss_cols)):
        hdu = fits.BinTableHDU.from_columns(cols, nrows=n)
        atomic_write(path, lambda tmp, h=hdu: fits.HDUList([fits.PrimaryHDU(), h]).writeto(tmp))
    return paths
