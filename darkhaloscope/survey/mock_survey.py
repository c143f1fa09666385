"""The embedded mock survey: a deterministic miniature DR10 in the exact DR10 sweep data model.

Layout under an output root (a DR10 mirror, so the real readers run unchanged)::

    <root>/south/sweep/10.1/sweep-<AAA>[pm]<BBB>-<AAA>[pm]<BBB>.fits   5°×5° DR10 blocks
    <root>/truth/known_lens_truth.parquet                            lens truth (see TRUTH_SCHEMA)
    <root>/mock_survey_manifest.json                                 config digest + file list

Footprint. The default blocks are RA 30–40°, Dec −5–0° (``sweep-030m005-035p000`` and
``sweep-035m005-040p000``): inside DR10-south DECaLS/DES (−18° < δ < 32°, so the same footprint
cuts as the real pipeline apply), at high Galactic latitude (b ≈ −60°, low EBV), and the two
5°×5° blocks with the most lenscat galaxy-scale lenses in that Dec range (≈550 between them;
the XMM-LSS/HSC fields are there), so crossmatch, cutouts and recall have real lenses to find.

Populations (a magnitude-limited catalog, z ≤ 23.3 AB):

- z-band number counts dN/dm ∝ 10^{0.3 m}; TYPE mix depends on magnitude (bright: more
  DEV/SER/EXP; faint: PSF/REX), overall close to DR10's PSF 48 % / REX 40 % / EXP 8 % / DEV 3 % /
  SER 2 % (science.md §2.1); a handful of DUP rows (Gaia stars with no optical flux).
- Colours per population: stars, red DEV/SER ellipticals, bluer EXP/REX discs, blue faint
  compact PSF galaxies; sizes (SHAPE_R, arcsec) log-normal per type and shrinking with
  magnitude; ellipticities per type; SERSIC 0 (PSF), 1 (REX/EXP), 4 (DEV), 0.5–6 (SER).
- Observing conditions are smooth random fields over the sky (continuous across files):
  NOBS mostly 2–10 with some < 3, PSFSIZE (FWHM arcsec) g > r > i > z in 1.0–1.8″, 5σ depths
  scaling with NOBS and seeing around medians g 24.5, r 23.9, z 23.0 AB; PSFDEPTH and
  GALDEPTH in 1/nanomaggy² (5σ flux = 5/√depth), EBV 0.01–0.04 with MW_TRANSMISSION =
  10^{−0.4 R EBV} (R from science.md §2.5); FLUX_IVAR follows depth and size, FLUX is the
  dereddened true flux × MW_TRANSMISSION plus Gaussian noise of that ivar.
- Masks: Tycho/Gaia bright stars (BRIGHT, radius 40″·10^{−0.12(G−11)}, plus SATUR/ALLMASK bits
  in the core and WISEM bits), Gaia G < 16 stars (MEDIUM, twice that radius), SGA-like large
  galaxies (GALAXY) and globular clusters (CLUSTER); inside BRIGHT/GALAXY/CLUSTER sources are
  forced to TYPE PSF (as in DR10), except the SGA galaxies and the known lenses themselves.
- Known lenses: every lenscat ``galaxy``-scale lens in the footprint (duplicates within 2″
  merged) gets a lens galaxy row exactly at its position (SER/REX/DEV/EXP as Paper IV's candidates, LRG colours, z-band counts of the field galaxies)
  and a truth row; other sources are kept > 4″ away so the match is unambiguous. The SIE mass
  has the light's position angle (its Tractor shape converted by ``tractor_to_engine_ellipticity``)
  and is rounder on average.

Determinism: every random draw comes from ``darkhaloscope.seeding.rng_for`` keyed by the config
seed and (block, chunk) or (lens name), so the same config gives byte-identical FITS files.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from astropy.io import fits
from scipy.spatial import cKDTree

from ..constants import AB_ZEROPOINT
from ..errors import InputError
from ..ids import object_id
from ..seeding import rng_for
from ..sky import chord_for_arcsec, unit_vectors
from . import sweep_model as sm
from .known_lenses import load_known_lenses
from .sweeps import SweepBox, sweep_filename

GENERATOR_VERSION = "dhs-mock-survey-5"  # 5: SIE mass PA = light PA (tractor_to_engine_ellipticity)
#: Lens-galaxy Tractor types and their cumulative probabilities (Paper IV candidates, science.md §1.1).
LENS_TYPES = ("SER", "REX", "DEV", "EXP")
LENS_TYPE_CUMULATIVE = (0.61, 0.81, 0.96)
BLOCK_DEG = 5
SWEEP_SUBDIR = os.path.join("south", "sweep", "10.1")
TRUTH_RELPATH = os.path.join("truth", "known_lens_truth.parquet")
MANIFEST_NAME = "mock_survey_manifest.json"
#: OBJIDs of one brick in one block occupy [slot * _OBJID_SLOT, (slot + 1) * _OBJID_SLOT).
_OBJID_SLOT = 1 << 18

#: Extinction coefficients A/E(B−V) (science.md §2.5).
EXTINCTION = {"G": 3.214, "R": 2.165, "I": 1.592, "Z": 1.211, "W1": 0.184, "W2": 0.113, "W3": 0.0241, "W4": 0.00910}
#: 5σ point-source depth (AB) at 3 passes and the reference seeing (FWHM, arcsec) per band.
DEPTH_3PASS = {"G": 24.2, "R": 23.6, "I": 23.1, "Z": 22.75}
FWHM_REF = {"G": 1.45, "R": 1.30, "I": 1.25, "Z": 1.20}
#: WISE 5σ depths (AB) used for FLUX_IVAR_W* and PSFDEPTH_W1/2.
WISE_DEPTH = {"W1": 20.5, "W2": 19.9, "W3": 16.7, "W4": 14.5}
TYPES = np.array([b"PSF", b"REX", b"EXP", b"DEV", b"SER", b"DUP"], dtype="S3")
_PSF, _REX, _EXP, _DEV, _SER, _DUP = range(6)

#: Maskbit values (science.md §2.4).
MB = {
    "BRIGHT": 0x2, "SATUR_G": 0x4, "SATUR_R": 0x8, "SATUR_Z": 0x10, "ALLMASK_G": 0x20, "ALLMASK_R": 0x40,
    "ALLMASK_Z": 0x80, "WISEM1": 0x100, "WISEM2": 0x200, "MEDIUM": 0x800, "GALAXY": 0x1000,
    "CLUSTER": 0x2000, "SATUR_I": 0x4000, "ALLMASK_I": 0x8000, "SUB_BLOB": 0x10000,
}

PROFILES = {
    "demo": {"n_rows_per_file": 25_000, "blocks": ((30, -5), (35, -5))},
    "full": {"n_rows_per_file": 3_000_000, "blocks": ((35, -5),)},
}

TRUTH_SCHEMA = pa.schema(
    [
        pa.field("name", pa.string(), metadata={"description": "lenscat name"}),
        pa.field("ra", pa.float64(), metadata={"unit": "deg", "description": "lens position (= catalog row)"}),
        pa.field("dec", pa.float64(), metadata={"unit": "deg"}),
        pa.field("object_id", pa.int64(), metadata={"description": "darkhaloscope.ids.object_id of the lens row"}),
        pa.field("sweep_file", pa.string(), metadata={"description": "sweep file holding the lens row"}),
        pa.field("grade", pa.string(), metadata={"description": "lenscat grading"}),
        pa.field("lens_type", pa.string(), metadata={"description": "TYPE of the lens row (SER, REX, DEV or EXP)"}),
        pa.field("z_lens", pa.float64(), metadata={"description": "lens redshift"}),
        pa.field("z_lens_from_lenscat", pa.bool_(), metadata={"description": "true when z_lens is lenscat's"}),
        pa.field("z_source", pa.float64(), metadata={"description": "source redshift, drawn in [max(1, z_lens+0.3), 3]"}),
        pa.field("theta_e_arcsec", pa.float64(), metadata={"unit": "arcsec", "description": "SIE Einstein radius (lenstronomy convention)"}),
        pa.field("lens_e1", pa.float64(), metadata={"description": "SIE mass ellipticity e1 (lenstronomy, x East, y North; same PA as the light)"}),
        pa.field("lens_e2", pa.float64(), metadata={"description": "SIE mass ellipticity e2 (lenstronomy, x East, y North; same PA as the light)"}),
        pa.field("shear_g1", pa.float64(), metadata={"description": "external shear gamma1"}),
        pa.field("shear_g2", pa.float64(), metadata={"description": "external shear gamma2"}),
        pa.field("source_mag_r", pa.float64(), metadata={"unit": "AB mag", "description": "unlensed source r magnitude"}),
        pa.field("source_r_sersic_arcsec", pa.float64(), metadata={"unit": "arcsec", "description": "source Sersic half-light radius"}),
        pa.field("source_n_sersic", pa.float64(), metadata={"description": "source Sersic index"}),
        pa.field("source_e1", pa.float64(), metadata={"description": "source ellipticity e1 (lenstronomy, x East, y North)"}),
        pa.field("source_e2", pa.float64(), metadata={"description": "source ellipticity e2 (lenstronomy, x East, y North)"}),
        pa.field("source_x_arcsec", pa.float64(), metadata={"unit": "arcsec", "description": "source offset from the lens towards East (+RA)"}),
        pa.field("source_y_arcsec", pa.float64(), metadata={"unit": "arcsec", "description": "source offset from the lens towards North (+Dec)"}),
        pa.field("g_minus_r", pa.float64(), metadata={"unit": "mag", "description": "source g - r colour"}),
        pa.field("r_minus_z", pa.float64(), metadata={"unit": "mag", "description": "source r - z colour"}),
    ]
)


@dataclass(frozen=True)
class MockSurveyConfig:
    """What to generate. ``None`` fields take the profile's value (PROFILES).

    profile: ``demo`` (2 files of ~15k rows) or ``full`` (1 file of ~3M rows); n_rows_per_file:
    rows per sweep file (known lenses and mock stars included); seed: master seed; blocks:
    lower-left (RA, Dec) corners in degrees of 5°×5° DR10 sweep blocks; chunk_rows: rows
    generated per random chunk (part of the seed keys, so it changes the bytes).
    """

    profile: str = "demo"
    n_rows_per_file: int | None = None
    seed: int = 0
    blocks: tuple[tuple[int, int], ...] | None = None
    chunk_rows: int = 131_072

    def resolved(self) -> "MockSurveyConfig":
        if self.profile not in PROFILES:
            raise InputError(f"unknown mock survey profile {self.profile!r}; expected one of {sorted(PROFILES)}")
        p = PROFILES[self.profile]
        cfg = dataclasses.replace(
            self,
            n_rows_per_file=int(self.n_rows_per_file if self.n_rows_per_file is not None else p["n_rows_per_file"]),
            blocks=tuple((int(a), int(b)) for a, b in (self.blocks if self.blocks is not None else p["blocks"])),
        )
        for ra, dec in cfg.blocks:
            if ra % BLOCK_DEG or dec % BLOCK_DEG or not (0 <= ra <= 360 - BLOCK_DEG) or not (-90 <= dec <= 90 - BLOCK_DEG):
                raise InputError(f"mock block ({ra}, {dec}) is not the corner of a 5°x5° DR10 sweep block")
        if len(set(cfg.blocks)) != len(cfg.blocks):
            raise InputError(f"mock blocks repeat: {cfg.blocks}")
        if cfg.n_rows_per_file < 100 or cfg.chunk_rows < 1000:
            raise InputError(f"n_rows_per_file ({cfg.n_rows_per_file}) must be >= 100 and chunk_rows ({cfg.chunk_rows}) >= 1000")
        return cfg

    def digest(self) -> str:
        """sha256 of the resolved config and the generator version (hex)."""
        cfg = self.resolved()
        text = json.dumps({"version": GENERATOR_VERSION, **dataclasses.asdict(cfg)}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class MockSurveyManifest:
    """What ``generate_mock_survey`` wrote: sweep file paths, truth path, footprint boxes (deg)."""

    root: Path
    sweep_files: tuple[Path, ...]
    truth_path: Path
    footprint: tuple[SweepBox, ...]
    n_rows: tuple[int, ...]
    n_known_lenses: int
    digest: str

    def to_json(self) -> dict:
        return {
            "digest": self.digest,
            "generator": GENERATOR_VERSION,
            "sweep_files": [str(p.relative_to(self.root)) for p in self.sweep_files],
            "truth": str(self.truth_path.relative_to(self.root)),
            "footprint": [dataclasses.asdict(b) for b in self.footprint],
            "n_rows": list(self.n_rows),
            "n_known_lenses": self.n_known_lenses,
        }

    @classmethod
    def from_json(cls, root: Path, d: dict) -> "MockSurveyManifest":
        return cls(
            root=root,
            sweep_files=tuple(root / p for p in d["sweep_files"]),
            truth_path=root / d["truth"],
            footprint=tuple(SweepBox(**b) for b in d["footprint"]),
            n_rows=tuple(d["n_rows"]),
            n_known_lenses=int(d["n_known_lenses"]),
            digest=d["digest"],
        )


def block_box(block: tuple[int, int]) -> SweepBox:
    """The 5°×5° box (deg) whose lower-left corner is ``block``."""
    ra, dec = block
    return SweepBox(float(ra), float(ra + BLOCK_DEG), float(dec), float(dec + BLOCK_DEG))


# ----------------------------------------------------------------------------------------------
# Helpers


def _mag_to_flux(mag):
    """AB magnitude -> nanomaggies."""
    return 10.0 ** (-0.4 * (np.asarray(mag, dtype=np.float64) - AB_ZEROPOINT))


def _smooth_field(ra, dec, seed: int, key: str) -> np.ndarray:
    """A smooth random field in [-1, 1] over the sky (wavelengths 0.7–6°), the same for every file."""
    rng = rng_for("mock-field", seed, key)
    k = 6
    wav = rng.uniform(0.7, 6.0, k)
    ang = rng.uniform(0, np.pi, k)
    phase = rng.uniform(0, 2 * np.pi, k)
    amp = rng.uniform(0.5, 1.0, k)
    x = np.asarray(ra, dtype=np.float64) * np.cos(np.radians(np.asarray(dec, dtype=np.float64)))
    y = np.asarray(dec, dtype=np.float64)
    total = np.zeros_like(x)
    for w, a, p, m in zip(wav, ang, phase, amp):
        total += m * np.sin(2 * np.pi * (x * np.cos(a) + y * np.sin(a)) / w + p)
    # A sum of random-phase sinusoids has std sqrt(sum(amp^2)/2); scale to std 0.5 and clip.
    return np.clip(total / np.sqrt(0.5 * np.sum(amp**2)) * 0.5, -1.0, 1.0)


def _ascii_name(ra_c, dec_c) -> np.ndarray:
    """S8 ``<AAAa>[pm]<BBB>`` names from centres in degrees (bricks, unWISE tiles)."""
    ra_part = sm._digits(np.floor(np.asarray(ra_c) * 10 + 1e-6).astype(np.int64) % 10000, 4)
    dec_part = sm._digits(np.floor(np.abs(dec_c) * 10 + 1e-6).astype(np.int64) % 1000, 3)
    sign = np.where(np.asarray(dec_c) >= 0, ord("p"), ord("m")).astype(np.uint8)[:, None]
    return np.ascontiguousarray(np.concatenate([ra_part, sign, dec_part], axis=1)).view("S8").ravel()


def _unwise_tile(ra, dec) -> np.ndarray:
    """unWISE-like coadd tile names (1.5625° tiles) for WISE_COADD_ID."""
    size = 1.5625
    dec_c = np.round(np.asarray(dec) / size) * size
    ncol = np.maximum(1, np.round(360 * np.cos(np.radians(dec_c)) / size)).astype(np.int64)
    ra_c = (np.floor(np.mod(ra, 360) / 360 * ncol) + 0.5) * 360 / ncol
    return _ascii_name(ra_c, dec_c)


def _uniform_in_box(rng, box: SweepBox, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions uniform on the sphere inside ``box`` (deg)."""
    ra = rng.uniform(box.ra_min, box.ra_max, n)
    s1, s2 = np.sin(np.radians(box.dec_min)), np.sin(np.radians(box.dec_max))
    dec = np.degrees(np.arcsin(rng.uniform(s1, s2, n)))
    return ra, np.clip(dec, box.dec_min, np.nextafter(box.dec_max, -np.inf))


