"""The selection function against lenses it never saw: ``selection_closure`` (the mock's hidden lenses
recovered against the number predicted per lens and from the mock population's C) and
``lens_forecast`` (the LensPop-like population's lenses times C reweighted to it).

``selection_closure`` is the only asset that reads the mock's hidden-lens truth to compare with it;
``thresholds`` asks :func:`hidden_hosts_among` for a count only, after its negatives are chosen, to
publish and check that none of them hosts a hidden lens (``tests/test_mock_hidden_lenses.py``).
"""

import dagster as dg
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from darkhaloscope.errors import InputError
from darkhaloscope.evaluation.closure import (
    CLOSURE_SCHEMA,
    cell_of,
    closure_table,
    host_scores,
    population_cells,
    theta_e_edges,
    usable_hidden,
    with_host_parameters,
)
from darkhaloscope.evaluation.detection import detection_models
from darkhaloscope.evaluation.forecast import FORECAST_SCHEMA, forecast_table, sphere_box_area_deg2
from darkhaloscope.evaluation.populations import (
    POPULATION_MERGE,
    lenspop_lens_density,
    merged_grid,
    named_population,
    population_from_samples,
    selection_for_population,
)
from darkhaloscope.evaluation.scoring import held_out_negatives, injection_rows
from darkhaloscope.evaluation.thresholds import usable_thresholds
from darkhaloscope.lensing.bank import plan_grid, plan_proposal, table_conditioning, with_conditioning
from darkhaloscope.search.candidates import choose_threshold
from darkhaloscope.survey.sweeps import parse_sweep_filename
from resources import ComputeResource, LakeResource, SurveyResource
from table_registry import (
    CUTOUT_SCORES,
    INJECTION_PLAN,
    INJECTION_SCORES,
    LENS_FORECAST,
    SEARCH_SCORES,
    SELECTION_CLOSURE,
    SELECTION_POPULATIONS,
    SWEEPS,
    THRESHOLDS,
    TRAINING_SET,
)
from table_registry import closure as checks

from .shared.publish import Publish, inputs, lake_asset


def _hidden_truth(survey: SurveyResource) -> pa.Table | None:
    """The mock's hidden-lens truth (None on a real survey)."""
    import pyarrow.parquet as pq

    return pq.read_table(survey.mock_manifest().hidden_truth_path) if survey.is_mock else None


def hidden_hosts_among(survey: SurveyResource, object_ids) -> int | None:
    """How many of ``object_ids`` host one of the mock's hidden lenses (None on a real survey): a
    count, read after the caller chose its rows, so that it can be published and checked."""
    truth = _hidden_truth(survey)
    if truth is None:
        return None
    return int(pc.sum(pc.is_in(truth.column("object_id"), pa.array(object_ids))).as_py() or 0)


def user_population(path: str, proposal):
    """The user population of DHS_SELECTION_POPULATION: a Parquet table of ψ samples
    (``populations.population_from_samples``), named after its file."""
    import pathlib

    import pyarrow.parquet as pq

    p = pathlib.Path(path)
    if not p.is_file():
        raise InputError(f"DHS_SELECTION_POPULATION={path!r}: no such file")
    try:
        table = pq.read_table(p)
    except (OSError, pa.ArrowInvalid) as exc:
        raise InputError(f"DHS_SELECTION_POPULATION={path!r}: not a readable Parquet table ({exc})") from exc
    return population_from_samples(table, p.stem, proposal)


def _hidden_lenses(
    lake: LakeResource, survey: SurveyResource, search_scores: ds.Dataset
) -> tuple[pa.Table, np.ndarray]:
    """The mock's hidden lenses with their host's dereddened z magnitude (``lens_mag_z``), r-band PSF
    FWHM (``psf_fwhm_r``) and depth (``psfdepth_r``) from the sweeps, and each host's search score
    (NaN where it was not validly scored)."""
    hidden = with_host_parameters(_hidden_truth(survey), lake.lake().table(*SWEEPS.key).dataset())
    return hidden, host_scores(hidden, search_scores)


