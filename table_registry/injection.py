"""The injection stage's tables (``lens_assets/injection.py``): each with its contract and audits."""

from __future__ import annotations

import pyarrow as pa

from lake_platform.audits import Audit
from lake_platform.contracts import Column, Contract, Range

from .columns import ARCSEC, BANDS, BOOL, DEG, F64, I64, MAG, NMGY, PIX, RAD, SPLITS, STR, col, optional
from .table import Table

#: Partition dimension of the injection bank and its scores (one partition per batch of the plan).
INJECTION_BATCH_DIM = "injection_batch"

#: One injection: its task (the plan) and what the bank adds when it renders it.
INJECTION_TASK = (
    Column("injection_id", I64, "", "identifier of the injection: batch × batch size + index_in_batch"),
    Column("batch", pa.int32(), "", "batch of the plan (the injection_batch partition of the bank)"),
    Column("index_in_batch", pa.int32(), "", "position in its batch"),
    Column("seed", I64, "", "seed of the injection's random draws (a stable hash of its key)"),
    Column("profile", STR, "", "the profile that planned it (demo or full)"),
    Column("cell_id", pa.int32(), "", "(θ_E, z_l) cell of the grid"),
    col("host_object_id", I64),
    Column("host_ra", F64, DEG, "right ascension of the host"),
    Column("host_dec", F64, DEG, "declination of the host"),
    Column("host_split", STR, "", "split of the host (test: the selection function uses held-out hosts)"),
    Column("host_type", STR, "", "Tractor type of the host"),
    col("theta_e_arcsec", F64),
    col("z_l", F64),
    col("z_s", F64),
    col("sigma_v_kms", F64),
    col("z_l_bin", F64),
    col("host_z", F64),
    col("host_z_source", STR),
    col("sigma_v_source", STR),
    col("lens_mag_z", F64),
    Column("host_log_sigma_mu", F64, "dex(km/s)", "mean of the host's log-normal σ_v: its VDISP, else the relation's"),
    Column("host_log_sigma_sd", F64, "dex", "sd of the host's log-normal σ_v (VDISP_ERR, else the relation's scatter)"),
    Column("lens_q_offset", F64, "", "drawn offset of the SIE's axis ratio from the host light's"),
    Column("lens_phi_offset_rad", F64, RAD, "drawn offset of the SIE's position angle from the host light's"),
    Column("lens_q", F64, "", "axis ratio of the SIE"),
    Column("lens_phi_rad", F64, RAD, "position angle of the SIE"),
    Column("lens_e1", F64, "", "ellipticity e1 of the SIE (lenstronomy's convention)"),
    Column("lens_e2", F64, "", "ellipticity e2 of the SIE"),
    Column("host_dx_pix", F64, PIX, "sub-pixel offset of the host in its stamp along x"),
    Column("host_dy_pix", F64, PIX, "sub-pixel offset of the host in its stamp along y"),
    Column("lens_offset_x_arcsec", F64, ARCSEC, "mass centre relative to the host's light centre, East"),
    Column("lens_offset_y_arcsec", F64, ARCSEC, "mass centre relative to the host's light centre, North"),
    Column("lens_center_x_arcsec", F64, ARCSEC, "mass centre relative to the stamp's centre pixel, East"),
    Column("lens_center_y_arcsec", F64, ARCSEC, "mass centre relative to the stamp's centre pixel, North"),
    Column("shear_g1", F64, "", "external shear component γ1"),
    Column("shear_g2", F64, "", "external shear component γ2"),
    col("src_mag_r", F64),
    Column("src_g_minus_r", F64, MAG, "source colour g − r"),
    Column("src_r_minus_z", F64, MAG, "source colour r − z"),
    Column("src_r_sersic_arcsec", F64, ARCSEC, "half-light radius of the Sérsic source"),
    Column("src_n_sersic", F64, "", "Sérsic index of the source"),
    Column("src_q", F64, "", "axis ratio of the source"),
    Column("src_phi_rad", F64, RAD, "position angle of the source"),
    Column("src_e1", F64, "", "ellipticity e1 of the source"),
    Column("src_e2", F64, "", "ellipticity e2 of the source"),
    Column("src_beta_frac", F64, "", "source offset from the lens centre in units of θ_E"),
    Column("src_x_arcsec", F64, ARCSEC, "source position relative to the lens centre, East"),
    Column("src_y_arcsec", F64, ARCSEC, "source position relative to the lens centre, North"),
    *(col(f"psf_fwhm_{b}", F64) for b in BANDS),
    *(col(f"psfdepth_{b}", F64) for b in BANDS),
)

