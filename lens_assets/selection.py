"""Selection stage: the selection function C(θ_E, z_l) on the injection plan's grid with its
marginals, the detection model P_det(ψ) per threshold with its reliability, and C reweighted to lens
populations — all from the scored injections and the thresholds of the evaluation stage."""

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from darkhaloscope.errors import InputError
from darkhaloscope.evaluation import usable_thresholds
from darkhaloscope.evaluation.closure import theta_e_edges
from darkhaloscope.evaluation.detection import cross_validated, detection_models, model_table, reliability_table
from darkhaloscope.evaluation.populations import (
    NAMED_POPULATIONS,
    POPULATION_MERGE,
    named_population,
    selection_for_population,
)
from darkhaloscope.evaluation.products import FIGURES, selection_products
from darkhaloscope.evaluation.scoring import injection_rows
from darkhaloscope.lensing.bank import plan_grid, plan_proposal, plan_summary, table_conditioning, with_conditioning
from darkhaloscope.lensing.cosmology import DEFAULT_COSMOLOGY
from darkhaloscope.search.candidates import choose_threshold
from lake_platform import audits as au
from resources import ComputeResource, LakeResource
from table_registry import (
    INJECTION_PLAN,
    INJECTION_SCORES,
    SELECTION_CALIBRATION,
    SELECTION_FUNCTION,
    SELECTION_MARGINALS,
    SELECTION_MODEL,
    SELECTION_POPULATIONS,
    THRESHOLDS,
)
from table_registry import selection as checks

from .closure import user_population
from .shared.publish import Publish, inputs, lake_asset, staged_table


@lake_asset(
    SELECTION_FUNCTION,
    SELECTION_MARGINALS,
    code_version="6",
    kinds={"parquet"},
    ins=inputs(thresholds=THRESHOLDS, injection_scores=INJECTION_SCORES, injection_plan=INJECTION_PLAN),
)
def selection_function(
    context: dg.AssetExecutionContext,
    lake: LakeResource,
    thresholds: pa.Table,
    injection_scores: ds.Dataset,
    injection_plan: pa.Table,
) -> Publish:
    """C(θ_E, z_l) for each threshold on the grid the injection plan was built on: n_injected,
    n_failed (excluded from the denominator and counted), n_detected, completeness with Jeffreys
    68%/95% intervals on the injections' effective number (n_effective: a host's injections share
    their outcome), cells below the minimum count flagged; marginal completeness; heatmaps and
    marginal curves stored as PNG in the table's files folder, beside it
    (``selection_function.files/artifact=figures/``)."""
    theta_e, z_l = plan_grid(injection_plan)
    insufficient = [(c["theta_e_arcsec"], c["z_l"]) for c in plan_summary(injection_plan).get("insufficient_cells", [])]
    sel, marg, figures = selection_products(
        injection_rows(injection_scores, "injection"), thresholds, theta_e, z_l, insufficient
    )
    conditioning = table_conditioning(injection_plan) or {}
    sel, marg = with_conditioning(sel, conditioning), with_conditioning(marg, conditioning)
    staged = staged_table(context, SELECTION_FUNCTION)
    for name, png in figures.items():
        staged.write_bytes(name, png, subfolder=FIGURES)
    staged.write(sel)
    # cells the plan left without hosts at their redshift are flagged, not a coverage problem
    unfilled = {(round(t, 6), round(z, 6)) for t, z in insufficient}
    cells = zip(sel.column("theta_e_centre").to_pylist(), sel.column("z_l_centre").to_pylist())
    planned = sel.filter(pa.array([(round(t, 6), round(z, 6)) not in unfilled for t, z in cells]))
    md = {
        "nonempty_cells": int(pc.sum(pc.greater(sel.column("n_valid"), 0)).as_py() or 0),
        "cells_without_hosts_at_their_redshift": len(unfilled),
        "figures": sorted(figures),
        "conditioning": conditioning,
    }
    return Publish(
        {SELECTION_FUNCTION: staged, SELECTION_MARGINALS: marg},
        audits={SELECTION_FUNCTION: [au.nonempty_cells_audit(checks.SELECTION_FUNCTION_COVERAGE, planned)]},
        metadata={SELECTION_FUNCTION: md},
    )