def _area_deg2(box: SweepBox) -> float:
    return (box.ra_max - box.ra_min) * np.degrees(np.sin(np.radians(box.dec_max)) - np.sin(np.radians(box.dec_min)))


# ----------------------------------------------------------------------------------------------
# Known lenses


def known_lenses_in_footprint(boxes, lenses: pa.Table | None = None) -> pa.Table:
    """lenscat galaxy-scale lenses inside any of ``boxes``; lenses within 2″ of an earlier one merged.

    Sorted by name so the order (and hence every derived draw) is stable.
    """
    lenses = lenses if lenses is not None else load_known_lenses()
    ra = lenses.column("ra").to_numpy()
    dec = lenses.column("dec").to_numpy()
    kind = np.array(lenses.column("kind").to_pylist(), dtype=object)
    inside = np.zeros(len(ra), dtype=bool)
    for b in boxes:
        inside |= b.contains(ra, dec)
    sel = np.flatnonzero(inside & (kind == "galaxy"))
    sub = lenses.take(pa.array(sel)).sort_by("name")
    if sub.num_rows == 0:
        return sub
    v = unit_vectors(sub.column("ra").to_numpy(), sub.column("dec").to_numpy())
    pairs = cKDTree(v).query_pairs(chord_for_arcsec(2.0), output_type="ndarray")
    drop = np.unique(pairs.max(axis=1)) if len(pairs) else np.array([], dtype=np.int64)
    keep = np.setdiff1d(np.arange(sub.num_rows), drop)
    return sub.take(pa.array(keep))


