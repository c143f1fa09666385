"""Injection stage: the (θ_E, z_l) injection plan over held-out lens-like hosts, and per batch the
injection bank (every parameter of each injection, no stamps) with the lens finder's scores of the
injections and their paired controls, rendered and scored in one streamed pass.

The ``injection_batch`` partitions are registered from the published plan by this stage's
``injection_batch_sensor`` (and by ``dhs`` after it materializes the plan), not by the plan itself.
"""

import dagster as dg
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from darkhaloscope.errors import InputError
from darkhaloscope.evaluation.injection_scoring import host_stamps, render_and_score
from darkhaloscope.evaluation.scoring import published_lens_finder
from darkhaloscope.lensing.bank import (
    HOST_DERIVED,
    InjectionConfig,
    bank_table,
    batch_of_key,
    hosts_outside_bins,
    injection_config,
    plan_grid,
    plan_injection_grid,
    plan_proposal,
    plan_summary,
    render_injection_batch,
    selection_conditioning,
    selection_hosts,
    with_conditioning,
)
from darkhaloscope.lensing.hosts import HOST_ROW_COLUMNS, calibrate_sigma_relation, host_lens_properties
from darkhaloscope.lensing.priors import PriorRegistry
from darkhaloscope.lensing.verify import lenstronomy_agreement, physics_problems
from darkhaloscope.search.grades import published_graded_lens_ids
from lake_platform import audits as au
from resources import ComputeResource, LakeResource
from table_registry import (
    CUTOUT_VALIDATION,
    CUTOUTS,
    INJECTION_BANK,
    INJECTION_PLAN,
    INJECTION_SCORES,
    LENS_FINDER,
    PHOTO_Z,
    SPECTRA,
    SWEEPS,
    VISUAL_GRADES,
)
from table_registry import evaluation as evaluation_checks
from table_registry import injection as checks

from .shared.partitions import injection_batch_change
from .shared.progress import report_progress
from .shared.publish import Publish, lake_asset, staged_table
from .shared.scores import score_outcomes, write_scores

_GRID = InjectionConfig()


class InjectionPlanConfig(dg.Config):
    """Grid and host selection of the selection-function injections (defaults: θ_E 0.5–3.0″ step
    0.25″, z_l 0.1–0.9 step 0.1, hosts DEV/SER from the test split: train hosts carry the training
    injections and val hosts chose the best epoch, so only test hosts are unseen by the lens finder).
    ``realisation`` n > 0 draws every injection afresh (sources, lens parameters and which host
    gets which cell) for the same grid and hosts: the bank, its scores and the selection function
    follow, the lens finder does not, so the sampling noise of C(θ_E, z_l) can be seen.
    ``min_hosts_per_cell``: a z_l bin with fewer hosts leaves its cells insufficient (0: the default, 3)."""

    theta_e_grid: list[float] = list(_GRID.theta_e_grid)
    z_l_grid: list[float] = list(_GRID.z_l_grid)
    host_types: list[str] = ["DEV", "SER"]
    host_splits: list[str] = ["test"]
    per_cell: int = 0  # 0 = the profile's default
    batch_size: int = 0
    realisation: int = 0
    min_hosts_per_cell: int = 0  # 0 = InjectionConfig's default
    proposal: str = ""  # "" = DHS_SELECTION_PROPOSAL (the compute resource's selection_proposal)


