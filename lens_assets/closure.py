"""The selection function against lenses it never saw: ``selection_closure`` (per hidden lens of
the mock) and ``lens_forecast`` (the selection model folded with deflector and source populations).

These are the only assets that read the mock's hidden-lens truth, and only to compare; no asset
upstream of the evaluation report reads them (``tests/test_mock_hidden_lenses.py``).
"""

import dagster as dg
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from darkhaloscope.constants import flux_to_mag
from darkhaloscope.errors import InputError
from darkhaloscope.evaluation.closure import (
    CLOSURE_SCHEMA,
    closure_table,
    model_at,
    outside_prior_support,
    threshold_names,
)
from darkhaloscope.evaluation.forecast import (
    FORECAST_SCHEMA,
    fit_lens_magnitude,
    forecast_assumptions,
    forecast_density,
    mock_forecast_table,
    snr_offsets,
    sphere_box_area_deg2,
    vdf_forecast_table,
)
from darkhaloscope.evaluation.scoring import injection_rows
from darkhaloscope.lensing.bank import plan_grid, table_conditioning, with_conditioning
from darkhaloscope.survey.sweeps import parse_sweep_filename
from mock_survey.hidden_lenses import ARC_SNR_RANGE
from resources import LakeResource, SurveyResource
from table_registry import (
    INJECTION_PLAN,
    INJECTION_SCORES,
    LENS_FORECAST,
    SEARCH_SCORES,
    SELECTION_CLOSURE,
    SELECTION_MODEL,
    SWEEPS,
    TRAINING_SET,
)

from .shared.publish import Publish, lake_asset


def _hidden_lenses(
    lake: LakeResource, survey: SurveyResource, search_scores: ds.Dataset, training_set: ds.Dataset
) -> tuple[pa.Table, np.ndarray, dict]:
    """The mock's hidden lenses whose host the lens finder never saw in training (train or val rows
    of ``training_set``) with their lens's dereddened z magnitude (``lens_mag_z``), each host's
    search score (NaN where it was not validly scored) and counts for the metadata."""
    import pyarrow.parquet as pq

    truth = pq.read_table(survey.mock_manifest().hidden_truth_path)
    seen = pc.is_in(truth.column("object_id"), training_set.to_table(columns=["object_id"]).column("object_id"))
    hidden = truth.filter(pc.invert(seen))
    ids = hidden.column("object_id")
    rows = (
        lake.lake()
        .table(*SWEEPS.key)
        .dataset()
        .to_table(columns=["object_id", "flux_z", "mw_transmission_z"], filter=pc.field("object_id").isin(ids))
    )
    order = pc.index_in(ids, rows.column("object_id")).to_numpy(zero_copy_only=False)
    flux = (
        rows.column("flux_z").to_numpy(zero_copy_only=False)[order]
        / rows.column("mw_transmission_z").to_numpy(zero_copy_only=False)[order]
    )
    hidden = hidden.append_column("lens_mag_z", pa.array(flux_to_mag(flux)))
    scored = search_scores.to_table(columns=["object_id", "score", "valid"], filter=pc.field("object_id").isin(ids))
    scored = scored.filter(scored.column("valid"))
    at = pc.index_in(ids, scored.column("object_id"))  # null where the host has no valid score
    host_score = np.asarray(scored.column("score").take(at).to_numpy(zero_copy_only=False), dtype=np.float64)
    counts = {
        "n_hidden_truth": truth.num_rows,
        "n_hidden_seen_in_training": truth.num_rows - hidden.num_rows,
        "n_hidden_not_scored": int(np.isnan(host_score).sum()),
    }
    return hidden, host_score, counts


def _recovered(host_score: np.ndarray, model: pa.Table) -> np.ndarray:
    """Whether each hidden lens's host scored above the threshold of ``model`` (one threshold's rows)."""
    return host_score > float(model.column("threshold")[0].as_py())  # NaN (not scored): not recovered