def tractor_to_engine_ellipticity(e1, e2):
    """Tractor (SHAPE_E1, SHAPE_E2) -> the lensing engine's (e1, e2) of the same ellipse on the sky.

    Both are dimensionless |e| = (1 − q)/(1 + q) times (cos 2φ, sin 2φ); they differ in the angle φ:
    - Tractor: φ = θ, the major axis' position angle East of North (θ = 0: North–South);
    - engine (darkhaloscope.lensing.sie/render, lenstronomy ImageModel with transform
      [[−pix, 0], [0, pix]]): φ counter-clockwise from +x = East (+RA) towards +y = North.
    The major axis points along (East, North) = (sin θ, cos θ) = (cos φ, sin φ), so φ = 90° − θ and
    (e1, e2)_engine = (−e1, +e2)_tractor (a reflection, not a rotation: the two frames have
    opposite handedness). Arrays or scalars in, the same out.
    """
    return -np.asarray(e1, dtype=np.float64), np.array(e2, dtype=np.float64)


def _lens_truth(lenses: pa.Table, seed: int) -> dict[str, np.ndarray]:
    """Per-lens draws (lens galaxy photometry/shape and the lensing truth), keyed by lens name."""
    n = lenses.num_rows
    names = lenses.column("name").to_pylist()
    zcat = lenses.column("z_lens").to_numpy(zero_copy_only=False).astype(np.float64)
    out = {k: np.zeros(n) for k in (
        "z_lens", "z_source", "theta_e_arcsec", "lens_e1", "lens_e2", "shear_g1", "shear_g2", "source_mag_r",
        "source_r_sersic_arcsec", "source_n_sersic", "source_e1", "source_e2", "source_x_arcsec", "source_y_arcsec",
        "g_minus_r", "r_minus_z", "mag_z", "lens_gr", "lens_rz", "shape_r", "shape_e1", "shape_e2", "sersic", "type_code",
    )}
    out["z_from_cat"] = np.zeros(n, dtype=bool)
    for i, name in enumerate(names):
        r = rng_for("mock-lens", seed, name)
        u = r.uniform(size=24)
        known = np.isfinite(zcat[i]) and 0.05 < zcat[i] < 1.5
        zl = zcat[i] if known else 0.2 + 0.5 * u[0]
        out["z_from_cat"][i] = known
        out["z_lens"][i] = zl
        out["z_source"][i] = max(1.0, zl + 0.3) + (3.0 - max(1.0, zl + 0.3)) * u[1]
        out["theta_e_arcsec"][i] = 0.8 + 1.7 * u[2]
        # Light: LRG colours redden with redshift (g-r ~ 1.0 + 1.6 z, r-z ~ 0.5 + 1.3 z).
        # Lens galaxies follow the field galaxies' z-band counts (CDF ~ ((m - 16.9) / 3.05)^2 up to
        # z = 19.95), so a finder cannot separate lenses by brightness alone (the seed system's
        # core-brightness shortcut).
        out["mag_z"][i] = 16.9 + 3.05 * np.sqrt(u[3])
        out["lens_gr"][i] = np.clip(1.0 + 1.6 * zl + 0.1 * (u[4] - 0.5), 1.2, 2.1)
        out["lens_rz"][i] = np.clip(0.5 + 1.3 * zl + 0.1 * (u[5] - 0.5), 0.7, 1.6)
        out["shape_r"][i] = 0.6 + 1.4 * u[6]  # REX lenses are drawn smaller below, once the type is known
        e_light, phi = 0.3 * u[7], np.pi * u[8]
        out["shape_e1"][i], out["shape_e2"][i] = e_light * np.cos(2 * phi), e_light * np.sin(2 * phi)
        # Tractor types of Paper IV's published candidates: SER 61 %, REX 20 %, DEV 15 %, EXP 4 %
        code = int(np.searchsorted(LENS_TYPE_CUMULATIVE, u[9], side="right"))
        out["type_code"][i] = code
        out["sersic"][i] = (3.0 + 2.5 * u[10], 1.0, 4.0, 1.0)[code]
        if LENS_TYPES[code] == "REX":
            out["shape_r"][i] = 0.3 + 0.5 * u[6]
        # Mass follows light in orientation (same position angle on the sky), rounder on average.
        e_mass = e_light * (0.6 + 0.4 * u[11])
        out["lens_e1"][i], out["lens_e2"][i] = tractor_to_engine_ellipticity(e_mass * np.cos(2 * phi),
                                                                             e_mass * np.sin(2 * phi))
        g = 0.03 * np.sqrt(-2 * np.log(max(u[12], 1e-12)))
        out["shear_g1"][i], out["shear_g2"][i] = g * np.cos(2 * np.pi * u[13]), g * np.sin(2 * np.pi * u[13])
        # Unlensed r ~ 22.5-24 gives lensed arcs of r ~ 20.5-22.5 (LensPop DES: median 22.2).
        out["source_mag_r"][i] = 22.5 + 1.5 * u[14]
        out["source_r_sersic_arcsec"][i] = 0.1 + 0.4 * u[15]
        out["source_n_sersic"][i] = 0.5 + 2.0 * u[16]
        es, ps = 0.4 * u[17], np.pi * u[18]
        out["source_e1"][i], out["source_e2"][i] = es * np.cos(2 * ps), es * np.sin(2 * ps)
        # 85 % inside ~0.4 theta_E (inside the caustic, quads/arcs), the rest out to 1 theta_E.
        rad = out["theta_e_arcsec"][i] * (0.4 * np.sqrt(u[19]) if u[20] < 0.85 else 0.4 + 0.6 * u[19])
        out["source_x_arcsec"][i], out["source_y_arcsec"][i] = rad * np.cos(2 * np.pi * u[21]), rad * np.sin(2 * np.pi * u[21])
        out["g_minus_r"][i] = 0.05 + 0.4 * u[22]
        out["r_minus_z"][i] = 0.0 + 0.4 * u[23]
    return out


