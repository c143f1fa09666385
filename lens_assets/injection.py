"""Injection stage: the (θ_E, z_l) injection plan over held-out lens-like hosts and the injection
bank (one partition per batch): injected stamps with their paired controls and every parameter."""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import dagster as dg
import torch

from darkhaloscope.errors import InputError
from darkhaloscope.lensing.bank import HOST_COLUMNS as BANK_HOST_COLUMNS
from darkhaloscope.lensing.bank import InjectionConfig, plan_injection_grid, plan_summary, render_injection_batch
from darkhaloscope.lensing.priors import DEFAULT_PRIORS
from darkhaloscope.lensing.render import RenderConfig, lenstronomy_reference
from darkhaloscope.psf import kernel_radius_pix, psf_kernels
from darkhaloscope.stamps import from_tensor_column, to_tensor_array
from resources import ComputeResource, LakeResource

from .common import OWNERS, as_metadata, fail_fast_on_bad_input, table_result
from .imaging import GROUP as IMAGING, cutout_validation, cutouts, load_stamps
from .partitions import injection_batches, sync_dynamic_partitions

GROUP = "injection"
HOST_COLUMNS = list(BANK_HOST_COLUMNS)
#: Injections per (θ_E, z_l) cell and per batch, by profile.
#: Flux bookkeeping tolerance: at most FLUX_TAIL_FRACTION of systems beyond FLUX_TOL, none beyond FLUX_TOL_MAX.
FLUX_TOL, FLUX_TAIL_FRACTION, FLUX_TOL_MAX = 0.02, 0.05, 0.10
PROFILE_SIZES = {"demo": {"per_cell": 12, "batch_size": 600}, "full": {"per_cell": 500, "batch_size": 4096}}


class InjectionPlanConfig(dg.Config):
    """Grid and host selection of the selection-function injections (defaults: θ_E 0.5–3.0″ step
    0.25″, z_l 0.1–0.9 step 0.1, hosts DEV/SER from the test split: train hosts carry the training
    injections and val hosts chose the best epoch, so only test hosts are unseen by the lens finder)."""

    theta_e_grid: list[float] = [0.5, 3.0, 0.25]
    z_l_grid: list[float] = [0.1, 0.9, 0.1]
    host_types: list[str] = ["DEV", "SER"]
    host_splits: list[str] = ["test"]
    per_cell: int = 0  # 0 = the profile's default
    batch_size: int = 0


def injection_config(profile: str, per_cell: int = 0, batch_size: int = 0, theta_e_grid=(0.5, 3.0, 0.25), z_l_grid=(0.1, 0.9, 0.1), host_splits=("test",)) -> InjectionConfig:
    sizes = PROFILE_SIZES.get(profile, PROFILE_SIZES["demo"])
    return InjectionConfig(
        theta_e_grid=tuple(theta_e_grid),
        z_l_grid=tuple(z_l_grid),
        per_cell=per_cell or sizes["per_cell"],
        batch_size=batch_size or sizes["batch_size"],
        host_splits=tuple(host_splits),
    )


def batch_key(batch: int) -> str:
    return f"batch-{batch:05d}"


@dg.asset(key_prefix=[GROUP], group_name=GROUP, deps=[cutouts, cutout_validation], kinds={"parquet"}, owners=OWNERS, code_version="1")
def injection_plan(context: dg.AssetExecutionContext, config: InjectionPlanConfig, lake: LakeResource, compute: ComputeResource) -> dg.MaterializeResult:
    """One task per injection over the θ_E × z_l grid: host (a quality-checked DEV/SER cutout of the
    test split, so injections never share hosts with training or model selection), z_s from its prior, σ_v derived
    (cells needing an unphysical σ_v skipped and counted), every source and lens parameter and the
    seed; registers one ``injection_batch`` partition per batch."""
    store = lake.lake()
    hosts = store.read_table(IMAGING, "cutouts", columns=HOST_COLUMNS + ["label", "quality_ok"])
    mask = pc.and_(pc.and_(pc.equal(hosts.column("label"), 0), hosts.column("quality_ok")), pc.is_in(hosts.column("type"), pa.array(config.host_types)))
    hosts = hosts.filter(mask).select(HOST_COLUMNS)
    with fail_fast_on_bad_input():
        if hosts.num_rows == 0:
            raise InputError(f"no quality-checked {config.host_types} hosts in the cutouts table")
        cfg = injection_config(compute.profile, config.per_cell, config.batch_size, config.theta_e_grid, config.z_l_grid, config.host_splits)
        tasks = plan_injection_grid(hosts, cfg)
    summary = plan_summary(tasks)
    info = store.write_table(GROUP, "injection_plan", tasks)
    keys = sorted({batch_key(int(b)) for b in tasks.column("batch").to_pylist()})
    sync_dynamic_partitions(context.instance, injection_batches, keys)
    return table_result(store, info.uri, tasks.schema, tasks.num_rows, {"plan": dg.MetadataValue.json(summary), "n_hosts": hosts.num_rows, "batches": len(keys)})