@lake_asset(
    SELECTION_MODEL,
    SELECTION_CALIBRATION,
    code_version="4",
    kinds={"parquet"},
    ins=inputs(thresholds=THRESHOLDS, injection_scores=INJECTION_SCORES, injection_plan=INJECTION_PLAN),
)
def selection_model(
    context: dg.AssetExecutionContext,
    lake: LakeResource,
    thresholds: pa.Table,
    injection_scores: ds.Dataset,
    injection_plan: pa.Table,
) -> Publish:
    """The detection model P_det(ψ) at each usable threshold (``evaluation.detection``: gradient-
    boosted trees over the lens, source and observing parameters of the valid injections, monotone
    in the PSF and depth): its parameters with their validity ranges and its Brier
    scores cross-validated by host (``selection_model``), and its reliability curve on the held-out
    injections (``selection_calibration``). Evaluate it at any ψ inside the ranges with
    ``detection.fit_detection_model(...).probability(...)``: a fit is a pure function of the bank."""
    injections = injection_rows(injection_scores, "injection")
    proposal = plan_proposal(injection_plan)
    theta_e, _ = plan_grid(injection_plan)
    fitted, not_fitted = detection_models(injections, thresholds, proposal, theta_e_edges(theta_e), n_bootstrap=0)
    models, calibrations = [], []
    for name, model in fitted.items():
        cv = cross_validated(injections, model.threshold)
        models.append(model_table(model, cv))
        calibrations.append(reliability_table(name, cv))
    if not models:
        raise InputError(f"no threshold has a detection model: {not_fitted}")
    conditioning = table_conditioning(injection_plan) or {}
    model_t = with_conditioning(pa.concat_tables(models), conditioning)
    calib_t = with_conditioning(pa.concat_tables(calibrations), conditioning)
    md = {
        "search_threshold": choose_threshold(thresholds)[0],
        "not_fitted": not_fitted,
        "brier_cv": {r["threshold_name"]: round(r["brier_cv"], 4) for r in model_t.to_pylist()},
        "brier_cv_logistic": {r["threshold_name"]: round(r["brier_cv_logistic"], 4) for r in model_t.to_pylist()},
        "proposal": conditioning.get("proposal"),
    }
    return Publish({SELECTION_MODEL: model_t, SELECTION_CALIBRATION: calib_t}, metadata={SELECTION_MODEL: md})


@lake_asset(
    SELECTION_POPULATIONS,
    code_version="1",
    kinds={"parquet"},
    ins=inputs(thresholds=THRESHOLDS, injection_scores=INJECTION_SCORES, injection_plan=INJECTION_PLAN),
)
def selection_populations(
    context: dg.AssetExecutionContext,
    lake: LakeResource,
    compute: ComputeResource,
    thresholds: pa.Table,
    injection_scores: ds.Dataset,
    injection_plan: pa.Table,
) -> Publish:
    """C(θ_E, z_l | λ) and its marginals at every usable threshold for the named populations
    (``proposal``, ``lenspop`` after Collett 2015, ``mock``: the mock's hidden-lens sources) and, when
    DHS_SELECTION_POPULATION names a Parquet table of ψ samples, the user's: importance weights
    p(ψ | λ) / q(ψ) against the proposal the plan recorded, each cell with its N_eff and flagged
    below the floor, never filled (``evaluation.populations.selection_for_population``)."""
    injections = injection_rows(injection_scores, "injection")
    proposal = plan_proposal(injection_plan)
    theta_e, z_l = plan_grid(injection_plan)
    conditioning = table_conditioning(injection_plan) or {}
    populations = [
        named_population(n, proposal, conditioning.get("cosmology", DEFAULT_COSMOLOGY)) for n in NAMED_POPULATIONS
    ]
    if compute.selection_population:
        populations.append(user_population(compute.selection_population, proposal))
    merge = POPULATION_MERGE.get(compute.profile, 1)
    tables = [
        selection_for_population(pop, name, injections, thresholds, proposal, theta_e, z_l, merge=merge)
        for pop in populations
        for name, _ in usable_thresholds(thresholds)
    ]
    table = with_conditioning(pa.concat_tables(tables), {**conditioning, "population_cells_merged": merge})
    cells = table.filter(pc.equal(table.column("kind"), "cell"))
    md = {
        "populations": {p.name: p.description for p in populations},
        "cells_merged": merge,
        "sufficient_cells": {
            p.name: int(
                pc.sum(pc.and_(pc.equal(cells.column("population"), p.name), cells.column("sufficient"))).as_py() or 0
            )
            for p in populations
        },
    }
    return Publish({SELECTION_POPULATIONS: table}, metadata={SELECTION_POPULATIONS: md})