# ----------------------------------------------------------------------------------------------
# Masking sources (stars, large galaxies, globular clusters) per block


@dataclass
class _Maskers:
    ra: np.ndarray
    dec: np.ndarray
    kind: np.ndarray  # 0 bright star, 1 medium star, 2 SGA galaxy, 3 globular cluster
    mag: np.ndarray  # Gaia G for stars, z for galaxies/clusters
    radius: np.ndarray  # mask radius, arcsec


def _maskers(box: SweepBox, seed: int) -> _Maskers:
    rng = rng_for("mock-maskers", seed, sweep_filename(box))
    area = _area_deg2(box)
    n_b, n_m, n_g, n_c = (rng.poisson(lam) for lam in (2.0 * area, 15.0 * area, 0.4 * area, 0.02 * area))
    ra, dec = _uniform_in_box(rng, box, n_b + n_m + n_g + n_c)
    kind = np.repeat(np.arange(4), [n_b, n_m, n_g, n_c])
    mag = np.concatenate([rng.uniform(7.0, 13.0, n_b), rng.uniform(13.0, 16.0, n_m), rng.uniform(13.5, 16.5, n_g), rng.uniform(14.0, 16.0, n_c)])
    r_bright = 40.0 * 10 ** (-0.12 * (mag - 11.0))
    radius = np.select([kind == 0, kind == 1, kind == 2, kind == 3], [r_bright, 2 * r_bright, rng.uniform(20, 60, len(mag)), rng.uniform(60, 120, len(mag))])
    return _Maskers(ra, dec, kind, mag, radius)


def _mask_hits(ra, dec, m: _Maskers) -> dict[int, np.ndarray]:
    """For each masker kind: per-source distance (arcsec) / radius of the nearest masker (inf if none)."""
    v = unit_vectors(ra, dec)
    out = {}
    for k in range(4):
        sel = np.flatnonzero(m.kind == k)
        if sel.size == 0:
            out[k] = np.full(len(ra), np.inf)
            continue
        tree = cKDTree(unit_vectors(m.ra[sel], m.dec[sel]))
        nn = min(3, sel.size)
        d, idx = tree.query(v, k=nn)
        d, idx = d.reshape(len(ra), nn), idx.reshape(len(ra), nn)
        sep = np.degrees(2 * np.arcsin(np.clip(d / 2, 0, 1))) * 3600.0
        out[k] = (sep / m.radius[sel][idx]).min(axis=1)
    return out


# ----------------------------------------------------------------------------------------------
# Row generation


@dataclass
class _BlockPlan:
    box: SweepBox
    ra: np.ndarray
    dec: np.ndarray
    role: np.ndarray  # 0 field source, 1 masker (star/galaxy/cluster), 2 known lens
    ref: np.ndarray  # index into maskers (role 1) or lenses (role 2), else -1
    brickid: np.ndarray
    brickname: np.ndarray
    objid: np.ndarray
    release: np.ndarray