def _leaks(hidden: pa.Table, negatives: pa.Table, injections: pa.Table, training_set: ds.Dataset) -> dict:
    """Hidden lenses among the threshold negatives, the injection hosts and the training set (each 0
    by construction: the closure reserve)."""
    ids = hidden.column("object_id")
    train = training_set.to_table(columns=["object_id"]).column("object_id")
    return {
        "in_threshold_negatives": int(pc.sum(pc.is_in(ids, negatives.column("object_id"))).as_py() or 0),
        "injection_hosts": int(pc.sum(pc.is_in(ids, injections.column("host_object_id"))).as_py() or 0),
        "in_training_set": int(pc.sum(pc.is_in(ids, train)).as_py() or 0),
    }


@lake_asset(
    SELECTION_CLOSURE,
    code_version="4",
    kinds={"parquet"},
    ins=inputs(
        thresholds=THRESHOLDS,
        injection_scores=INJECTION_SCORES,
        injection_plan=INJECTION_PLAN,
        search_scores=SEARCH_SCORES,
        training_set=TRAINING_SET,
        cutout_scores=CUTOUT_SCORES,
    ),
    deps=[dg.AssetKey(list(SWEEPS.key))],
)
def selection_closure(
    context: dg.AssetExecutionContext,
    lake: LakeResource,
    survey: SurveyResource,
    compute: ComputeResource,
    thresholds: pa.Table,
    injection_scores: ds.Dataset,
    injection_plan: pa.Table,
    search_scores: ds.Dataset,
    training_set: ds.Dataset,
    cutout_scores: ds.Dataset,
) -> Publish:
    """On the mock survey, at every usable threshold (fixed score cuts included): the hidden lenses
    the search recovers (host scored above the threshold) against the number predicted per lens by the
    detection model at each lens's ψ (``method = per_lens``) and from C reweighted to the mock's
    source population at each lens's cell (``method = population``), per θ_E bin and overall, with
    the pull and the power to see a 15 % bias (``evaluation.closure``). Lenses outside the model's
    validity range or in an insufficient cell are left out of both, counted. A blocking check holds
    that no hidden lens is a threshold negative, an injection host or in the training set. On a
    real survey the table is empty."""
    if not survey.is_mock:
        md = {"skipped": "not the mock survey: no hidden-lens truth"}
        return Publish({SELECTION_CLOSURE: CLOSURE_SCHEMA.empty_table()}, metadata={SELECTION_CLOSURE: md})
    hidden, host_score = _hidden_lenses(lake, survey, search_scores)
    injections = injection_rows(injection_scores, "injection")
    negatives = held_out_negatives(
        cutout_scores.to_table(columns=["object_id", "label", "split", "in_training_catalog"])
    )
    leaks = _leaks(hidden, negatives, injections, training_set)
    proposal = plan_proposal(injection_plan)
    theta_e, z_l = plan_grid(injection_plan)
    merge = POPULATION_MERGE.get(compute.profile, 1)
    te_merged, _, _ = merged_grid(theta_e, merge)
    zl_merged, _, _ = merged_grid(z_l, merge)
    mock = named_population("mock", proposal)
    models, excluded = detection_models(injections, thresholds, proposal, theta_e_edges(theta_e))
    tables = []
    for name, model in models.items():
        c = selection_for_population(
            mock, name, injections, thresholds, proposal, theta_e, z_l, merge=merge, threshold_uncertainty=False
        )
        cells = population_cells(c)
        recovered = host_score > model.threshold  # NaN (not scored): not recovered
        tables.append(closure_table(model, cells, hidden, recovered, te_merged, zl_merged))
        te = hidden.column("theta_e_arcsec").to_numpy()
        use = usable_hidden(hidden, model, cells, cell_of(te, hidden.column("z_l").to_numpy(), te_merged, zl_merged))
        excluded[name] = {k: int(v.sum()) for k, v in use.items() if k != "usable"}
    table = with_conditioning(pa.concat_tables(tables), table_conditioning(injection_plan) or {})
    md = {
        "n_hidden_truth": hidden.num_rows,
        "n_hidden_not_scored": int(np.isnan(host_score).sum()),
        "leaks": leaks,
        "left_out": excluded,
        "population": mock.description,
    }
    for row in table.filter(pc.equal(table.column("bin"), "all")).to_pylist():
        md[f"{row['threshold_name']} {row['method']}"] = {
            "n_recovered": row["n_recovered"],
            "n_predicted": round(row["n_predicted"], 2),
            "sd": round(row["n_predicted_sd"], 2),
            "pull": None if row["pull"] is None else round(row["pull"], 2),
            "power_15pct": None if row["power_15pct"] is None else round(row["power_15pct"], 2),
        }
    audit = checks.CLOSURE_NO_LEAK.outcome(
        not any(leaks.values()), leaks, f"hidden lenses leaked into the pipeline's inputs: {leaks}"
    )
    return Publish({SELECTION_CLOSURE: table}, audits={SELECTION_CLOSURE: [audit]}, metadata={SELECTION_CLOSURE: md})


