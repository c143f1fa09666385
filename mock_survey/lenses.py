"""Lenses of the embedded mock survey: the real lenscat lenses in the footprint, their lensing truth,
and the one code path that paints any lens truth (known or hidden) into the mock sky.

Known lenses. Every lenscat ``galaxy``-scale lens in the footprint (duplicates within 2″ merged)
gets a lens-galaxy row exactly at its lenscat position and a truth row. The lens galaxies are
SER/REX/DEV/EXP in the proportions of the DR10 lens candidates of Huang et al. (2021, ApJ 909, 27),
with LRG colours and the z-band counts of the field galaxies (so brightness alone does not tell a
lens from a field galaxy). The mass has the light's position angle (its Tractor shape converted
by ``tractor_to_engine_ellipticity``) and is rounder on average. Every lens (known or hidden) is
painted by the truth renderer (``mock_survey.truth_render``: lenstronomy EPL + multipoles + shear,
COSMOS / clumpy / Sérsic sources, PSFEx PSFs), not by the injection engine the finder trains on; its
draws (TRUTH_RENDER_FIELDS) are columns of the truth.

Truth units: angles arcsec, magnitudes AB, ellipticities in the lensing engine's convention (x East,
y North, lenstronomy's e1/e2). Every draw of a lens comes from ``rng_for(<key>, seed, <lens id>)``, so
the truth of a lens depends only on the seed and the lens.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from scipy.spatial import cKDTree

from darkhaloscope.errors import InputError
from darkhaloscope.lensing.sie import phi_q_from_ellipticity
from darkhaloscope.seeding import rng_for
from darkhaloscope.sky import chord_for_arcsec, unit_vectors
from darkhaloscope.survey.known_lenses import load_known_lenses

from .sky import MOCK_SKY_COLUMNS, MockSky, mock_sky_noise_key
from .truth_render import TRUTH_RENDER_FIELDS, TruthArcs, draw_truth_render, render_truth_arcs, truth_render_columns

#: lenscat entries closer than this (arcsec) are one lens (the first by name is kept).
DUPLICATE_LENS_ARCSEC = 2.0
#: Lens-galaxy Tractor types and their cumulative probabilities (Huang et al. 2021 candidates:
#: SER 61 %, REX 20 %, DEV 15 %, EXP 4 %).
LENS_TYPES = ("SER", "REX", "DEV", "EXP")
LENS_TYPE_CUMULATIVE = (0.61, 0.81, 0.96)
#: Draws are (low, width) pairs: value = low + width · u, u uniform in [0, 1).
#: Lens redshift when lenscat has none usable (lenscat's is used inside LENSCAT_Z_VALID).
LENS_Z_DRAW, LENSCAT_Z_VALID = (0.2, 0.5), (0.05, 1.5)
#: Source redshift: uniform in [max(Z_SOURCE_MIN, z_lens + Z_SOURCE_GAP), Z_SOURCE_MAX].
Z_SOURCE_MIN, Z_SOURCE_GAP, Z_SOURCE_MAX = 1.0, 0.3, 3.0
#: Einstein radius (arcsec) of the known lenses: galaxy-scale, resolved at DR10 seeing.
KNOWN_THETA_E_DRAW = (0.8, 1.7)
#: Lens-galaxy z magnitude = LENS_MAG_Z[0] + LENS_MAG_Z[1] · sqrt(u) (AB), the field galaxies' z-band
#: counts (CDF ∝ ((m − 16.9)/3.05)²) up to z = 19.95.
LENS_MAG_Z = (16.9, 3.05)
#: LRG colours redden with redshift: g − r ≈ 1.0 + 1.6 z, r − z ≈ 0.5 + 1.3 z (± 0.05), clipped.
LENS_GR, LENS_GR_CLIP = (1.0, 1.6), (1.2, 2.1)
LENS_RZ, LENS_RZ_CLIP = (0.5, 1.3), (0.7, 1.6)
LENS_COLOUR_SCATTER = 0.1
#: Lens-galaxy SHAPE_R (arcsec) and largest |e|; REX lenses are smaller and round.
LENS_SHAPE_R_DRAW, REX_LENS_SHAPE_R_DRAW, LENS_MAX_ELLIPTICITY = (0.6, 1.4), (0.3, 0.5), 0.3
#: Sérsic index of SER lens galaxies; REX, DEV, EXP have 1, 4, 1.
SER_LENS_INDEX_DRAW = (3.0, 2.5)
#: The mass is rounder than the light: |e_mass| = |e_light| · (low + width · u).
MASS_ROUNDNESS_DRAW = (0.6, 0.4)
#: External shear: Rayleigh-distributed |γ| with this scale, random angle.
SHEAR_RAYLEIGH_SIGMA = 0.03
#: Unlensed source r (AB) of the known lenses: 22.5–24 gives arcs of r ≈ 20.5–22.5 (LensPop's DES
#: sample, Collett 2015, has median 22.2).
KNOWN_SOURCE_MAG_DRAW = (22.5, 1.5)
#: Source half-light radius (arcsec), Sérsic index, largest |e|, g − r and r − z (AB, blue star-forming).
SOURCE_R_DRAW, SOURCE_N_DRAW, SOURCE_MAX_ELLIPTICITY = (0.1, 0.4), (0.5, 2.0), 0.4
SOURCE_GR_DRAW, SOURCE_RZ_DRAW = (0.05, 0.4), (0.0, 0.4)
#: Source position: INNER_FRACTION inside INNER_RADIUS · θ_E (inside the caustic: arcs and quads),
#: the rest out to θ_E.
SOURCE_INNER_FRACTION, SOURCE_INNER_RADIUS = 0.85, 0.4
#: Uniform draws per lens; each u[i] feeds one quantity (the functions below name their indices).
N_UNIFORMS = 24

#: Position, catalog row and lens-galaxy columns of every lens truth table.
LENS_ID_FIELDS = [
    pa.field("ra", pa.float64(), metadata={"unit": "deg", "description": "lens position (= catalog row)"}),
    pa.field("dec", pa.float64(), metadata={"unit": "deg"}),
    pa.field("object_id", pa.int64(), metadata={"description": "darkhaloscope.ids.object_id of the lens row"}),
    pa.field("sweep_file", pa.string(), metadata={"description": "sweep file holding the lens row"}),
    pa.field("lens_type", pa.string(), metadata={"description": "TYPE of the lens row (SER, REX, DEV or EXP)"}),
    pa.field("z_lens", pa.float64(), metadata={"description": "lens redshift"}),
]
#: The lensing truth shared by known and hidden lenses (what ``lens_arc_stamps`` paints).
LENSING_FIELDS = [
    pa.field("z_source", pa.float64(), metadata={"description": "source redshift, drawn in [max(1, z_lens+0.3), 3]"}),
    pa.field(
        "theta_e_arcsec",
        pa.float64(),
        metadata={"unit": "arcsec", "description": "Einstein radius of the EPL mass (lenstronomy convention)"},
    ),
    pa.field(
        "lens_e1",
        pa.float64(),
        metadata={"description": "mass ellipticity e1 (lenstronomy, x East, y North; same PA as the light)"},
    ),
    pa.field(
        "lens_e2",
        pa.float64(),
        metadata={"description": "mass ellipticity e2 (lenstronomy, x East, y North; same PA as the light)"},
    ),
    pa.field("shear_g1", pa.float64(), metadata={"description": "external shear gamma1"}),
    pa.field("shear_g2", pa.float64(), metadata={"description": "external shear gamma2"}),
    pa.field("source_mag_r", pa.float64(), metadata={"unit": "AB mag", "description": "unlensed source r magnitude"}),
    pa.field(
        "source_r_sersic_arcsec",
        pa.float64(),
        metadata={
            "unit": "arcsec",
            "description": "source half-light radius (Sersic R_sersic; a cosmos source is rescaled to it)",
        },
    ),
    pa.field("source_n_sersic", pa.float64(), metadata={"description": "source Sersic index"}),
    pa.field(
        "source_e1", pa.float64(), metadata={"description": "source ellipticity e1 (lenstronomy, x East, y North)"}
    ),
    pa.field(
        "source_e2", pa.float64(), metadata={"description": "source ellipticity e2 (lenstronomy, x East, y North)"}
    ),
    pa.field(
        "source_x_arcsec",
        pa.float64(),
        metadata={"unit": "arcsec", "description": "source offset from the lens towards East (+RA)"},
    ),
    pa.field(
        "source_y_arcsec",
        pa.float64(),
        metadata={"unit": "arcsec", "description": "source offset from the lens towards North (+Dec)"},
    ),
    pa.field("g_minus_r", pa.float64(), metadata={"unit": "mag", "description": "source g - r colour"}),
    pa.field("r_minus_z", pa.float64(), metadata={"unit": "mag", "description": "source r - z colour"}),
]
#: What a truth table records of each arc as the sky paints it (:func:`painted_arc_columns`).
PAINTED_ARC_FIELDS = [
    pa.field(
        "arc_snr",
        pa.float64(),
        metadata={
            "description": "r-band S/N of the noise-free arc (lensing.render.arc_snr, sky invvar at the lens; "
            "null off the sky's coverage)"
        },
    ),
    *(
        pa.field(
            f"arc_flux_{b}",
            pa.float64(),
            metadata={"unit": "nmgy", "description": f"total {b} flux of the painted arc (with its Poisson noise)"},
        )
        for b in "grz"
    ),
]
#: Truth of the known (lenscat) lenses: truth/known_lens_truth.parquet.
KNOWN_LENS_TRUTH_SCHEMA = pa.schema(
    [
        pa.field("name", pa.string(), metadata={"description": "lenscat name"}),
        *LENS_ID_FIELDS[:4],
        pa.field("grade", pa.string(), metadata={"description": "lenscat grading"}),
        LENS_ID_FIELDS[4],
        LENS_ID_FIELDS[5],
        pa.field("z_lens_from_lenscat", pa.bool_(), metadata={"description": "true when z_lens is lenscat's"}),
        *LENSING_FIELDS,
        *TRUTH_RENDER_FIELDS,
        *PAINTED_ARC_FIELDS,
    ]
)
#: Truth columns -> the injection engine's names, as the truth renderer reads them
#: (``truth_render.RENDER_INPUT_COLUMNS``).
TRUTH_TO_ENGINE = {
    "source_mag_r": "src_mag_r",
    "source_r_sersic_arcsec": "src_r_sersic_arcsec",
    "source_n_sersic": "src_n_sersic",
    "source_e1": "src_e1",
    "source_e2": "src_e2",
    "source_x_arcsec": "src_x_arcsec",
    "source_y_arcsec": "src_y_arcsec",
    "g_minus_r": "src_g_minus_r",
    "r_minus_z": "src_r_minus_z",
}


def known_lens_parameters(truth: pa.Table) -> pa.Table:
    """The known lenses' truth (KNOWN_LENS_TRUTH_SCHEMA) with their lens and source parameters under
    the injection engine's names, as the detection model reads them (``evaluation.detection``):
    ``z_l``, the axis ratios ``lens_q`` and ``src_q`` of the lenstronomy ellipticities
    (``lensing.sie.phi_q_from_ellipticity``), ``src_beta_frac`` (the source's offset over θ_E) and
    the TRUTH_TO_ENGINE renames."""
    out = truth.rename_columns([TRUTH_TO_ENGINE.get(c, c) for c in truth.column_names])

    def column(name: str) -> np.ndarray:
        return np.array(out.column(name).to_numpy(zero_copy_only=False), np.float64)  # a writable copy

    def axis_ratio(e1: str, e2: str) -> np.ndarray:
        return phi_q_from_ellipticity(column(e1), column(e2))[1].numpy()

    beta = np.hypot(column("src_x_arcsec"), column("src_y_arcsec")) / column("theta_e_arcsec")
    for name, values in (
        ("z_l", column("z_lens")),
        ("lens_q", axis_ratio("lens_e1", "lens_e2")),
        ("src_q", axis_ratio("src_e1", "src_e2")),
        ("src_beta_frac", beta),
    ):
        out = out.append_column(name, pa.array(values, pa.float64()))
    return out


def _draw(u: float, low_width: tuple[float, float]) -> float:
    return low_width[0] + low_width[1] * u


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
    pairs = cKDTree(v).query_pairs(chord_for_arcsec(DUPLICATE_LENS_ARCSEC), output_type="ndarray")
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


def draw_known_lenses(lenses: pa.Table, seed: int) -> dict[str, np.ndarray]:
    """Per-lens draws (lens galaxy light and the lensing truth) of the rows of ``lenses`` (name,
    z_lens), each from ``rng_for("mock-lens", seed, name)``: arrays keyed by truth column, plus the
    lens rows' light (mag_z, lens_gr, lens_rz, shape_r, shape_e1, shape_e2, sersic, type_code) and
    under ``render`` the truth renderer's draws (``truth_render.draw_truth_render``)."""
    names = lenses.column("name").to_pylist()
    zcat = lenses.column("z_lens").to_numpy(zero_copy_only=False).astype(np.float64)
    rows = []
    for i, name in enumerate(names):
        u = rng_for("mock-lens", seed, name).uniform(size=N_UNIFORMS)
        known = bool(np.isfinite(zcat[i]) and LENSCAT_Z_VALID[0] < zcat[i] < LENSCAT_Z_VALID[1])
        zl = zcat[i] if known else _draw(u[0], LENS_Z_DRAW)
        light = _lens_light(u, zl)
        row = {"z_from_cat": known, "z_lens": zl, **light}
        row.update(lensing_draws(u, zl, _draw(u[2], KNOWN_THETA_E_DRAW), light["e_light"], light["phi"]))
        row["source_mag_r"] = _draw(u[14], KNOWN_SOURCE_MAG_DRAW)
        rows.append(row)
    keys = [
        "z_lens",
        "mag_z",
        "lens_gr",
        "lens_rz",
        "shape_r",
        "shape_e1",
        "shape_e2",
        "sersic",
        "type_code",
        *(f.name for f in LENSING_FIELDS),
    ]
    out = {k: np.array([r[k] for r in rows], dtype=np.float64).reshape(len(rows)) for k in keys}
    out["z_from_cat"] = np.array([r["z_from_cat"] for r in rows], dtype=bool)
    out["render"] = draw_truth_render(names, seed, out["lens_e1"], out["lens_e2"])
    return out


def _lens_light(u: np.ndarray, zl: float) -> dict:
    """The known-lens galaxy's Tractor photometry and shape (uniforms u[3..10])."""
    code = int(np.searchsorted(LENS_TYPE_CUMULATIVE, u[9], side="right"))
    e_light, phi = LENS_MAX_ELLIPTICITY * u[7], np.pi * u[8]
    return {
        "mag_z": LENS_MAG_Z[0] + LENS_MAG_Z[1] * np.sqrt(u[3]),
        "lens_gr": np.clip(LENS_GR[0] + LENS_GR[1] * zl + LENS_COLOUR_SCATTER * (u[4] - 0.5), *LENS_GR_CLIP),
        "lens_rz": np.clip(LENS_RZ[0] + LENS_RZ[1] * zl + LENS_COLOUR_SCATTER * (u[5] - 0.5), *LENS_RZ_CLIP),
        "shape_r": _draw(u[6], REX_LENS_SHAPE_R_DRAW if LENS_TYPES[code] == "REX" else LENS_SHAPE_R_DRAW),
        "shape_e1": e_light * np.cos(2 * phi),
        "shape_e2": e_light * np.sin(2 * phi),
        "type_code": code,
        "sersic": (_draw(u[10], SER_LENS_INDEX_DRAW), 1.0, 4.0, 1.0)[code],
        "e_light": e_light,
        "phi": phi,
    }


def lensing_draws(u: np.ndarray, zl: float, theta_e: float, e_light: float, phi: float) -> dict:
    """The lensing truth (LENSING_FIELDS but ``source_mag_r``) of a lens of Einstein radius ``theta_e``
    (arcsec) whose light has Tractor |e| ``e_light`` at angle ``phi`` (rad), from uniforms u[1], u[11..23]."""
    zs_min = max(Z_SOURCE_MIN, zl + Z_SOURCE_GAP)
    e_mass = e_light * _draw(u[11], MASS_ROUNDNESS_DRAW)
    lens_e1, lens_e2 = tractor_to_engine_ellipticity(e_mass * np.cos(2 * phi), e_mass * np.sin(2 * phi))
    g = SHEAR_RAYLEIGH_SIGMA * np.sqrt(-2 * np.log(max(u[12], 1e-12)))
    es, ps = SOURCE_MAX_ELLIPTICITY * u[17], np.pi * u[18]
    inner = u[20] < SOURCE_INNER_FRACTION
    rad = theta_e * (
        SOURCE_INNER_RADIUS * np.sqrt(u[19]) if inner else SOURCE_INNER_RADIUS + (1 - SOURCE_INNER_RADIUS) * u[19]
    )
    return {
        "z_source": zs_min + (Z_SOURCE_MAX - zs_min) * u[1],
        "theta_e_arcsec": theta_e,
        "lens_e1": lens_e1,
        "lens_e2": lens_e2,
        "shear_g1": g * np.cos(2 * np.pi * u[13]),
        "shear_g2": g * np.sin(2 * np.pi * u[13]),
        "source_r_sersic_arcsec": _draw(u[15], SOURCE_R_DRAW),
        "source_n_sersic": _draw(u[16], SOURCE_N_DRAW),
        "source_e1": es * np.cos(2 * ps),
        "source_e2": es * np.sin(2 * ps),
        "source_x_arcsec": rad * np.cos(2 * np.pi * u[21]),
        "source_y_arcsec": rad * np.sin(2 * np.pi * u[21]),
        "g_minus_r": _draw(u[22], SOURCE_GR_DRAW),
        "r_minus_z": _draw(u[23], SOURCE_RZ_DRAW),
    }


def known_lens_truth_table(
    lenses: pa.Table, draw: dict, object_ids: np.ndarray, sweep_files: list[str], catalog: pa.Table
) -> pa.Table:
    """The known lenses' truth (KNOWN_LENS_TRUTH_SCHEMA) from ``draw_known_lenses``, the lens rows'
    keys, and their arcs as painted into the sky of ``catalog`` (the survey's sweep rows)."""
    cols = {
        "name": lenses.column("name"),
        "ra": lenses.column("ra"),
        "dec": lenses.column("dec"),
        "object_id": pa.array(object_ids, pa.int64()),
        "sweep_file": pa.array(sweep_files, pa.string()),
        "grade": lenses.column("grade"),
        "lens_type": pa.array(np.array(LENS_TYPES)[draw["type_code"].astype(int)].tolist(), pa.string()),
        "z_lens": pa.array(draw["z_lens"]),
        "z_lens_from_lenscat": pa.array(draw["z_from_cat"]),
    }
    for f in LENSING_FIELDS:
        cols[f.name] = pa.array(draw[f.name], pa.float64())
    cols.update(truth_render_columns(draw["render"], draw["theta_e_arcsec"]))
    cols.update(painted_arc_columns(pa.table(cols), catalog))
    return pa.table(cols).select(KNOWN_LENS_TRUTH_SCHEMA.names).cast(KNOWN_LENS_TRUTH_SCHEMA)


# ----------------------------------------------------------------------------------------------
# Painting lenses into the mock sky


def lens_catalog_rows(truth: pa.Table, catalog: pa.Table) -> pa.Table:
    """The catalog rows (by ``object_id``) of the truth's lens galaxies, in truth order.

    Raises InputError when a lens row is missing or elsewhere (more than 0.01″ away): the catalog
    is then not the survey the truth was generated with (e.g. a lake ingested from another seed).
    """
    idx = pc.index_in(truth.column("object_id"), value_set=catalog.column("object_id"))
    if idx.null_count:
        missing = truth.filter(pc.is_null(idx)).column("object_id").to_pylist()[:5]
        raise InputError(
            f"{idx.null_count} lens rows of the mock truth are not in the catalog (object_id {missing}); "
            "the sweeps are not those of this mock survey (another DHS_MOCK_SEED or profile?)"
        )
    rows = catalog.take(idx)
    sep = (
        np.hypot(
            (rows.column("ra").to_numpy() - truth.column("ra").to_numpy())
            * np.cos(np.radians(truth.column("dec").to_numpy())),
            rows.column("dec").to_numpy() - truth.column("dec").to_numpy(),
        )
        * 3600.0
    )
    if (sep > 0.01).any():
        i = int(np.argmax(sep))
        raise InputError(
            f'lens object_id {truth.column("object_id")[i].as_py()} is {sep[i]:.1f}" from its truth position; '
            "the sweeps are not those of this mock survey (another DHS_MOCK_SEED or profile?)"
        )
    return rows


def lens_arcs(truth: pa.Table, catalog: pa.Table) -> TruthArcs:
    """The arcs (N, 3, S, S) [nmgy/pixel] of the truth rows (object_id, ra, dec, the lensing truth —
    the known lenses' LENSING_FIELDS, or the injection engine's column names as the hidden lenses'
    truth carries them — and TRUTH_RENDER_FIELDS) as the truth renderer (``truth_render``, not the
    injection engine) draws them: the lens at pixel ((S−1)/2, (S−1)/2), at its lens row's PSFSIZE.
    The one path that paints a mock lens."""
    if truth.num_rows == 0:
        empty = np.zeros((0, 3, 0, 0), np.float32)
        return TruthArcs(stamps=empty, noise_free=empty)
    rows = lens_catalog_rows(truth, catalog)
    psf = np.stack([rows.column(f"psfsize_{b}").to_numpy(zero_copy_only=False) for b in "grz"], axis=1)
    if "src_mag_r" not in truth.column_names:  # the known lenses' truth names
        truth = truth.rename_columns([TRUTH_TO_ENGINE.get(c, c) for c in truth.column_names])
    return render_truth_arcs(truth, psf)


def painted_arc_columns(truth: pa.Table, catalog: pa.Table) -> dict[str, np.ndarray]:
    """PAINTED_ARC_FIELDS of the truth rows' arcs as :func:`lens_arcs` paints them: the r-band S/N of
    the noise-free arc (its expectation) against the sky's pixel noise at the lens (NaN where the sky
    has no coverage), and each band's flux [nmgy] of the painted arc (with its Poisson noise)."""
    import torch

    from darkhaloscope.lensing.render import arc_snr

    painted = lens_arcs(truth, catalog)
    rows = lens_catalog_rows(truth, catalog)
    invvar = MockSky(catalog.select(MOCK_SKY_COLUMNS)).pixel_invvar(
        rows.column("ra").to_numpy(), rows.column("dec").to_numpy()
    )
    arcs = torch.as_tensor(painted.noise_free.astype(np.float64))
    iv = torch.as_tensor(invvar, dtype=torch.float64)[:, :, None, None].expand_as(arcs).contiguous()
    snr = np.where((invvar > 0).all(axis=1), arc_snr(arcs, iv).numpy()[:, 1], np.nan)
    flux = painted.stamps.astype(np.float64).sum(axis=(-2, -1))
    return {"arc_snr": snr, **{f"arc_flux_{b}": flux[:, j] for j, b in enumerate("grz")}}


def lens_arc_stamps(truth: pa.Table, catalog: pa.Table) -> np.ndarray:
    """The painted arcs (:func:`lens_arcs`, with the arc's Poisson noise) (N, 3, S, S) float32 [nmgy/pixel]."""
    return lens_arcs(truth, catalog).stamps


def mock_sky_with_lenses(catalog: pa.Table, lens_truths: Sequence[pa.Table], seed: int, **sky_options) -> MockSky:
    """The mock sky of ``catalog`` (MOCK_SKY_COLUMNS, object_id, sweep_file) with the arcs of every
    table of ``lens_truths`` painted around their lens rows (those in the catalog's sweep files),
    and the pixel noise of mock seed ``seed``.
    ``sky_options``: further MockSky arguments (bricks, noise, tile_size, ...)."""
    missing = [c for c in (*MOCK_SKY_COLUMNS, "object_id", "sweep_file") if c not in catalog.column_names]
    if missing:
        raise InputError(f"mock sky catalog lacks columns {missing}")
    ingested = pc.unique(catalog.column("sweep_file"))
    extras = []
    for truth in lens_truths:
        # lenses of sweep files not in the catalog (not ingested) have no lens galaxy to paint around
        truth = truth.filter(pc.is_in(truth.column("sweep_file"), value_set=ingested))
        arcs = lens_arc_stamps(truth, catalog)
        ra, dec = truth.column("ra").to_numpy(), truth.column("dec").to_numpy()
        extras += [(float(ra[i]), float(dec[i]), arcs[i]) for i in range(truth.num_rows)]
    return MockSky(catalog.select(MOCK_SKY_COLUMNS), extra_stamps=extras, key=mock_sky_noise_key(seed), **sky_options)