@lake_asset(
    SELECTION_CLOSURE,
    code_version="2",
    kinds={"parquet"},
    ins={
        "selection_model": dg.AssetIn(list(SELECTION_MODEL.key)),
        "search_scores": dg.AssetIn(list(SEARCH_SCORES.key)),
        "training_set": dg.AssetIn(list(TRAINING_SET.key)),
        "injection_plan": dg.AssetIn(list(INJECTION_PLAN.key)),
    },
    deps=[dg.AssetKey(list(SWEEPS.key))],
)
def selection_closure(
    context: dg.AssetExecutionContext,
    lake: LakeResource,
    survey: SurveyResource,
    selection_model: pa.Table,
    search_scores: ds.Dataset,
    training_set: ds.Dataset,
    injection_plan: pa.Table,
) -> Publish:
    """On the mock survey, the hidden lenses the search recovers (host scored above a threshold)
    against the number the selection model predicts at their θ_E, arc S/N and lens magnitude, per
    θ_E bin of the grid and overall, with the pull, at each threshold of ``selection_model``. Hidden
    lenses whose host the lens finder saw in training (train or val rows of ``training_set``) are
    left out and counted: the selection function is measured on hosts it never saw. The truth is
    read here only, from the mock survey's files, never by a training or evaluation input. On a
    real survey the table is empty."""
    if not survey.is_mock:
        md = {"skipped": "not the mock survey: no hidden-lens truth"}
        return Publish({SELECTION_CLOSURE: CLOSURE_SCHEMA.empty_table()}, metadata={SELECTION_CLOSURE: md})
    hidden, host_score, counts = _hidden_lenses(lake, survey, search_scores, training_set)
    theta_e, _ = plan_grid(injection_plan)
    conditioning = table_conditioning(injection_plan)
    if conditioning is None:
        raise InputError("the injection plan records no priors: materialize injection_plan again")
    outside = outside_prior_support(hidden, conditioning["priors"])
    in_support = ~np.any(np.stack(list(outside.values())), axis=0)
    names = threshold_names(selection_model)
    tables = []
    for name in names:
        model = model_at(selection_model, name)
        tables.append(closure_table(model, hidden, _recovered(host_score, model), theta_e, in_support))
    table = pa.concat_tables(tables)
    md = {
        "strictest_threshold": names[0],
        **counts,
        "n_outside_prior_support": int((~in_support).sum()),
        "outside_prior_support_by_parameter": {k: int(v.sum()) for k, v in outside.items()},
    }
    for row in table.filter(pc.is_in(table.column("bin"), pa.array(["all", "in_prior_support"]))).to_pylist():
        md[f"{row['threshold_name']} {row['bin']}"] = {
            "pull": row["pull"],
            "n_recovered": row["n_recovered"],
            "n_predicted": round(row["n_predicted"], 2),
            "n_predicted_sd": round(row["n_predicted_sd"], 2),
        }
    return Publish({SELECTION_CLOSURE: table}, metadata={SELECTION_CLOSURE: md})


@lake_asset(
    LENS_FORECAST,
    code_version="1",
    kinds={"parquet"},
    ins={
        "selection_model": dg.AssetIn(list(SELECTION_MODEL.key)),
        "injection_scores": dg.AssetIn(list(INJECTION_SCORES.key)),
        "injection_plan": dg.AssetIn(list(INJECTION_PLAN.key)),
        "search_scores": dg.AssetIn(list(SEARCH_SCORES.key)),
        "training_set": dg.AssetIn(list(TRAINING_SET.key)),
    },
    deps=[dg.AssetKey(list(SWEEPS.key))],
)
def lens_forecast(
    context: dg.AssetExecutionContext,
    lake: LakeResource,
    survey: SurveyResource,
    selection_model: pa.Table,
    injection_scores: ds.Dataset,
    injection_plan: pa.Table,
    search_scores: ds.Dataset,
    training_set: ds.Dataset,
) -> Publish:
    """Expected number of lenses the search finds per deg² and in the searched area (the sweep
    blocks the search scored), per θ_E bin of the grid and overall: the selection model folded with
    Choi et al. 2007's velocity dispersion function and Hogg et al. 1997's source counts
    (``darkhaloscope.evaluation.forecast``; population ``vdf``, every assumption in the metadata).
    On the mock survey also population ``mock``: the model folded with the mock's own populations
    (its hidden lenses' deflectors, arc S/N log-uniform as the mock draws it) against the hidden
    lenses the search recovered (``n_truth``, ``pull``)."""
    name = threshold_names(selection_model)[0]  # the strictest: the search's candidates
    model = model_at(selection_model, name)
    theta_e, z_l = plan_grid(injection_plan)
    sweeps = sorted({p["sweep_file"] for p in lake.lake().partitions(*SEARCH_SCORES.key)})
    area = sum(
        sphere_box_area_deg2(b.ra_min, b.ra_max, b.dec_min, b.dec_max) for b in map(parse_sweep_filename, sweeps)
    )
    injections = injection_rows(injection_scores, "injection")
    density = forecast_density(model, snr_offsets(injections, theta_e), fit_lens_magnitude(injections), theta_e, z_l)
    tables = [vdf_forecast_table(density, area, name)]
    md = {
        "threshold": name,
        "searched_sweep_files": len(sweeps),
        "area_deg2": round(area, 3),
        "area": "the searched sweep files' RA/Dec boxes, whole (an upper bound where the survey covers a block partly)",
        "assumptions": forecast_assumptions(
            (float(density["edges"][0]), float(density["edges"][-1])), (min(z_l), max(z_l))
        ).to_dict(),
        "n_outside_grid_per_deg2": round(float(density["outside_per_deg2"]), 4),
    }
    if survey.is_mock:
        hidden, host_score, counts = _hidden_lenses(lake, survey, search_scores, training_set)
        tables.append(mock_forecast_table(model, hidden, _recovered(host_score, model), theta_e, ARC_SNR_RANGE, area))
        md["mock"] = {**counts, "arc_snr_range": list(ARC_SNR_RANGE)}
    table = with_conditioning(pa.concat_tables(tables).cast(FORECAST_SCHEMA), md["assumptions"])
    for row in table.filter(pc.equal(table.column("bin"), "all")).to_pylist():
        md[f"{row['population']}_per_deg2"] = round(row["n_per_deg2"], 4)
        md[f"{row['population']}_in_area"] = round(row["n_in_area"], 2)
    return Publish({LENS_FORECAST: table}, metadata={LENS_FORECAST: md})
