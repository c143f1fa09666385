"""Hidden lenses of the embedded mock survey: lensed arcs painted around catalog galaxies that no lens
catalog lists. Their truth (HIDDEN_LENS_TRUTH_SCHEMA) is kept apart from everything a training asset
reads, so a survey-wide search can be scored on discoveries no part of the pipeline was tuned to.

Hosts are early-type galaxies (DEV, SER: lens galaxies are massive ellipticals) that the survey
search covers — the negative preselection of ``catalog.cuts`` (footprint, TYPE, NOBS, MASKBITS,
z < 20) — farther than that selection's known-lens exclusion radius (11″) from every lenscat entry,
HOST_SPACING_ARCSEC apart and HOST_EDGE_MARGIN_ARCSEC inside the footprint.

Truth. The lenses come from the mock's own deflector population: each host's lens redshift and σ_v
are its own (``mock_survey.redshifts``: its true redshift, its σ_v from the luminosity–σ relation with
its scatter), the source redshift is drawn as for the known lenses, and θ_E = θ_SIS(σ_v, z_l, z_s).
Among the eligible hosts whose θ_E lies in THETA_E_RANGE (the span of the injection grid), hosts are
drawn with probability ∝ θ_E² (the lensing cross-section; Efraimidis–Spirakis keys). The SIE mass
follows the host's light (its position angle, rounder), and the shear, source shape, position and
colours are drawn as for the known lenses (``mock_lenses.lensing_draws``). The source brightness is then set so
that the arc's S/N — ``lensing.render.arc_snr`` in r, the definition the injection engine reports,
against the mock sky's inverse variance at the host — hits a target drawn log-uniformly over
ARC_SNR_RANGE, stratified so that every part of the range gets its share. The truth records the
S/N and flux of the arc as painted.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from darkhaloscope.catalog.cuts import REQUIRED_COLUMNS, KnownLensIndex, NegativeSelectionConfig, cut_masks
from darkhaloscope.errors import InputError
from darkhaloscope.lensing.cosmology import theta_e_from_sigma_v
from darkhaloscope.lensing.render import arc_snr
from darkhaloscope.seeding import rng_for
from darkhaloscope.sky import chord_for_arcsec, unit_vectors

from .lenses import (
    LENS_ID_FIELDS,
    LENSING_FIELDS,
    N_UNIFORMS,
    Z_SOURCE_GAP,
    Z_SOURCE_MAX,
    Z_SOURCE_MIN,
    lens_arc_stamps,
    lensing_draws,
)
from .redshifts import galaxy_z_and_sigma
from .sky import MOCK_SKY_COLUMNS, MockSky

#: Tractor types of hidden-lens hosts.
HOST_TYPES = ("DEV", "SER")
#: Least separation (arcsec) between two hidden lenses, and from a hidden lens to the footprint's edge.
HOST_SPACING_ARCSEC, HOST_EDGE_MARGIN_ARCSEC = 60.0, 30.0
#: Einstein radii (arcsec) of the hidden lenses: the injection grid's span.
THETA_E_RANGE = (0.5, 3.0)
#: Arc S/N targets (r band, matched filter) are log-uniform over this range: from arcs no finder
#: can see to arcs every finder does.
ARC_SNR_RANGE = (1.5, 200.0)
#: Source r magnitude (AB) the S/N is first measured at; the target then scales the source flux.
REFERENCE_SOURCE_MAG = 23.0
#: Catalog columns the hidden lenses read.
HOST_COLUMNS = tuple(
    dict.fromkeys((*REQUIRED_COLUMNS, *MOCK_SKY_COLUMNS, "object_id", "mw_transmission_r", "mw_transmission_z"))
)

#: Truth of the hidden lenses: truth/hidden_lens_truth.parquet.
HIDDEN_LENS_TRUTH_SCHEMA = pa.schema(
    [
        *LENS_ID_FIELDS[:4],
        pa.field("lens_type", pa.string(), metadata={"description": "TYPE of the host row (DEV or SER)"}),
        LENS_ID_FIELDS[5],
        *LENSING_FIELDS,
        pa.field(
            "arc_snr",
            pa.float64(),
            metadata={"description": "r-band arc S/N as painted (lensing.render.arc_snr, sky invvar at the host)"},
        ),
        pa.field(
            "arc_flux_g", pa.float64(), metadata={"unit": "nmgy", "description": "total g flux of the painted arc"}
        ),
        pa.field(
            "arc_flux_r", pa.float64(), metadata={"unit": "nmgy", "description": "total r flux of the painted arc"}
        ),
        pa.field(
            "arc_flux_z", pa.float64(), metadata={"unit": "nmgy", "description": "total z flux of the painted arc"}
        ),
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
            f"with theta_E in {THETA_E_RANGE})"
        )
    return np.array(chosen, dtype=np.int64)


def draw_hidden_lenses(hosts: pa.Table, seed: int) -> pa.Table:
    """Lensing truth (LENS_ID_FIELDS, LENSING_FIELDS; source at REFERENCE_SOURCE_MAG) of lenses
    around ``hosts`` (catalog rows, HOST_COLUMNS): redshift, σ_v and θ_E from the mock's deflector
    population (:func:`deflector_draws`), the rest from ``rng_for("mock-hidden-lens", seed, object_id)``."""
    e1, e2 = hosts.column("shape_e1").to_numpy(), hosts.column("shape_e2").to_numpy()
    lens = deflector_draws(hosts, seed)
    rows = []
    for i in range(hosts.num_rows):
        u, zl = lens["u"][i], float(lens["z_lens"][i])
        phi = 0.5 * float(np.arctan2(e2[i], e1[i]))
        row = {"z_lens": zl, **lensing_draws(u, zl, float(lens["theta_e"][i]), float(np.hypot(e1[i], e2[i])), phi)}
        row["z_source"] = float(lens["z_source"][i])
        row["source_mag_r"] = REFERENCE_SOURCE_MAG
        rows.append(row)
    cols = {
        "ra": hosts.column("ra"),
        "dec": hosts.column("dec"),
        "object_id": hosts.column("object_id"),
        "sweep_file": hosts.column("sweep_file"),
        "lens_type": pc.utf8_trim_whitespace(hosts.column("type")),
    }
    for f in (LENS_ID_FIELDS[5], *LENSING_FIELDS):
        cols[f.name] = pa.array([float(r[f.name]) for r in rows], pa.float64())
    return pa.table(cols)


def target_arc_snr(n: int, seed: int) -> np.ndarray:
    """``n`` arc S/N targets, log-uniform over ARC_SNR_RANGE and stratified (one per 1/n of the log range)."""
    rng = rng_for("mock-hidden-snr", seed)
    lo, hi = np.log(ARC_SNR_RANGE[0]), np.log(ARC_SNR_RANGE[1])
    return np.exp(lo + (hi - lo) * (rng.permutation(n) + rng.uniform(size=n)) / max(n, 1))


def flux_scale_for_snr(arc_r: np.ndarray, invvar_r: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Factors k (N,) by which to scale each arc ``arc_r`` (N, S, S) [nmgy/pixel] so that its S/N
    (``arc_snr`` against the uniform ``invvar_r`` (N,) [1/nmgy²]) is ``target`` (N,): the
    matched-filter S/N is linear in the flux, so k = target / S/N(arc)."""
    arcs = torch.as_tensor(np.asarray(arc_r), dtype=torch.float64)[:, None]
    iv = torch.as_tensor(np.asarray(invvar_r), dtype=torch.float64)[:, None, None, None].expand_as(arcs).contiguous()
    snr = arc_snr(arcs, iv)[:, 0].numpy()
    if not np.all(snr > 0):
        raise InputError(
            f"hidden-lens arcs {np.flatnonzero(~(snr > 0)).tolist()} have no light where the sky has coverage"
        )
    return np.asarray(target, dtype=np.float64) / snr