def _plan_block(box: SweepBox, cfg: MockSurveyConfig, maskers: _Maskers, lens_ra, lens_dec) -> _BlockPlan:
    """Positions of every row in the block, sorted into brick order with per-brick OBJIDs."""
    in_box = box.contains(lens_ra, lens_dec)
    lens_idx = np.flatnonzero(in_box)
    n_field = cfg.n_rows_per_file - len(maskers.ra) - len(lens_idx)
    if n_field < 0:
        raise InputError(f"n_rows_per_file={cfg.n_rows_per_file} is smaller than the {len(maskers.ra) + len(lens_idx)} fixed rows of block {box}")
    parts_ra, parts_dec = [], []
    for c, start in enumerate(range(0, n_field, cfg.chunk_rows)):
        r = rng_for("mock-positions", cfg.seed, sweep_filename(box), c)
        a, d = _uniform_in_box(r, box, min(cfg.chunk_rows, n_field - start))
        parts_ra.append(a)
        parts_dec.append(d)
    fra = np.concatenate(parts_ra) if parts_ra else np.zeros(0)
    fdec = np.concatenate(parts_dec) if parts_dec else np.zeros(0)
    if len(lens_idx):
        # Keep field sources > 4″ from a lens so the lens row is the only match there.
        tree = cKDTree(unit_vectors(lens_ra[lens_idx], lens_dec[lens_idx]))
        d, _ = tree.query(unit_vectors(fra, fdec), k=1)
        near = d < chord_for_arcsec(4.0)
        if near.any():
            r = rng_for("mock-positions-redraw", cfg.seed, sweep_filename(box))
            for _ in range(20):
                fra[near], fdec[near] = _uniform_in_box(r, box, int(near.sum()))
                d, _ = tree.query(unit_vectors(fra, fdec), k=1)
                near = d < chord_for_arcsec(4.0)
                if not near.any():
                    break
            fra, fdec = fra[~near], fdec[~near]
    ra = np.concatenate([fra, maskers.ra, lens_ra[lens_idx]])
    dec = np.concatenate([fdec, maskers.dec, lens_dec[lens_idx]])
    role = np.concatenate([np.zeros(len(fra), np.int8), np.ones(len(maskers.ra), np.int8), np.full(len(lens_idx), 2, np.int8)])
    ref = np.concatenate([np.full(len(fra), -1), np.arange(len(maskers.ra)), lens_idx]).astype(np.int64)
    brickid, brickname, _, _ = sm.bricks_for(ra, dec)
    order = np.lexsort((ra, brickid))
    ra, dec, role, ref, brickid, brickname = (x[order] for x in (ra, dec, role, ref, brickid, brickname))
    first = np.r_[0, np.flatnonzero(np.diff(brickid)) + 1]
    counts = np.diff(np.r_[first, len(brickid)])
    rank = np.arange(len(brickid)) - np.repeat(first, counts)
    # Bricks straddle block edges, so OBJID must also be unique across the (up to 2x2) blocks
    # sharing a brick: blocks next to each other differ in RA or Dec parity, which picks the slot.
    slot = (int(box.ra_min) // BLOCK_DEG % 2) * 2 + (int(np.floor(box.dec_min)) // BLOCK_DEG % 2)
    if rank.size and rank.max() >= _OBJID_SLOT:
        raise InputError(f"block {box}: {int(rank.max()) + 1} rows in one brick exceed the mock's OBJID range")
    objid = (rank + slot * _OBJID_SLOT).astype(np.int32)
    # DR10.1 reprocessed some bricks (sub-blob fix): they carry RELEASE 10002.
    release = np.where(brickid % 17 == 0, 10002, 10000).astype(np.int16)
    return _BlockPlan(box, ra, dec, role, ref, brickid, brickname, objid, release)


def _fill_rows(out: np.ndarray, plan: _BlockPlan, sl: slice, maskers: _Maskers, lens_draw: dict, cfg: MockSurveyConfig, chunk: int) -> None:
    """Fill ``out`` (DR10_SWEEP_DTYPE rows) for plan rows ``sl`` (vectorised)."""
    rng = rng_for("mock-rows", cfg.seed, sweep_filename(plan.box), chunk)
    n = len(out)
    ra, dec = plan.ra[sl], plan.dec[sl]
    role, ref = plan.role[sl], plan.ref[sl]
    is_field, is_masker, is_lens = role == 0, role == 1, role == 2
    mref = np.where(is_masker, ref, 0)
    mkind = np.where(is_masker, maskers.kind[mref], -1)
    lref = np.where(is_lens, ref, 0)
    seed = cfg.seed

    # --- magnitudes and types -------------------------------------------------------------
    a, m1, m2 = 0.3, 15.5, 23.3
    u = rng.uniform(size=n)
    mag_z = np.log10(u * (10 ** (a * m2) - 10 ** (a * m1)) + 10 ** (a * m1)) / a
    bright = np.digitize(mag_z, [20.0, 21.5])
    probs = np.array([[0.30, 0.25, 0.20, 0.15, 0.10], [0.40, 0.38, 0.12, 0.05, 0.05], [0.50, 0.44, 0.04, 0.01, 0.01]])
    cum = np.cumsum(probs[bright], axis=1)
    typ = (rng.uniform(size=n)[:, None] > cum).sum(axis=1).astype(np.int64)
    typ = np.minimum(typ, _SER)
    star_frac = np.where(mag_z < 20, 0.8, np.where(mag_z < 21.5, 0.5, 0.25))
    is_star = (typ == _PSF) & (rng.uniform(size=n) < star_frac)

    # maskers: stars are PSF stars at their Gaia G; SGA galaxies SER/DEV; clusters PSF-like blobs.
    mmag = maskers.mag[mref]
    typ = np.where(is_masker & (mkind <= 1), _PSF, typ)
    is_star = np.where(is_masker, mkind <= 1, is_star)
    typ = np.where(is_masker & (mkind == 2), np.where(mref % 2 == 0, _SER, _DEV), typ)
    typ = np.where(is_masker & (mkind == 3), _PSF, typ)
    mag_z = np.where(is_masker, np.where(mkind <= 1, mmag - 0.4, mmag), mag_z)
    # lenses
    typ = np.where(is_lens, np.array([_SER, _REX, _DEV, _EXP])[lens_draw["type_code"][lref].astype(int)], typ)
    is_star = is_star & ~is_lens
    mag_z = np.where(is_lens, lens_draw["mag_z"][lref], mag_z)
    # DUP: a Gaia source modelled by another source (about 1e-4 of rows).
    is_dup = is_field & is_star & (rng.uniform(size=n) < 1e-3) & (mag_z < 20)
    typ = np.where(is_dup, _DUP, typ)

    # --- colours (AB) ---------------------------------------------------------------------
    gr = np.select(
        [is_star, (typ == _DEV) | (typ == _SER), (typ == _EXP) | (typ == _REX)],
        [np.clip(rng.normal(0.9, 0.4, n), -0.3, 1.6), rng.normal(1.45, 0.25, n), rng.normal(0.75, 0.3, n)],
        rng.normal(0.4, 0.3, n),
    )
    rz = np.select(
        [is_star, (typ == _DEV) | (typ == _SER), (typ == _EXP) | (typ == _REX)],
        [0.5 * gr + rng.normal(0.0, 0.1, n), rng.normal(0.95, 0.2, n), rng.normal(0.5, 0.25, n)],
        rng.normal(0.3, 0.3, n),
    )
    gr = np.where(is_lens, lens_draw["lens_gr"][lref], gr)
    rz = np.where(is_lens, lens_draw["lens_rz"][lref], rz)
    zw1 = np.where(is_star, rng.normal(-0.4, 0.3, n), rng.normal(1.0, 0.5, n))
    zw1 = np.where(is_lens | (typ == _DEV) | (typ == _SER), rng.normal(1.4, 0.3, n), zw1)
    ri = 0.55 * rz + rng.normal(0, 0.05, n)
    true_mag = {"Z": mag_z, "R": mag_z + rz, "G": mag_z + rz + gr, "I": mag_z + rz - ri, "W1": mag_z - zw1}
    true_mag["W2"] = true_mag["W1"] + np.where(is_star, rng.normal(0.6, 0.1, n), rng.normal(0.3, 0.3, n))
    true_mag["W3"] = true_mag["W2"] + rng.normal(0.5, 0.8, n)
    true_mag["W4"] = true_mag["W3"] + rng.normal(0.5, 0.8, n)

    # --- shapes ---------------------------------------------------------------------------
    size_scale = 10 ** (-0.15 * (mag_z - 19.0))
    med = np.select([typ == _REX, typ == _EXP, typ == _DEV, typ == _SER], [0.45, 0.8, 1.1, 0.9], 0.0)
    shape_r = med * size_scale * np.exp(rng.normal(0, 0.35, n))
    shape_r = np.where(typ == _REX, np.clip(shape_r, 0.1, 3.0), np.clip(shape_r, 0.2, 15.0))
    shape_r = np.where(is_masker & (mkind == 2), rng.uniform(8, 20, n), shape_r)
    shape_r = np.where(is_lens, lens_draw["shape_r"][lref], shape_r)
    shape_r = np.where((typ == _PSF) | (typ == _DUP), 0.0, shape_r)
    emax = np.select([typ == _EXP, typ == _DEV, typ == _SER], [0.7, 0.4, 0.6], 0.0)
    e = emax * rng.beta(1.5, 2.5, n)
    phi = rng.uniform(0, np.pi, n)
    e1, e2 = e * np.cos(2 * phi), e * np.sin(2 * phi)
    lens_round = is_lens & (typ == _REX)  # REX is round by definition
    e1 = np.where(is_lens, np.where(lens_round, 0.0, lens_draw["shape_e1"][lref]), e1)
    e2 = np.where(is_lens, np.where(lens_round, 0.0, lens_draw["shape_e2"][lref]), e2)
    sersic = np.select(
        [typ == _REX, typ == _EXP, typ == _DEV, typ == _SER],
        [1.0, 1.0, 4.0, np.clip(np.exp(rng.normal(np.log(2.5), 0.5, n)), 0.5, 6.0)],
        0.0,
    )
    sersic = np.where(is_lens, lens_draw["sersic"][lref], sersic)

    # --- observing conditions -------------------------------------------------------------
    bands = sm.DR10_OPTICAL
    tile = np.sin(2 * np.pi * ra / 1.1) * np.sin(2 * np.pi * dec / 1.0)
    see = (_smooth_field(ra, dec, seed, "seeing") + 1) / 2
    fwhm = {"Z": np.clip(1.0 + 0.45 * see + rng.normal(0, 0.01, n), 0.95, 1.6)}
    fwhm["I"] = fwhm["Z"] + 0.04
    fwhm["R"] = fwhm["Z"] + 0.10 + 0.03 * (_smooth_field(ra, dec, seed, "seeing-r") + 1) / 2
    fwhm["G"] = np.clip(fwhm["R"] + 0.12, None, 1.85)
    nobs, psfdepth, galdepth, ebv = {}, {}, {}, 0.025 + 0.012 * _smooth_field(ra, dec, seed, "ebv")
    for b in bands:
        f = _smooth_field(ra, dec, seed, f"nobs-{b}")
        nb = np.rint(5.0 + 3.5 * f + 1.2 * tile + (0.0 if b != "I" else -0.5))
        if b == "I":
            nb = np.where(_smooth_field(ra, dec, seed, "i-coverage") < -0.8, 0, nb)
        nobs[b] = np.clip(nb, 0 if b == "I" else 1, 15).astype(np.int16)
        m5 = DEPTH_3PASS[b] + 1.25 * np.log10(np.maximum(nobs[b], 1) / 3.0) - 2.5 * np.log10(fwhm[b] / FWHM_REF[b])
        m5 = m5 + 0.05 * _smooth_field(ra, dec, seed, f"zp-{b}")
        pd = 25.0 / _mag_to_flux(m5) ** 2
        psfdepth[b] = np.where(nobs[b] > 0, pd, 0.0)
        galdepth[b] = psfdepth[b] * fwhm[b] ** 2 / (fwhm[b] ** 2 + (1.8 * 0.45) ** 2)
    mw = {b: 10 ** (-0.4 * EXTINCTION[b] * ebv) for b in EXTINCTION}

    # --- fluxes ---------------------------------------------------------------------------
    flux, ivar = {}, {}
    for b in bands:
        ext_factor = fwhm[b] ** 2 / (fwhm[b] ** 2 + (1.8 * shape_r) ** 2)
        iv = psfdepth[b] * ext_factor
        iv = np.where(typ == _DUP, 0.0, iv)
        sig = np.where(iv > 0, 1 / np.sqrt(np.maximum(iv, 1e-30)), 0.0)
        f = _mag_to_flux(true_mag[b]) * mw[b] + sig * rng.standard_normal(n)
        flux[b] = np.where(iv > 0, f, 0.0)
        ivar[b] = iv
    for b in sm.WISE:
        sig5 = _mag_to_flux(WISE_DEPTH[b]) / 5.0
        iv = np.full(n, 1.0 / sig5**2) * (1 + 0.3 * _smooth_field(ra, dec, seed, f"wise-{b}"))
        flux[b] = _mag_to_flux(true_mag[b]) * mw[b] + rng.standard_normal(n) / np.sqrt(iv)
        ivar[b] = iv
        if b in ("W1", "W2"):
            flux[b] = np.where(typ == _DUP, 0.0, flux[b])

    # --- masks ----------------------------------------------------------------------------
    hits = _mask_hits(ra, dec, maskers)
    in_bright, in_medium = hits[0] < 1.0, (hits[0] < 2.0) | (hits[1] < 1.0)
    in_galaxy, in_cluster = hits[2] < 1.0, hits[3] < 1.0
    core = hits[0] < 0.25
    maskbits = np.zeros(n, dtype=np.int64)
    maskbits |= np.where(in_bright, MB["BRIGHT"], 0)
    maskbits |= np.where(in_medium, MB["MEDIUM"], 0)
    maskbits |= np.where(in_galaxy, MB["GALAXY"], 0)
    maskbits |= np.where(in_cluster, MB["CLUSTER"], 0)
    maskbits |= np.where(core, MB["SATUR_G"] | MB["SATUR_R"] | MB["SATUR_Z"] | MB["SATUR_I"], 0)
    maskbits |= np.where((hits[0] < 1.5) | (hits[1] < 0.75), MB["WISEM1"], 0)
    maskbits |= np.where(hits[0] < 1.0, MB["WISEM2"], 0)
    maskbits |= np.where(rng.uniform(size=n) < 0.002, MB["SUB_BLOB"], 0)
    # ALLMASK/ANYMASK per band: saturated/bleed pixels near bright stars, rare bad pixels elsewhere.
    anymask, allmask = {}, {}
    for j, b in enumerate(bands):
        rare = rng.uniform(size=n)
        allm = np.where(core, 0x2 | 0x40, 0) | np.where(rare < 0.001, 0x1, 0)
        anym = allm | np.where(rare < 0.01, 0x10, 0) | np.where(in_bright, 0x2, 0)
        allm = np.where(nobs[b] > 0, allm, 0)
        anym = np.where(nobs[b] > 0, anym, 0)
        allmask[b], anymask[b] = allm.astype(np.int16), anym.astype(np.int16)
        maskbits |= np.where(allm != 0, MB[f"ALLMASK_{b}"], 0)
    # DR10 forces sources inside BRIGHT/GALAXY/CLUSTER to PSF, except the SGA galaxies and lenses.
    forced = (in_bright | in_galaxy | in_cluster) & ~is_lens & ~(is_masker & (mkind == 2)) & (typ != _DUP) & (typ != _PSF)
    typ = np.where(forced, _PSF, typ)
    shape_r = np.where(forced, 0.0, shape_r)
    e1, e2 = np.where(forced, 0.0, e1), np.where(forced, 0.0, e2)
    sersic = np.where(forced, 0.0, sersic)

    # --- derived quality columns ----------------------------------------------------------
    snr2 = sum((flux[b] ** 2) * ivar[b] for b in ("G", "R", "Z"))
    ext = np.clip(shape_r / fwhm["R"], 0, 1) * 0.3
    base = snr2
    dch = np.stack([base * (1 - ext), base * (1 - ext / 3), base * (1 - 0.02), base * (1 - 0.02), base * (1 - 0.01)], axis=1)
    best = np.minimum(np.where(typ == _DUP, _PSF, typ), 4)
    dch[np.arange(n), best] = base * (1 + 0.002)
    dch = np.where((typ == _DUP)[:, None], 0.0, dch)
    snr = np.sqrt(np.maximum(snr2, 1.0))
    pos_sig = np.sqrt((fwhm["R"] / 2.355) ** 2 + shape_r**2) / snr / 3600.0
    sig_fib = fwhm["R"] / 2.355
    fibfrac = (1 - np.exp(-0.5 * (0.75 / sig_fib) ** 2)) / (1 + (shape_r / 0.6) ** 1.2)

    ref_cat = np.zeros(n, dtype="S2")
    gaia_g = true_mag["R"] - 0.1 - 0.15 * gr
    is_gaia = (is_star | is_dup) & (gaia_g < 20.8)
    is_tycho = is_masker & (mkind == 0) & (mmag < 11.0)
    ref_cat = np.where(is_gaia, b"G3", ref_cat)
    ref_cat = np.where(is_tycho, b"T2", ref_cat)
    ref_cat = np.where(is_masker & (mkind == 2), b"L3", ref_cat)
    ref_id = np.where(is_gaia | is_tycho | (is_masker & (mkind == 2)), (rng.integers(1, 2**62, n)), -1).astype(np.int64)
    fitbits = np.zeros(n, dtype=np.int64)
    fitbits |= np.where(forced, 0x1, 0)
    fitbits |= np.where(typ == _SER, np.where(sersic >= 6.0, 0x8, 0), 0)
    fitbits |= np.where(in_bright, 0x20, 0) | np.where(in_medium & ~in_bright, 0x40, 0)
    fitbits |= np.where(is_gaia, 0x80 | 0x1000, 0) | np.where(is_tycho, 0x100, 0)
    fitbits |= np.where(is_masker & (mkind == 2), 0x200, 0)

    # --- write columns --------------------------------------------------------------------
    out["RELEASE"] = plan.release[sl]
    out["BRICKID"] = plan.brickid[sl]
    out["BRICKNAME"] = plan.brickname[sl]
    out["OBJID"] = plan.objid[sl]
    out["TYPE"] = TYPES[typ]
    out["RA"], out["DEC"] = ra, dec
    out["RA_IVAR"] = 1.0 / (pos_sig / np.cos(np.radians(dec))) ** 2
    out["DEC_IVAR"] = 1.0 / pos_sig**2
    out["DCHISQ"] = dch
    out["EBV"] = ebv
    for b in bands + sm.WISE:
        out[f"FLUX_{b}"] = flux[b]
        out[f"FLUX_IVAR_{b}"] = ivar[b]
        out[f"MW_TRANSMISSION_{b}"] = mw[b]
        out[f"RCHISQ_{b}"] = 1.0 + np.abs(rng.normal(0, 0.3, n)) + 0.02 * np.sqrt(snr2)
        out[f"FRACFLUX_{b}"] = rng.exponential(0.02, n) + np.where(in_medium, rng.exponential(0.2, n), 0)
    for b in sm.WISE:
        out[f"NOBS_{b}"] = np.rint(150 + 100 * _smooth_field(ra, dec, seed, f"nobs-{b}") + rng.normal(0, 5, n)).astype(np.int16)
    for b in bands:
        out[f"NOBS_{b}"] = nobs[b]
        out[f"FRACMASKED_{b}"] = np.where(in_bright | core, rng.uniform(0, 0.3, n), rng.exponential(0.002, n))
        out[f"FRACIN_{b}"] = rng.uniform(0.97, 1.0, n)
        out[f"ANYMASK_{b}"] = anymask[b]
        out[f"ALLMASK_{b}"] = allmask[b]
        out[f"PSFSIZE_{b}"] = np.where(nobs[b] > 0, fwhm[b], 0.0)
        out[f"PSFDEPTH_{b}"] = psfdepth[b]
        out[f"GALDEPTH_{b}"] = galdepth[b]
        out[f"FIBERFLUX_{b}"] = flux[b] * fibfrac
        out[f"FIBERTOTFLUX_{b}"] = flux[b] * fibfrac * (1 + rng.exponential(0.05, n))
    out["WISEMASK_W1"] = np.where(maskbits & MB["WISEM1"], 0x1, 0)
    out["WISEMASK_W2"] = np.where(maskbits & MB["WISEM2"], 0x1, 0)
    out["PSFDEPTH_W1"], out["PSFDEPTH_W2"] = ivar["W1"], ivar["W2"]
    out["WISE_COADD_ID"] = _unwise_tile(ra, dec)
    out["SHAPE_R"] = shape_r
    has_shape = shape_r > 0
    out["SHAPE_R_IVAR"] = np.where(has_shape, 0.5 * (snr / np.maximum(shape_r, 0.1)) ** 2, 0.0)
    out["SHAPE_E1"], out["SHAPE_E2"] = e1, e2
    out["SHAPE_E1_IVAR"] = np.where(has_shape, (0.5 * snr) ** 2, 0.0)
    out["SHAPE_E2_IVAR"] = np.where(has_shape, (0.5 * snr) ** 2, 0.0)
    out["REF_CAT"] = ref_cat
    out["REF_ID"] = ref_id
    out["REF_EPOCH"] = np.select([is_gaia, is_tycho], [2016.0, 2000.0], 0.0)
    g = np.where(is_gaia | is_tycho, gaia_g, 0.0)
    gsel = is_gaia | is_tycho
    out["GAIA_PHOT_G_MEAN_MAG"] = g
    out["GAIA_PHOT_G_MEAN_FLUX_OVER_ERROR"] = np.where(gsel, 10 ** (-0.2 * (g - 23.5)), 0.0)
    out["GAIA_PHOT_BP_MEAN_MAG"] = np.where(gsel, g + 0.25 + 0.4 * gr, 0.0)
    out["GAIA_PHOT_BP_MEAN_FLUX_OVER_ERROR"] = np.where(gsel, 10 ** (-0.2 * (g - 22.5)), 0.0)
    out["GAIA_PHOT_RP_MEAN_MAG"] = np.where(gsel, g - 0.45 - 0.3 * gr, 0.0)
    out["GAIA_PHOT_RP_MEAN_FLUX_OVER_ERROR"] = np.where(gsel, 10 ** (-0.2 * (g - 22.0)), 0.0)
    out["GAIA_ASTROMETRIC_EXCESS_NOISE"] = np.where(gsel, rng.exponential(0.1, n), 0.0)
    out["GAIA_DUPLICATED_SOURCE"] = np.where(gsel & (rng.uniform(size=n) < 0.01), ord("T"), ord("F"))
    out["GAIA_PHOT_BP_RP_EXCESS_FACTOR"] = np.where(gsel, 1.2 + rng.exponential(0.03, n), 0.0)
    out["GAIA_ASTROMETRIC_SIGMA5D_MAX"] = np.where(gsel, 0.05 * 10 ** (0.2 * (g - 15)), 0.0)
    out["GAIA_ASTROMETRIC_PARAMS_SOLVED"] = np.where(gsel, np.where(g < 20, 31, 3), 0)
    plx_err = np.where(gsel, 0.02 * 10 ** (0.2 * (g - 15)), 1.0)
    out["PARALLAX"] = np.where(gsel, np.abs(rng.normal(0.5, 0.5, n)) + plx_err * rng.standard_normal(n), 0.0)
    out["PARALLAX_IVAR"] = np.where(gsel, 1 / plx_err**2, 0.0)
    out["PMRA"] = np.where(gsel, rng.normal(0, 6, n), 0.0)
    out["PMDEC"] = np.where(gsel, rng.normal(-3, 6, n), 0.0)
    out["PMRA_IVAR"] = out["PARALLAX_IVAR"] * 0.8
    out["PMDEC_IVAR"] = out["PARALLAX_IVAR"] * 0.8
    out["MASKBITS"] = maskbits
    out["FITBITS"] = fitbits
    out["SERSIC"] = sersic
    out["SERSIC_IVAR"] = np.where(typ == _SER, (snr / np.maximum(sersic, 0.5)) ** 2 * 0.1, 0.0)


# ----------------------------------------------------------------------------------------------
# Writing


def _fits_headers(box: SweepBox, nrows: int) -> tuple[bytes, bytes]:
    """Primary and SWEEP extension headers (padded bytes) of a DR10 sweep with ``nrows`` rows."""
    primary = fits.PrimaryHDU()
    cols = [fits.Column(name=name, format=tform) for name, tform in sm.DR10_SWEEP_COLUMNS]
    ext = fits.BinTableHDU.from_columns(cols, nrows=0, name="SWEEP")
    hdr = ext.header
    hdr["NAXIS2"] = nrows
    for h in (primary.header, hdr):
        h["RAMIN"], h["RAMAX"], h["DECMIN"], h["DECMAX"] = box.ra_min, box.ra_max, box.dec_min, box.dec_max
        h["SURVEY"] = ("DHS-MOCK", "deterministic mock of DR10 south")
        h["MOCKVER"] = GENERATOR_VERSION
    if int(hdr["NAXIS1"]) != sm.DR10_SWEEP_DTYPE.itemsize:
        raise RuntimeError(f"FITS row size {hdr['NAXIS1']} != model row size {sm.DR10_SWEEP_DTYPE.itemsize}")
    return primary.header.tostring().encode("ascii"), hdr.tostring().encode("ascii")


def _write_block(path: Path, plan: _BlockPlan, maskers: _Maskers, lens_draw: dict, cfg: MockSurveyConfig) -> None:
    n = len(plan.ra)
    ph, eh = _fits_headers(plan.box, n)
    tmp = path.with_name(f"_staging-{secrets.token_hex(6)}-{path.name}")
    try:
        with open(tmp, "wb") as f:
            f.write(ph)
            f.write(eh)
            for c, start in enumerate(range(0, n, cfg.chunk_rows)):
                sl = slice(start, min(n, start + cfg.chunk_rows))
                rows = np.zeros(sl.stop - sl.start, dtype=sm.DR10_SWEEP_DTYPE)
                _fill_rows(rows, plan, sl, maskers, lens_draw, cfg, c)
                f.write(rows.tobytes())
            pad = (-n * sm.DR10_SWEEP_DTYPE.itemsize) % 2880
            f.write(b"\0" * pad)
        os.replace(tmp, path)
    except BaseException:
        if tmp.exists():
            tmp.unlink()
        raise


def _write_truth(path: Path, lenses: pa.Table, draw: dict, lens_oid: np.ndarray, lens_file: list[str]) -> None:
    cols = {
        "name": lenses.column("name"),
        "ra": lenses.column("ra"),
        "dec": lenses.column("dec"),
        "object_id": pa.array(lens_oid, pa.int64()),
        "sweep_file": pa.array(lens_file, pa.string()),
        "grade": lenses.column("grade"),
        "lens_type": pa.array(np.array(LENS_TYPES)[draw["type_code"].astype(int)].tolist(), pa.string()),
        "z_lens": pa.array(draw["z_lens"]),
        "z_lens_from_lenscat": pa.array(draw["z_from_cat"]),
    }
    for f in TRUTH_SCHEMA:
        if f.name not in cols:
            cols[f.name] = pa.array(draw[f.name], pa.float64())
    table = pa.table(cols).select(TRUTH_SCHEMA.names).cast(TRUTH_SCHEMA)
    tmp = path.with_name(f"_staging-{secrets.token_hex(6)}-{path.name}")
    try:
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, path)
    except BaseException:
        if tmp.exists():
            tmp.unlink()
        raise


