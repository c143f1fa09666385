"""Injection stage: the (θ_E, z_l) injection plan over held-out lens-like hosts and the injection
bank (one partition per batch): injected stamps with their paired controls and every parameter.

The ``injection_batch`` partitions are registered from the published plan by this stage's
``injection_batch_sensor`` (and by ``dhs`` after it materializes the plan), not by the plan itself.
"""

import dagster as dg
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from darkhaloscope.errors import InputError
from darkhaloscope.imaging.cutout_table import load_stamps
from darkhaloscope.lensing.bank import (
    InjectionConfig,
    bank_table,
    batch_of_key,
    injection_config,
    plan_injection_grid,
    plan_summary,
    render_injection_batch,
    selection_hosts,
)
from darkhaloscope.lensing.verify import lenstronomy_agreement, physics_problems
from darkhaloscope.search.grades import published_graded_lens_ids
from lakehouse import audits as au
from resources import ComputeResource, LakeResource
from table_registry import audits as checks
from table_registry.tables import CUTOUT_VALIDATION, CUTOUTS, INJECTION_BANK, INJECTION_PLAN, VISUAL_GRADES

from .shared.partitions import injection_batch_change
from .shared.publish import Publish, lake_asset

_GRID = InjectionConfig()


class InjectionPlanConfig(dg.Config):
    """Grid and host selection of the selection-function injections (defaults: θ_E 0.5–3.0″ step
    0.25″, z_l 0.1–0.9 step 0.1, hosts DEV/SER from the test split: train hosts carry the training
    injections and val hosts chose the best epoch, so only test hosts are unseen by the lens finder).
    ``realisation`` n > 0 draws every injection afresh (sources, lens parameters and which host
    gets which cell) for the same grid and hosts: the bank, its scores and the selection function
    follow, the lens finder does not, so the sampling noise of C(θ_E, z_l) can be seen."""

    theta_e_grid: list[float] = list(_GRID.theta_e_grid)
    z_l_grid: list[float] = list(_GRID.z_l_grid)
    host_types: list[str] = ["DEV", "SER"]
    host_splits: list[str] = ["test"]
    per_cell: int = 0  # 0 = the profile's default
    batch_size: int = 0
    realisation: int = 0


@lake_asset(
    INJECTION_PLAN,
    code_version="3",
    kinds={"parquet"},
    ins={"cutouts": dg.AssetIn(list(CUTOUTS.key))},
    deps=[dg.AssetKey(list(CUTOUT_VALIDATION.key)), dg.AssetKey(list(VISUAL_GRADES.key))],
)
def injection_plan(
    context: dg.AssetExecutionContext,
    config: InjectionPlanConfig,
    lake: LakeResource,
    compute: ComputeResource,
    cutouts: ds.Dataset,
) -> Publish:
    """One task per injection over the θ_E × z_l grid: host (a quality-checked DEV/SER cutout of the
    test split, so injections never share hosts with training or model selection, and never one
    that visual inspection graded a lens, as the held-out negatives never hold one), z_s from its
    prior, σ_v derived (cells needing an unphysical σ_v skipped and counted), every source and lens
    parameter and the seed; the grid itself is recorded with the plan (the selection function is
    measured on it)."""
    lenses = published_graded_lens_ids(lake.lake().table(*VISUAL_GRADES.key))
    hosts = selection_hosts(cutouts, config.host_types, lenses)
    if hosts.num_rows == 0:
        raise InputError(
            f"no quality-checked {config.host_types} hosts in the cutouts table ({lenses.size} graded lenses excluded)"
        )
    cfg = injection_config(
        compute.profile,
        config.per_cell,
        config.batch_size,
        config.theta_e_grid,
        config.z_l_grid,
        config.host_splits,
        config.realisation,
    )
    tasks = plan_injection_grid(hosts, cfg)
    md = {
        "plan": plan_summary(tasks),
        "realisation": config.realisation,
        "seed_salt": cfg.salt,
        "n_hosts": hosts.num_rows,
        "hosts_graded_lenses_excluded": int(lenses.size),
        "batches": len(set(tasks.column("batch").to_pylist())),
    }
    return Publish({INJECTION_PLAN: tasks}, metadata={INJECTION_PLAN: md})


@lake_asset(
    INJECTION_BANK,
    code_version="4",
    kinds={"pytorch", "parquet"},
    pool="gpu",
    ins={
        "injection_plan": dg.AssetIn(list(INJECTION_PLAN.key)),
        "cutouts": dg.AssetIn(list(CUTOUTS.key), partition_mapping=dg.AllPartitionMapping()),
    },
)
def injection_bank(
    context: dg.AssetExecutionContext,
    lake: LakeResource,
    compute: ComputeResource,
    injection_plan: pa.Table,
    cutouts: ds.Dataset,
) -> Publish:
    """Injected stamps (SIE + shear lensing a Sérsic source, Moffat PSF from the host's PSFSIZE,
    supersampling 4) and their paired controls (the same host without the arc) for one batch, with
    every parameter, μ, arc S/N, lensed magnitudes, PSF used and the seed. A tensor table: rendered
    on the compute device, staged, audited, then published."""
    key = context.partition_key
    tasks = injection_plan.filter(pc.equal(injection_plan.column("batch"), batch_of_key(key)))
    if tasks.num_rows == 0:
        raise InputError(f"injection batch {key} has no tasks in injection_plan")
    host_ids = tasks.column("host_object_id").to_numpy()
    (images, invvar), found = load_stamps(cutouts, host_ids, ("image", "invvar"))
    if not found.all():
        raise InputError(f"hosts {host_ids[~found][:5].tolist()} of batch {key} are not in the cutouts table")
    device = compute.torch_device()
    injected, _, params = render_injection_batch(tasks, images, invvar, device=device)
    bank = bank_table(tasks, params, injected, images)
    ok = params.column("success").to_numpy(zero_copy_only=False)
    mu = params.column("magnification").to_numpy(zero_copy_only=False)
    md = {"n_failed": int((~ok).sum()), "median_mu": float(np.nanmedian(mu)), "device": device}
    return Publish({INJECTION_BANK: bank}, audits={INJECTION_BANK: bank_audits(bank)}, metadata={INJECTION_BANK: md})


def bank_audits(bank: pa.Table) -> list[au.AuditOutcome]:
    """The injection bank's audits on one batch."""
    agreement = lenstronomy_agreement(bank)
    physics = physics_problems(bank)
    return [
        checks.INJECTION_MATCHES_LENSTRONOMY.outcome(
            agreement["ok"],
            agreement,
            f"re-rendered with lenstronomy: max pixel error {agreement['max_pixel_err_over_peak']:.3g} of peak, "
            f"flux error {agreement['flux_rel_err']:.3g} (cases: {len(agreement['cases'])})",
        ),
        checks.INJECTION_PHYSICS_VALID.outcome(physics["ok"], physics, "; ".join(physics["problems"])),
    ]


@dg.sensor(
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Registers one injection_batch partition per batch of the published injection_plan.",
)
def injection_batch_sensor(context: dg.SensorEvaluationContext, lake: LakeResource) -> dg.SensorResult:
    change = injection_batch_change(context.instance, lake.lake())
    return dg.SensorResult(
        dynamic_partitions_requests=change.requests(),
        skip_reason=None if change.requests() else "injection batches unchanged",
    )


injection_defs = dg.Definitions(assets=[injection_plan, injection_bank], sensors=[injection_batch_sensor])