def hidden_lens_truth(catalog: pa.Table, known_lenses: pa.Table, boxes, n: int, seed: int) -> pa.Table:
    """The truth (HIDDEN_LENS_TRUTH_SCHEMA) of ``n`` hidden lenses in ``catalog`` (the survey's
    sweep rows, HOST_COLUMNS), sorted by object_id; the arcs come from the painting path of the sky
    (``mock_lenses.lens_arc_stamps``)."""
    if n == 0:
        return HIDDEN_LENS_TRUTH_SCHEMA.empty_table()
    hosts = catalog.take(pa.array(hidden_lens_hosts(catalog, known_lenses, boxes, n, seed)))
    truth = draw_hidden_lenses(hosts, seed)
    invvar = MockSky(catalog.select(MOCK_SKY_COLUMNS)).pixel_invvar(
        hosts.column("ra").to_numpy(), hosts.column("dec").to_numpy()
    )
    if not (invvar > 0).all():
        raise InputError("a hidden-lens host lies where the mock sky has no coverage")
    # An arc is its PSF-convolved morphology times the source flux (lensing.render), so the arcs at
    # the chosen magnitudes are the reference arcs scaled, to float32 rounding.
    reference = lens_arc_stamps(truth, catalog).astype(np.float64)
    scale = flux_scale_for_snr(reference[:, 1], invvar[:, 1], target_arc_snr(n, seed))
    mags = REFERENCE_SOURCE_MAG - 2.5 * np.log10(scale)
    truth = truth.set_column(truth.schema.get_field_index("source_mag_r"), "source_mag_r", pa.array(mags))
    arcs = torch.as_tensor(reference * scale[:, None, None, None])
    iv = torch.as_tensor(invvar, dtype=torch.float64)[:, :, None, None].expand_as(arcs).contiguous()
    snr = arc_snr(arcs, iv).numpy()
    flux = arcs.sum(dim=(-2, -1)).numpy()
    truth = truth.append_column("arc_snr", pa.array(snr[:, 1]))
    for j, band in enumerate("grz"):
        truth = truth.append_column(f"arc_flux_{band}", pa.array(flux[:, j]))
    return truth.cast(HIDDEN_LENS_TRUTH_SCHEMA).sort_by("object_id")