@lake_asset(
    INJECTION_PLAN,
    code_version="5",
    kinds={"parquet"},
    ins={"cutouts": dg.AssetIn(list(CUTOUTS.key))},
    deps=[dg.AssetKey(list(t.key)) for t in (CUTOUT_VALIDATION, VISUAL_GRADES, SWEEPS, PHOTO_Z, SPECTRA)],
)
def injection_plan(
    context: dg.AssetExecutionContext,
    config: InjectionPlanConfig,
    lake: LakeResource,
    compute: ComputeResource,
    cutouts: ds.Dataset,
) -> Publish:
    """One task per injection over the θ_E × z_l grid, painted onto a host at its own redshift with its
    own σ_v: a quality-checked DEV/SER cutout of the test split (so injections never share hosts with
    training or model selection, and never one that visual inspection graded a lens) whose redshift
    (SDSS spec-z, else its photo-z median) lies in the cell's z_l bin, and whose σ_v (VDISP where
    measured, else the luminosity–σ relation calibrated on the survey's spectra, with its scatter)
    makes the cell's θ_E likely (``lensing.bank.plan_injection_grid``). Cells without enough hosts
    are listed as insufficient, never filled from other redshifts. The grid, the host counts and the
    σ_v relation are recorded with the plan."""
    store = lake.lake()
    lenses = published_graded_lens_ids(store.table(*VISUAL_GRADES.key))
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
        config.min_hosts_per_cell,
        config.proposal or compute.selection_proposal,
        compute.lens_profiles(),
        compute.source_model,
        compute.nuisance,
    )
    ids = hosts.column("object_id")
    wanted = pc.field("object_id").isin(ids)
    rows = store.table(*SWEEPS.key).dataset().to_table(columns=list(HOST_ROW_COLUMNS), filter=wanted)
    photo_z = store.table(*PHOTO_Z.key).dataset().to_table(columns=["object_id", "z_phot_median"], filter=wanted)
    spectra = store.table(*SPECTRA.key).read()
    relation = calibrate_sigma_relation(spectra, cfg.cosmology)
    props, host_counts = host_lens_properties(ids.to_numpy(), rows, photo_z, spectra, relation)
    for field in props.schema:
        hosts = hosts.append_column(field, props.column(field.name))
    conditioning = selection_conditioning(cfg, config.host_types, relation.to_dict(), host_counts)
    tasks = with_conditioning(plan_injection_grid(hosts, cfg), conditioning)
    md = {
        "plan": plan_summary(tasks),
        "realisation": config.realisation,
        "seed_salt": cfg.salt,
        "n_hosts": hosts.num_rows,
        "hosts": host_counts,
        "sigma_v_relation": relation.to_dict(),
        "hosts_graded_lenses_excluded": int(lenses.size),
        "batches": len(set(tasks.column("batch").to_pylist())),
    }
    return Publish({INJECTION_PLAN: tasks}, metadata={INJECTION_PLAN: md})