@dg.asset(
    key_prefix=[GROUP],
    group_name=GROUP,
    partitions_def=injection_batches,
    deps=[injection_plan],
    kinds={"pytorch", "parquet"},
    owners=OWNERS,
    code_version="1",
)
def injection_bank(context: dg.AssetExecutionContext, lake: LakeResource, compute: ComputeResource) -> dg.MaterializeResult:
    """Injected stamps (SIE + shear lensing a Sérsic source, Moffat PSF from the host's PSFSIZE,
    supersampling 4) and their paired controls (the same host without the arc) for one batch, with
    every parameter, μ, arc S/N, lensed magnitudes, PSF used and the seed."""
    store = lake.lake()
    batch = int(context.partition_key.split("-")[1])
    tasks = store.read_table(GROUP, "injection_plan", filter=pc.field("batch") == batch)
    with fail_fast_on_bad_input():
        if tasks.num_rows == 0:
            raise InputError(f"injection batch {context.partition_key} has no tasks in injection_plan")
        host_ids = tasks.column("host_object_id").to_numpy()
        (images, invvar), found = load_stamps(store, host_ids, ("image", "invvar"))
        if not found.all():
            raise InputError(f"hosts {host_ids[~found][:5].tolist()} of batch {context.partition_key} are not in the cutouts table")
    device = compute.torch_device()
    injected, arc, params = render_injection_batch(tasks, images, invvar, device=device)
    out = tasks
    for name in params.column_names:
        if name not in out.column_names:
            out = out.append_column(name, params.column(name))
    out = out.append_column("image", to_tensor_array(injected)).append_column("control", to_tensor_array(images))
    info = store.write_table(GROUP, "injection_bank", out, partition={"injection_batch": context.partition_key})
    ok = params.column("success").to_numpy(zero_copy_only=False)
    return table_result(
        store,
        info.uri,
        out.schema,
        out.num_rows,
        {"n_failed": int((~ok).sum()), "median_mu": float(np.nanmedian(params.column("magnification").to_numpy(zero_copy_only=False))), "device": device},
    )


def _bank(lake: LakeResource, partition_key: str, columns=None) -> pa.Table:
    return lake.lake().read_table(GROUP, "injection_bank", partition={"injection_batch": partition_key}, columns=columns)


@dg.asset_check(asset=injection_bank, blocking=True, partitions_def=injection_batches, description="a sample re-rendered with lenstronomy's ImageModel matches (pixels within 1% of peak, flux within 0.5%)")
def injection_matches_lenstronomy(context: dg.AssetCheckExecutionContext, lake: LakeResource) -> dg.AssetCheckResult:
    bank = _bank(lake, context.partition_key)
    ok = bank.filter(pc.field("success"))
    sample = ok.take(pa.array(np.linspace(0, ok.num_rows - 1, min(3, ok.num_rows)).astype(int))) if ok.num_rows else ok
    cfg = RenderConfig()
    worst_pix, worst_flux, cases = 0.0, 0.0, []
    arcs = from_tensor_column(sample.column("image")) - from_tensor_column(sample.column("control"))
    for i, row in enumerate(sample.drop_columns(["image", "control"]).to_pylist()):
        f = float(row["psf_fwhm_r"])
        kernel = psf_kernels(torch.tensor([f], dtype=torch.float64), kernel_radius_pix(f, cfg.pixel_scale, cfg.psf_n_fwhm), profile=cfg.psf_profile)[0].numpy()
        lens = dict(theta_e=row["theta_e_arcsec"], e1=row["lens_e1"], e2=row["lens_e2"], center_x=row["lens_center_x_arcsec"], center_y=row["lens_center_y_arcsec"], gamma1=row["shear_g1"], gamma2=row["shear_g2"])
        src = dict(r_sersic=row["src_r_sersic_arcsec"], n_sersic=row["src_n_sersic"], e1=row["src_e1"], e2=row["src_e2"], center_x=row["lens_center_x_arcsec"] + row["src_x_arcsec"], center_y=row["lens_center_y_arcsec"] + row["src_y_arcsec"])
        flux_r = 10 ** (-0.4 * (row["src_mag_r"] - 22.5))
        ref, _ = lenstronomy_reference(lens, src, f, flux_r, cfg, psf_kernel=kernel, with_mu=False)
        ours = arcs[i, 1].astype(np.float64)
        pix = float(np.abs(ours - ref).max() / ref.max())
        flux = float(abs(ours.sum() - ref.sum()) / ref.sum())
        worst_pix, worst_flux = max(worst_pix, pix), max(worst_flux, flux)
        cases.append({"injection_id": row["injection_id"], "max_pixel_err_over_peak": pix, "flux_rel_err": flux})
    return dg.AssetCheckResult(
        passed=bool(cases) and worst_pix <= 0.01 and worst_flux <= 0.005,
        metadata=as_metadata({"max_pixel_err_over_peak": worst_pix, "flux_rel_err": worst_flux, "cases": cases}),
    )


