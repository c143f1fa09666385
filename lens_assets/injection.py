"""Injection stage: the (θ_E, z_l) injection plan over held-out lens-like hosts and the injection
bank (one partition per batch): injected stamps with their paired controls and every parameter.

The ``injection_batch`` partitions are registered from the published plan by
``injection_batch_sensor`` (and by ``dhs`` after it materializes the plan), not by the plan itself.
"""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import dagster as dg

from darkhaloscope import audits as au
from darkhaloscope.contracts import INJECTION_PLAN
from darkhaloscope.errors import InputError
from darkhaloscope.imaging.cutout_table import load_stamps
from darkhaloscope.lensing.bank import (
    HOST_COLUMNS as BANK_HOST_COLUMNS,
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
from resources import ComputeResource, LakeResource

from .common import OWNERS, as_metadata, check_specs, fail_fast_on_bad_input, gate
from .imaging import CUTOUTS_KEY, VALIDATION_KEY
from .partitions import injection_batches
from .training import VISUAL_GRADES

GROUP = "injection"
PLAN_KEY, BANK_KEY = (GROUP, "injection_plan"), (GROUP, "injection_bank")
_GRID = InjectionConfig()
#: Host columns of a plan (the training stage renders its injections into the same columns).
HOST_COLUMNS = list(BANK_HOST_COLUMNS)


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


@dg.asset(key=list(PLAN_KEY), group_name=GROUP, kinds={"parquet"}, owners=OWNERS, code_version="3",
          ins={"cutouts": dg.AssetIn(list(CUTOUTS_KEY))}, deps=[dg.AssetKey(list(VALIDATION_KEY)), VISUAL_GRADES],
          check_specs=check_specs(PLAN_KEY, (au.INJECTION_PLAN_CONTRACT,)))
def injection_plan(context: dg.AssetExecutionContext, config: InjectionPlanConfig, lake: LakeResource, compute: ComputeResource, cutouts: ds.Dataset):
    """One task per injection over the θ_E × z_l grid: host (a quality-checked DEV/SER cutout of the
    test split, so injections never share hosts with training or model selection, and never one
    that visual inspection graded a lens, as the held-out negatives never hold one), z_s from its
    prior, σ_v derived (cells needing an unphysical σ_v skipped and counted), every source and lens
    parameter and the seed; the grid itself is recorded with the plan (the selection function is
    measured on it)."""
    with fail_fast_on_bad_input():
        lenses = published_graded_lens_ids(lake.lake())
        hosts = selection_hosts(cutouts, config.host_types, lenses)
        if hosts.num_rows == 0:
            raise InputError(f"no quality-checked {config.host_types} hosts in the cutouts table ({lenses.size} graded lenses excluded)")
        cfg = injection_config(compute.profile, config.per_cell, config.batch_size, config.theta_e_grid, config.z_l_grid, config.host_splits,
                               config.realisation)
        tasks = plan_injection_grid(hosts, cfg)
    staged = lake.stage(context).table(*PLAN_KEY)
    staged.write(tasks)
    outcomes = [au.contract_audit(au.INJECTION_PLAN_CONTRACT, staged.read(), INJECTION_PLAN)]
    md = as_metadata({"plan": plan_summary(tasks), "realisation": config.realisation, "seed_salt": cfg.salt,
                      "n_hosts": hosts.num_rows, "hosts_graded_lenses_excluded": int(lenses.size),
                      "batches": len(set(tasks.column("batch").to_pylist()))})
    yield from gate(context, {PLAN_KEY: ([staged], outcomes)}, {PLAN_KEY: md})


@dg.asset(key=list(BANK_KEY), group_name=GROUP, partitions_def=injection_batches, kinds={"pytorch", "parquet"}, owners=OWNERS,
          code_version="4", pool="gpu",
          ins={"injection_plan": dg.AssetIn(list(PLAN_KEY)),
               "cutouts": dg.AssetIn(list(CUTOUTS_KEY), partition_mapping=dg.AllPartitionMapping())},
          check_specs=check_specs(BANK_KEY, (au.INJECTION_MATCHES_LENSTRONOMY, au.INJECTION_PHYSICS_VALID)))
def injection_bank(context: dg.AssetExecutionContext, lake: LakeResource, compute: ComputeResource, injection_plan: pa.Table, cutouts: ds.Dataset):
    """Injected stamps (SIE + shear lensing a Sérsic source, Moffat PSF from the host's PSFSIZE,
    supersampling 4) and their paired controls (the same host without the arc) for one batch, with
    every parameter, μ, arc S/N, lensed magnitudes, PSF used and the seed. A tensor table: rendered
    on the compute device and staged through the lake resource, audited, then published."""
    key = context.partition_key
    with fail_fast_on_bad_input():
        tasks = injection_plan.filter(pc.equal(injection_plan.column("batch"), batch_of_key(key)))
        if tasks.num_rows == 0:
            raise InputError(f"injection batch {key} has no tasks in injection_plan")
        host_ids = tasks.column("host_object_id").to_numpy()
        (images, invvar), found = load_stamps(cutouts, host_ids, ("image", "invvar"))
        if not found.all():
            raise InputError(f"hosts {host_ids[~found][:5].tolist()} of batch {key} are not in the cutouts table")
    device = compute.torch_device()
    injected, _, params = render_injection_batch(tasks, images, invvar, device=device)
    staged = lake.stage(context).table(*BANK_KEY, {"injection_batch": key})
    staged.write(bank_table(tasks, params, injected, images))
    outcomes = bank_audits(staged.read())
    ok = params.column("success").to_numpy(zero_copy_only=False)
    mu = params.column("magnification").to_numpy(zero_copy_only=False)
    md = {"n_failed": int((~ok).sum()), "median_mu": float(np.nanmedian(mu)), "device": device}
    yield from gate(context, {BANK_KEY: ([staged], outcomes)}, {BANK_KEY: md})


def bank_audits(bank: pa.Table) -> list[au.AuditOutcome]:
    """The injection bank's audits on one staged batch."""
    agreement = lenstronomy_agreement(bank)
    physics = physics_problems(bank)
    return [
        au.INJECTION_MATCHES_LENSTRONOMY.outcome(agreement["ok"], agreement,
                                                 f"re-rendered with lenstronomy: max pixel error {agreement['max_pixel_err_over_peak']:.3g} of peak, "
                                                 f"flux error {agreement['flux_rel_err']:.3g} (cases: {len(agreement['cases'])})"),
        au.INJECTION_PHYSICS_VALID.outcome(physics["ok"], physics, "; ".join(physics["problems"])),
    ]


injection_defs = dg.Definitions(assets=[injection_plan, injection_bank])