@lake_asset(
    INJECTION_BANK,
    INJECTION_SCORES,
    code_version="8",
    kinds={"pytorch", "parquet"},
    pool="gpu",
    ins={
        "injection_plan": dg.AssetIn(list(INJECTION_PLAN.key)),
        "cutouts": dg.AssetIn(list(CUTOUTS.key), partition_mapping=dg.AllPartitionMapping()),
    },
    deps=[dg.AssetKey(list(LENS_FINDER.key))],
)
def injections(
    context: dg.AssetExecutionContext,
    lake: LakeResource,
    compute: ComputeResource,
    injection_plan: pa.Table,
    cutouts: ds.Dataset,
) -> Publish:
    """One injection batch rendered and scored in one streamed pass, no stamp stored
    (``evaluation.injection_scoring.render_and_score``): SIE + shear lensing a Sérsic source,
    Moffat PSF from the host's PSFSIZE, supersampling 4 × 4 or finer for compact sources (or the
    lens, source and nuisance models the plan records: DHS_LENS_MODEL, DHS_SOURCE_MODEL,
    DHS_NUISANCE), on the compute device, each chunk of arcs added to its hosts and scored with the
    published lens finder with the hosts themselves, the paired controls, as soon as it is rendered.
    Publishes the bank (every parameter, μ, arc S/N, lensed magnitudes, the arc's measured flux, PSF
    used and the seed) and the scores of the injections and their controls (a failed render is
    unscorable). The bank's audits re-render a sample with lenstronomy (the same renderer renders
    a task alike in any batch); a reader of a few stamps re-renders them
    (``evaluation.injection_scoring.injection_images``)."""
    key = context.partition_key
    tasks = injection_plan.filter(pc.equal(injection_plan.column("batch"), batch_of_key(key)))
    if tasks.num_rows == 0:
        raise InputError(f"injection batch {key} has no tasks in injection_plan")
    images, invvar = host_stamps(cutouts, tasks, f"batch {key}")
    device = compute.torch_device()
    staged = [staged_table(context, INJECTION_SCORES)]
    bank_parts: list[pa.Table] = []

    def score_rows(model, spec):
        for chunk in render_and_score(
            tasks,
            images,
            invvar,
            model,
            spec,
            device=device,
            progress=lambda done, total: report_progress(context.log, f"injections {key}: {done}/{total} scored"),
        ):
            bank_parts.append(chunk.bank)
            yield from chunk.scores

    with published_lens_finder(lake.lake().table(*LENS_FINDER.key), device) as (model, spec):
        write_scores(staged[0], score_rows(model, spec))
    bank = pa.concat_tables(bank_parts)
    score_audits, score_md = score_outcomes(
        INJECTION_SCORES, evaluation_checks.INJECTION_SCORES_CONTRACT, staged, spec, device
    )
    ok = bank.column("success").to_numpy(zero_copy_only=False)
    mu = bank.column("magnification").to_numpy(zero_copy_only=False)
    md = {"n_failed": int((~ok).sum()), "median_mu": float(np.nanmedian(mu)), "device": device}
    _, z_l_values = plan_grid(injection_plan)
    sample = _agreement_sample(tasks, images, invvar, ok, device)
    audits = bank_audits(bank, sample, z_l_values, plan_proposal(injection_plan))
    return Publish(
        {INJECTION_BANK: bank, INJECTION_SCORES: staged},
        audits={INJECTION_BANK: audits, INJECTION_SCORES: score_audits},
        metadata={INJECTION_BANK: md, INJECTION_SCORES: score_md},
    )


def _agreement_sample(tasks: pa.Table, images, invvar, ok: np.ndarray, device: str, n: int = 3) -> pa.Table:
    """The stored-stamp bank rows (``lensing.bank.bank_table``) of ``n`` renderable tasks spread
    evenly over the batch, rendered again on ``device`` for the lenstronomy comparison."""
    rows = np.flatnonzero(ok)
    take = rows[np.linspace(0, rows.size - 1, min(n, rows.size)).astype(int)] if rows.size else rows
    sample = tasks.take(pa.array(take, pa.int64()))
    injected, _, params = render_injection_batch(sample, images[take], invvar[take], device=device)
    return bank_table(sample, params, injected, images[take])


def bank_audits(bank: pa.Table, sample: pa.Table, z_l_values, priors: PriorRegistry) -> list[au.AuditOutcome]:
    """The injection bank's audits on one batch (``sample``: a few of its rows with their stamps,
    the lenstronomy comparison's; ``z_l_values``: the grid's z_l bin centres; ``priors``: the
    proposal the plan drew its injections from)."""
    agreement = lenstronomy_agreement(sample)
    physics = physics_problems(bank, priors, skip=HOST_DERIVED)
    outside = hosts_outside_bins(bank, z_l_values)
    return [
        checks.INJECTION_MATCHES_LENSTRONOMY.outcome(
            agreement["ok"],
            agreement,
            f"re-rendered with lenstronomy: max pixel error {agreement['max_pixel_err_over_peak']:.3g} of peak, "
            f"flux error {agreement['flux_rel_err']:.3g} (cases: {len(agreement['cases'])})",
        ),
        checks.INJECTION_PHYSICS_VALID.outcome(physics["ok"], physics, "; ".join(physics["problems"])),
        checks.INJECTION_HOSTS_IN_BIN.outcome(
            outside["n_outside"] == 0,
            outside,
            f"{outside['n_outside']} injection(s) on a host outside its z_l bin (± {outside['half_width']:g}), "
            f"e.g. injection_id {outside['injection_ids']}",
        ),
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


injection_defs = dg.Definitions(assets=[injection_plan, injections], sensors=[injection_batch_sensor])