@dg.asset_check(asset=injection_bank, blocking=True, partitions_def=injection_batches, description="every prior-drawn parameter within its prior's range, μ >= 1, all pixels finite, arc flux in the stamp = source flux × μ")
def injection_physics_valid(context: dg.AssetCheckExecutionContext, lake: LakeResource) -> dg.AssetCheckResult:
    bank = _bank(lake, context.partition_key)
    problems = []
    checked = [name for name in DEFAULT_PRIORS.priors if name in bank.column_names]
    for name in checked:
        prior = DEFAULT_PRIORS[name]
        v = bank.column(name).to_numpy(zero_copy_only=False)
        bad = ~((v >= prior.lo - 1e-9) & (v <= prior.hi + 1e-9))
        if np.any(bad):
            problems.append(f"{name}: {int(bad.sum())} value(s) outside [{prior.lo}, {prior.hi}], e.g. {v[bad][:3].tolist()}")
    ok = bank.column("success").to_numpy(zero_copy_only=False)
    mu = bank.column("magnification").to_numpy(zero_copy_only=False)[ok]
    if np.any(~(mu >= 1.0 - 1e-3)):
        problems.append(f"magnification below 1: {np.sort(mu)[:3].tolist()}")
    img = from_tensor_column(bank.column("image"))
    if not np.isfinite(img).all():
        problems.append("non-finite pixels in injected stamps")
    # The arc measured in the stamp (injected image − control, r band) against the source flux × μ
    # recorded for it: independent of how the renderer normalised its own bookkeeping.
    arc_flux = (img - from_tensor_column(bank.column("control")))[ok, 1].sum(axis=(1, 2))
    src_flux = 10 ** (-0.4 * (bank.column("src_mag_r").to_numpy()[ok] - 22.5))
    rel = np.abs(arc_flux - src_flux * mu) / (src_flux * mu)
    # Poisson noise on faint arcs, pixelisation near the caustic and PSF light past the stamp edge
    # scatter single systems: bound the bulk and the tail
    if rel.size and (np.mean(rel > FLUX_TOL) > FLUX_TAIL_FRACTION or rel.max() > FLUX_TOL_MAX):
        problems.append(
            f"stamp arc flux vs source flux × μ: {np.mean(rel > FLUX_TOL):.1%} of rows beyond {FLUX_TOL:.0%} "
            f"(allowed {FLUX_TAIL_FRACTION:.0%}), worst {rel.max():.3g} (allowed {FLUX_TOL_MAX})"
        )
    return dg.AssetCheckResult(
        passed=not problems,
        metadata=as_metadata(
            {
                "problems": problems,
                "n_rows": bank.num_rows,
                "ranges_checked": checked,
                "median_rel_stamp_flux_err": float(np.median(rel)) if rel.size else 0.0,
                "max_rel_stamp_flux_err": float(rel.max()) if rel.size else 0.0,
            }
        ),
    )


injection_defs = dg.Definitions(assets=[injection_plan, injection_bank], asset_checks=[injection_matches_lenstronomy, injection_physics_valid])