def generate_mock_survey(root: str | os.PathLike, config: MockSurveyConfig | None = None) -> MockSurveyManifest:
    """Write the mock DR10 mirror under ``root`` (see module doc) and return its manifest.

    Idempotent: when ``<root>/mock_survey_manifest.json`` records the same config digest and all
    its files exist, nothing is rewritten. Every file is written to a temporary name and renamed
    into place; the manifest is written last, so an interrupted run is redone next time.
    """
    cfg = (config or MockSurveyConfig()).resolved()
    digest = cfg.digest()
    root = Path(root)
    manifest_path = root / MANIFEST_NAME
    if manifest_path.exists():
        try:
            existing = MockSurveyManifest.from_json(root, json.loads(manifest_path.read_text()))
        except (ValueError, KeyError, TypeError) as exc:
            raise InputError(f"{manifest_path}: unreadable mock survey manifest: {exc}") from exc
        if existing.digest == digest and all(p.exists() for p in existing.sweep_files + (existing.truth_path,)):
            return existing
    boxes = tuple(block_box(b) for b in cfg.blocks)
    lenses = known_lenses_in_footprint(boxes)
    draw = _lens_truth(lenses, cfg.seed)
    lens_ra = lenses.column("ra").to_numpy()
    lens_dec = lenses.column("dec").to_numpy()
    lens_oid = np.zeros(lenses.num_rows, dtype=np.int64)
    lens_file = [""] * lenses.num_rows
    sweep_dir = root / SWEEP_SUBDIR
    sweep_dir.mkdir(parents=True, exist_ok=True)
    (root / TRUTH_RELPATH).parent.mkdir(parents=True, exist_ok=True)
    files, nrows = [], []
    for box in boxes:
        maskers = _maskers(box, cfg.seed)
        plan = _plan_block(box, cfg, maskers, lens_ra, lens_dec)
        path = sweep_dir / sweep_filename(box)
        _write_block(path, plan, maskers, draw, cfg)
        sel = plan.role == 2
        lens_oid[plan.ref[sel]] = object_id(plan.release[sel], plan.brickid[sel], plan.objid[sel])
        for i in plan.ref[sel]:
            lens_file[int(i)] = path.name
        files.append(path)
        nrows.append(len(plan.ra))
    truth = root / TRUTH_RELPATH
    _write_truth(truth, lenses, draw, lens_oid, lens_file)
    manifest = MockSurveyManifest(root, tuple(files), truth, boxes, tuple(nrows), lenses.num_rows, digest)
    tmp = manifest_path.with_name(f"_staging-{secrets.token_hex(6)}-{MANIFEST_NAME}")
    tmp.write_text(json.dumps(manifest.to_json(), indent=2, sort_keys=True))
    os.replace(tmp, manifest_path)
    return manifest
