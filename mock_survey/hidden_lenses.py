"""Hidden lenses of the embedded mock survey: lensed arcs painted around catalog galaxies that no lens
catalog lists. Their truth (HIDDEN_LENS_TRUTH_SCHEMA) is kept apart from everything a training asset
reads, so a survey-wide search can be scored on discoveries no part of the pipeline was tuned to.

Hosts are early-type galaxies (DEV, SER: lens galaxies are massive ellipticals) that the survey
search covers — the preselection of ``catalog.cuts`` (footprint, TYPE, NOBS, MASKBITS, z < 20) —
farther than that selection's known-lens exclusion radius (11″) from every lenscat entry,
HOST_SPACING_ARCSEC apart, HOST_EDGE_MARGIN_ARCSEC inside the footprint, and **in the closure
reserve** (``catalog.reserve``): galaxies the pipeline never takes as a negative, so by construction
no hidden lens is a training negative, a negative a threshold is measured on, or an injection host.

Truth. The lenses come from the mock's own deflector population: each host's lens redshift and σ_v
are its own (``mock_survey.redshifts``: its true redshift, its σ_v from the luminosity–σ relation
with its scatter), the source redshift is drawn as for the known lenses, and θ_E = θ_SIS(σ_v, z_l,
z_s). Among the eligible hosts whose θ_E lies in THETA_E_RANGE (the span of the injection grid),
hosts are drawn with probability ∝ θ_E² (the lensing cross-section; Efraimidis–Spirakis keys). The
mass follows the host's light (its position angle, rounder, axis ratio in LENS_Q_RANGE as the
injections'), the shear is drawn as for the known lenses, and the source — unlensed magnitude, size,
profile, shape, position and colours — is drawn from the physical population
``darkhaloscope.evaluation.populations.MOCK_SOURCES`` (counts, a size–luminosity relation, sources
uniform in the source plane within θ_E), which the closure reweights the selection function to: λ
is known in the mock. The truth rows carry every ψ under the injection bank's column names, the
truth renderer's draws (``mock_survey.truth_render``: EPL slope, multipoles, source model; the
arcs are drawn by lenstronomy, not the injection engine), and the r-band S/N and the flux of the
arc as painted.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from darkhaloscope.catalog.cuts import REQUIRED_COLUMNS, KnownLensIndex, NegativeSelectionConfig, cut_masks
from darkhaloscope.catalog.reserve import closure_reserved
from darkhaloscope.errors import InputError
from darkhaloscope.evaluation.populations import MOCK_SOURCES
from darkhaloscope.lensing.bank import LENS_Q_RANGE
from darkhaloscope.lensing.cosmology import theta_e_from_sigma_v
from darkhaloscope.seeding import rng_for
from darkhaloscope.sky import chord_for_arcsec, unit_vectors

from .lenses import (
    LENS_ID_FIELDS,
    MASS_ROUNDNESS_DRAW,
    N_UNIFORMS,
    PAINTED_ARC_FIELDS,
    SHEAR_RAYLEIGH_SIGMA,
    Z_SOURCE_GAP,
    Z_SOURCE_MAX,
    Z_SOURCE_MIN,
    painted_arc_columns,
    tractor_to_engine_ellipticity,
)
from .redshifts import galaxy_z_and_sigma
from .sky import MOCK_SKY_COLUMNS
from .truth_render import TRUTH_RENDER_FIELDS, draw_truth_render, truth_render_columns

#: Tractor types of hidden-lens hosts.
HOST_TYPES = ("DEV", "SER")
#: Least separation (arcsec) between two hidden lenses, and from a hidden lens to the footprint's edge.
HOST_SPACING_ARCSEC, HOST_EDGE_MARGIN_ARCSEC = 60.0, 30.0
#: Einstein radii (arcsec) of the hidden lenses: the injection grid's span.
THETA_E_RANGE = (0.5, 3.0)
#: Catalog columns the hidden lenses read.
HOST_COLUMNS = tuple(
    dict.fromkeys((*REQUIRED_COLUMNS, *MOCK_SKY_COLUMNS, "object_id", "mw_transmission_r", "mw_transmission_z"))
)


def _f(name: str, unit: str, description: str) -> pa.Field:
    return pa.field(name, pa.float64(), metadata={"unit": unit, "description": description})


#: Truth of the hidden lenses: truth/hidden_lens_truth.parquet. ψ under the injection bank's names.
HIDDEN_LENS_TRUTH_SCHEMA = pa.schema(
    [
        *LENS_ID_FIELDS[:4],
        pa.field("lens_type", pa.string(), metadata={"description": "TYPE of the host row (DEV or SER)"}),
        _f("z_l", "", "lens redshift (the host's true redshift)"),
        _f("z_s", "", "source redshift, drawn in [max(1, z_l + 0.3), 3]"),
        _f("sigma_v_kms", "km/s", "the host's velocity dispersion (luminosity–σ relation with scatter)"),
        _f("theta_e_arcsec", "arcsec", "EPL Einstein radius θ_SIS(σ_v, z_l, z_s) (lenstronomy convention)"),
        _f("lens_q", "", "mass axis ratio (the light's, rounder)"),
        _f("lens_phi_rad", "rad", "mass position angle, engine frame (x East, y North)"),
        _f("lens_e1", "", "mass ellipticity e1 (lenstronomy, x East, y North)"),
        _f("lens_e2", "", "mass ellipticity e2 (lenstronomy, x East, y North)"),
        _f("shear_g1", "", "external shear gamma1"),
        _f("shear_g2", "", "external shear gamma2"),
        _f("src_mag_r", "AB mag", "unlensed source r magnitude (drawn: MOCK_SOURCES)"),
        _f(
            "src_r_sersic_arcsec",
            "arcsec",
            "source half-light radius (Sérsic R_sersic; a cosmos source is rescaled to it)",
        ),
        _f("src_n_sersic", "", "source Sérsic index"),
        _f("src_q", "", "source axis ratio"),
        _f("src_phi_rad", "rad", "source position angle, engine frame"),
        _f("src_e1", "", "source ellipticity e1 (lenstronomy, x East, y North)"),
        _f("src_e2", "", "source ellipticity e2 (lenstronomy, x East, y North)"),
        _f("src_beta_frac", "", "source offset from the lens centre in units of θ_E"),
        _f("src_beta_angle_rad", "rad", "angle of the source offset, engine frame"),
        _f("src_x_arcsec", "arcsec", "source offset from the lens towards East (+RA)"),
        _f("src_y_arcsec", "arcsec", "source offset from the lens towards North (+Dec)"),
        _f("src_g_minus_r", "mag", "source g - r colour"),
        _f("src_r_minus_z", "mag", "source r - z colour"),
        *TRUTH_RENDER_FIELDS,
        *PAINTED_ARC_FIELDS,
    ]
)


def deflector_draws(rows: pa.Table, seed: int) -> dict[str, np.ndarray]:
    """Each row's lens as the mock's deflector population makes it: ``z_lens`` (its true redshift),
    ``z_source`` (drawn from the row's hidden-lens uniforms u[1] as for the known lenses), ``sigma_v``
    (km/s) and ``theta_e`` (arcsec, NaN where the row has no σ_v), and the row's uniforms ``u``."""
    truth = galaxy_z_and_sigma(rows, seed)
    u = np.array([rng_for("mock-hidden-lens", seed, int(o)).uniform(size=N_UNIFORMS) for o in truth["ids"]])
    u = u.reshape(len(truth["ids"]), N_UNIFORMS)
    zl = truth["z"]
    zs_min = np.maximum(Z_SOURCE_MIN, zl + Z_SOURCE_GAP)
    zs = zs_min + (Z_SOURCE_MAX - zs_min) * u[:, 1]
    sigma = 10 ** truth["log_sigma"]
    theta = np.full(len(zl), np.nan)
    ok = np.isfinite(sigma)
    theta[ok] = theta_e_from_sigma_v(sigma[ok], zl[ok], zs[ok])
    return {"z_lens": zl, "z_source": zs, "sigma_v": sigma, "theta_e": theta, "u": u}


def hidden_lens_hosts(catalog: pa.Table, known_lenses: pa.Table, boxes, n: int, seed: int) -> np.ndarray:
    """Indices into ``catalog`` (HOST_COLUMNS) of ``n`` hidden-lens hosts (see the module doc), in
    the order they were drawn; ``known_lenses``: every lenscat entry (ra, dec), ``boxes``: the footprint."""
    config = NegativeSelectionConfig()
    ok = np.logical_and.reduce(list(cut_masks(catalog, config).values()))
    ok &= pc.is_in(pc.utf8_trim_whitespace(catalog.column("type")), value_set=pa.array(HOST_TYPES)).to_numpy(
        zero_copy_only=False
    )
    ok &= closure_reserved(catalog.column("object_id").to_numpy(), config.closure_reserve_fraction)
    ra, dec = catalog.column("ra").to_numpy(), catalog.column("dec").to_numpy()
    ok &= ~KnownLensIndex.from_table(known_lenses).within(ra, dec, config.exclusion_radius_arcsec)
    margin = HOST_EDGE_MARGIN_ARCSEC / 3600.0
    inside = np.zeros(len(ra), dtype=bool)
    for b in boxes:
        dra = margin / np.cos(np.radians(dec))
        inside |= (
            (ra > b.ra_min + dra) & (ra < b.ra_max - dra) & (dec > b.dec_min + margin) & (dec < b.dec_max - margin)
        )
    candidates = np.flatnonzero(ok & inside)
    candidates = candidates[np.argsort(catalog.column("object_id").to_numpy()[candidates], kind="stable")]
    theta = deflector_draws(catalog.take(pa.array(candidates)), seed)["theta_e"]
    lo, hi = THETA_E_RANGE
    keep = np.isfinite(theta) & (theta >= lo) & (theta <= hi)
    candidates, theta = candidates[keep], theta[keep]
    # weighted sampling without replacement by Efraimidis–Spirakis keys: ascending -ln(u) / θ_E²
    keys = -np.log(np.clip(rng_for("mock-hidden-hosts", seed).uniform(size=len(candidates)), 1e-300, 1.0)) / theta**2
    order = candidates[np.argsort(keys, kind="stable")]
    chosen: list[int] = []
    spacing = chord_for_arcsec(HOST_SPACING_ARCSEC)
    xyz = unit_vectors(ra, dec).reshape(-1, 3)
    for i in order:
        if len(chosen) == n:
            break
        if not chosen or np.min(np.linalg.norm(xyz[chosen] - xyz[i], axis=1)) >= spacing:
            chosen.append(int(i))
    if len(chosen) < n:
        raise InputError(
            f"only {len(chosen)} of the {n} hidden lenses fit the mock catalog ({len(candidates)} eligible hosts "
            f"in the closure reserve with theta_E in {THETA_E_RANGE})"
        )
    return np.array(chosen, dtype=np.int64)


def draw_hidden_lenses(hosts: pa.Table, seed: int) -> pa.Table:
    """The lensing truth (HIDDEN_LENS_TRUTH_SCHEMA but the painted arc's columns) of lenses around
    ``hosts`` (catalog rows, HOST_COLUMNS): redshift, σ_v and θ_E from the mock's deflector population
    (:func:`deflector_draws`), the mass's shape from the host's light and the shear from the row's
    uniforms ``rng_for("mock-hidden-lens", seed, object_id)``, the source from MOCK_SOURCES with
    ``rng_for("mock-hidden-source", seed, object_id)``, the truth renderer's (source model, slope,
    multipoles) with ``truth_render.draw_truth_render``."""
    lens = deflector_draws(hosts, seed)
    u = lens["u"]
    e1, e2 = hosts.column("shape_e1").to_numpy(), hosts.column("shape_e2").to_numpy()
    phi_light = 0.5 * np.arctan2(e2, e1)
    e_mass = np.hypot(e1, e2) * (MASS_ROUNDNESS_DRAW[0] + MASS_ROUNDNESS_DRAW[1] * u[:, 11])
    q = np.clip((1.0 - e_mass) / (1.0 + e_mass), *LENS_Q_RANGE)
    e_mass = (1.0 - q) / (1.0 + q)
    lens_e1, lens_e2 = tractor_to_engine_ellipticity(e_mass * np.cos(2 * phi_light), e_mass * np.sin(2 * phi_light))
    g = SHEAR_RAYLEIGH_SIGMA * np.sqrt(-2 * np.log(np.maximum(u[:, 12], 1e-12)))
    ids = hosts.column("object_id").to_numpy()
    src = MOCK_SOURCES.draw(np.array([rng_for("mock-hidden-source", seed, int(o)).uniform(size=9) for o in ids]))
    src_e = (1.0 - src["src_q"]) / (1.0 + src["src_q"])
    beta = src["src_beta_frac"] * lens["theta_e"]
    cols = {
        "ra": hosts.column("ra"),
        "dec": hosts.column("dec"),
        "object_id": hosts.column("object_id"),
        "sweep_file": hosts.column("sweep_file"),
        "lens_type": pc.utf8_trim_whitespace(hosts.column("type")),
        "z_l": lens["z_lens"],
        "z_s": lens["z_source"],
        "sigma_v_kms": lens["sigma_v"],
        "theta_e_arcsec": lens["theta_e"],
        "lens_q": q,
        "lens_phi_rad": np.mod(0.5 * np.arctan2(lens_e2, lens_e1), np.pi),
        "lens_e1": lens_e1,
        "lens_e2": lens_e2,
        "shear_g1": g * np.cos(2 * np.pi * u[:, 13]),
        "shear_g2": g * np.sin(2 * np.pi * u[:, 13]),
        **{k: src[k] for k in ("src_mag_r", "src_r_sersic_arcsec", "src_n_sersic", "src_q", "src_phi_rad")},
        "src_e1": src_e * np.cos(2 * src["src_phi_rad"]),
        "src_e2": src_e * np.sin(2 * src["src_phi_rad"]),
        "src_beta_frac": src["src_beta_frac"],
        "src_beta_angle_rad": src["src_beta_angle_rad"],
        "src_x_arcsec": beta * np.cos(src["src_beta_angle_rad"]),
        "src_y_arcsec": beta * np.sin(src["src_beta_angle_rad"]),
        "src_g_minus_r": src["src_g_minus_r"],
        "src_r_minus_z": src["src_r_minus_z"],
        **truth_render_columns(draw_truth_render(ids.tolist(), seed, lens_e1, lens_e2), lens["theta_e"]),
    }
    return pa.table(cols)


def hidden_lens_truth(catalog: pa.Table, known_lenses: pa.Table, boxes, n: int, seed: int) -> pa.Table:
    """The truth (HIDDEN_LENS_TRUTH_SCHEMA) of ``n`` hidden lenses in ``catalog`` (the survey's
    sweep rows, HOST_COLUMNS), sorted by object_id, with the S/N and flux of each arc as the sky's
    painting path (``mock_survey.lenses.lens_arcs``) paints it (the S/N without the arc's Poisson noise)."""
    if n == 0:
        return HIDDEN_LENS_TRUTH_SCHEMA.empty_table()
    hosts = catalog.take(pa.array(hidden_lens_hosts(catalog, known_lenses, boxes, n, seed)))
    truth = draw_hidden_lenses(hosts, seed)
    arcs = painted_arc_columns(truth, catalog)
    if not np.isfinite(arcs["arc_snr"]).all():
        raise InputError("a hidden-lens host lies where the mock sky has no coverage")
    for name, values in arcs.items():
        truth = truth.append_column(name, pa.array(values))
    return truth.cast(HIDDEN_LENS_TRUTH_SCHEMA).sort_by("object_id")