_TASK_RULES = (
    Range("batch", 0, None),
    Range("theta_e_arcsec", 0.0, None, lo_inclusive=False),
    Range("z_l", 0.0, None, lo_inclusive=False),
    Range("z_s", 0.0, None, lo_inclusive=False),
    Range("sigma_v_kms", 0.0, None, lo_inclusive=False),
)

_TASK_VALUES = {
    "host_split": SPLITS,
    "host_z_source": ("spec", "phot"),
    "sigma_v_source": ("measured", "relation"),
}

INJECTION_PLAN_CONTRACT = Audit(
    "injection_plan_contract", "unique injection ids, grid values and seeds present, batches assigned"
)

INJECTION_PLAN = Table(
    "injection",
    "injection_plan",
    "one task per injection over the (θ_E, z_l) grid, with its host and parameters",
    Contract(
        table="injection_plan",
        columns=optional(
            INJECTION_TASK,
            "injection_id",
            "batch",
            "seed",
            "host_object_id",
            "theta_e_arcsec",
            "z_l",
            "z_s",
            "sigma_v_kms",
            "z_l_bin",
            "host_z",
            "host_z_source",
            "sigma_v_source",
            "lens_mag_z",
        ),
        key=("injection_id",),
        ranges=_TASK_RULES,
        allowed_values=_TASK_VALUES,
    ),
    None,
    (INJECTION_PLAN_CONTRACT,),
)

INJECTION_MATCHES_LENSTRONOMY = Audit(
    "injection_matches_lenstronomy",
    "a sample re-rendered with lenstronomy's ImageModel matches (pixels within 1% of peak, flux within 0.5%)",
)

INJECTION_PHYSICS_VALID = Audit(
    "injection_physics_valid",
    "every prior-drawn parameter within its prior's range, μ >= 1, all pixels finite, arc flux in the stamp = source "
    "flux × μ",
)

INJECTION_HOSTS_IN_BIN = Audit(
    "injection_hosts_in_bin",
    "every injection's host redshift (its z_l) lies in the z_l bin of its cell (z_l_bin ± half the grid step)",
)

#: The injection bank has no blocking contract audit (its audits check the physics); its columns
#: are declared for the reference and the UI.
INJECTION_BANK = Table(
    "injection",
    "injection_bank",
    "every parameter of each injection (no stamps: the bank is rendered and scored in one pass), one partition "
    "per batch",
    Contract(
        table="injection_bank",
        columns=optional(
            (
                *INJECTION_TASK,
                col("success", BOOL),
                col("failure_reason", STR),
                col("magnification", F64),
                col("arc_snr", F64),
                *(Column(f"arc_snr_{b}", F64, "", f"matched-filter S/N of the arc in {b}") for b in BANDS),
                *(Column(f"lensed_mag_{b}", F64, MAG, f"magnitude of the lensed arc in {b}") for b in BANDS),
                Column("n_refined_pixels", pa.int32(), "", "pixels the adaptive supersampling refined"),
                *(
                    Column(f"arc_flux_{b}", F64, NMGY, f"flux of the rendered arc in {b}, its pixels summed")
                    for b in BANDS
                ),
                Column("arc_pixels_finite", BOOL, "", "every pixel of the rendered arc is finite"),
            )
        ),
        key=("injection_id",),
    ),
    INJECTION_BATCH_DIM,
    (INJECTION_MATCHES_LENSTRONOMY, INJECTION_PHYSICS_VALID, INJECTION_HOSTS_IN_BIN),
)

#: The injection stage's tables, in the order of the pipeline.
TABLES: tuple[Table, ...] = (
    INJECTION_PLAN,
    INJECTION_BANK,
)