@lake_asset(
    LENS_FORECAST,
    code_version="2",
    kinds={"parquet"},
    ins=inputs(selection_populations=SELECTION_POPULATIONS, thresholds=THRESHOLDS, injection_plan=INJECTION_PLAN),
    deps=[dg.AssetKey(list(SEARCH_SCORES.key))],
)
def lens_forecast(
    context: dg.AssetExecutionContext,
    lake: LakeResource,
    compute: ComputeResource,
    selection_populations: pa.Table,
    thresholds: pa.Table,
    injection_plan: pa.Table,
) -> Publish:
    """Expected lenses the search finds per deg² and in the searched area (the searched sweep files'
    boxes), per θ_E bin and overall, at every usable threshold: the LensPop-like population's lenses
    in each cell (``populations.lenspop_lens_density``: Choi et al. 2007's VDF with LensPop's
    evolution, LensPop-like source counts, redshifts and sizes, every source within θ_E) times C
    reweighted to that population; cells whose N_eff is below the floor are reported apart."""
    theta_e, z_l = plan_grid(injection_plan)
    merge = POPULATION_MERGE.get(compute.profile, 1)
    _, te_edges, _ = merged_grid(theta_e, merge)
    _, zl_edges, _ = merged_grid(z_l, merge)
    cosmology = (table_conditioning(injection_plan) or {}).get("cosmology", "planck18")
    density = lenspop_lens_density(te_edges, zl_edges, cosmology)
    sweeps = sorted({p["sweep_file"] for p in lake.lake().partitions(*SEARCH_SCORES.key)})
    area = sum(
        sphere_box_area_deg2(b.ra_min, b.ra_max, b.dec_min, b.dec_max) for b in map(parse_sweep_filename, sweeps)
    )
    pop = selection_populations.filter(
        pc.and_(
            pc.equal(selection_populations.column("population"), "lenspop"),
            pc.equal(selection_populations.column("kind"), "cell"),
        )
    )
    tables = []
    for name, _ in usable_thresholds(thresholds):
        cells = pop.filter(pc.equal(pop.column("threshold_name"), name))
        if cells.num_rows:
            tables.append(forecast_table(cells, density, te_edges, area, name, "lenspop"))
    if not tables:
        raise InputError("selection_populations holds no lenspop cells: materialize it again")
    outside = float(lenspop_lens_density([0.0, te_edges[0], te_edges[-1], 30.0], [1e-3, 3.0], cosmology).sum())
    outside_z = float(lenspop_lens_density(te_edges, [zl_edges[-1], 3.0], cosmology).sum())
    md = {
        "search_threshold": choose_threshold(thresholds)[0],
        "searched_sweep_files": len(sweeps),
        "area_deg2": round(area, 3),
        "population": named_population("lenspop", plan_proposal(injection_plan), cosmology).description,
        "lenses_outside_grid_theta_e_per_deg2": round(outside, 3),
        "lenses_beyond_grid_z_l_per_deg2": round(outside_z, 3),
    }
    table = with_conditioning(pa.concat_tables(tables).cast(FORECAST_SCHEMA), {"forecast": md})
    for row in table.filter(pc.equal(table.column("bin"), "all")).to_pylist():
        md[f"{row['threshold_name']} per_deg2"] = round(row["n_per_deg2"], 4)
    return Publish({LENS_FORECAST: table}, metadata={LENS_FORECAST: md})
