"""The demo's closing summary: the headline tables of a materialized lake, printed by ``dhs demo``."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

import table_registry as T
from darkhaloscope.errors import InputError
from lake_platform.query import format_rows, run_query


def print_demo_summary(lake, seconds: float) -> None:
    """Print the lens finder's headline numbers, C(θ_E, z_l) at the strictest resolvable FPR
    threshold, the real-lens recall, the top 10 search candidates, the hidden-lens recovery (mock
    survey) and where the report and gallery are."""
    print(f"\nDemo finished in {seconds:.0f}s. Lake: {lake.uri}\n")
    try:
        lines = headline_lines(lake_headline(lake))
    except InputError as exc:  # e.g. too few held-out negatives for its threshold: the tables below still stand
        lines = [f"Headline numbers unavailable: {exc}"]
    print("\n".join(lines) + "\n")
    cols, rows = run_query(lake, DEMO_THRESHOLD_SQL)
    name = rows[0][0] if rows else "score>0.5"
    print(
        f"Selection function C(theta_E, z_l) at the {name} threshold: completeness [68% interval], * = below the "
        "minimum count"
    )
    cols, rows = run_query(lake, DEMO_SF_SQL.format(name=name.replace("'", "''")))
    print(completeness_grid(rows))
    print("\nReal-lens recall by tier (test split):")
    cols, rows = run_query(lake, DEMO_RECALL_SQL)
    print(format_rows(cols, rows))
    print("\nReal lenses detected against the prediction: per_lens P_det at their ψ, cell C(θ_E, z_l) (test split):")
    cols, rows = run_query(lake, DEMO_VALIDATION_SQL)
    print(format_rows(cols, rows))
    print("\nTop 10 search candidates:")
    cols, rows = run_query(lake, DEMO_CANDIDATES_SQL)
    print(format_rows(cols, rows))
    print_hidden_lens_recovery(lake)
    print_closure(lake)
    print_forecast(lake)
    print_grades_used(lake)
    cols, rows = run_query(lake, "SELECT uri FROM evaluation_report")
    print(f"\nEvaluation report: {rows[0][0] if rows else '(missing)'}")
    cols, rows = run_query(lake, "SELECT uri FROM candidate_gallery")
    print(f"Candidate gallery: {rows[0][0] if rows else '(missing)'}")
    print('Try: dhs query "select * from selection_function limit 20"')


def lake_headline(lake, hidden_lenses: np.ndarray | None = None) -> dict:
    """:func:`darkhaloscope.evaluation.headline.headline` of the tables published in ``lake``
    (``hidden_lenses``: object ids of the mock sky's hidden lenses, for the numbers without them)."""
    from darkhaloscope.evaluation.headline import headline
    from darkhaloscope.search.grades import published_graded_lens_ids

    graded = published_graded_lens_ids(lake.table(*T.VISUAL_GRADES.key))
    return headline(
        lake.table(*T.LENS_FINDER.key).read(),
        lake.table(*T.INJECTION_SCORES.key).dataset(),
        lake.table(*T.CUTOUT_SCORES.key).read(),
        lake.table(*T.THRESHOLDS.key).read(),
        lake.table(*T.REAL_LENS_RECALL.key).read(),
        graded,
        hidden_lenses,
    )


def headline_lines(h: dict) -> list[str]:
    """The headline numbers of :func:`lake_headline` as the summary's text lines."""
    ci = h["test_auroc_ci95"]
    inj_ci, real_ci = ci["injections vs paired controls"], ci["real positives vs held-out negatives"]
    detected, n_real = h["recall_test_known_lenses"]
    multiply, singly = h["wide_multiply_vs_singly_imaged"]
    by_snr = ", ".join(f"{k} {c:.3f} ({n})" for k, (c, n) in h["completeness_by_arc_snr"].items())
    gates = ", ".join(f"{name} {value:.4f} {'met' if ok else 'not met'}" for name, (value, ok) in h["gates"].items())
    return [
        f"Lens finder: validation AUROC {h['val_auroc']:.4f} (best epoch {h['best_epoch']}, {h['epochs_run']} run)",
        f"Test AUROC, injections vs paired controls: {h['test_auroc_injections_vs_controls']:.4f} "
        f"[95%: {inj_ci[0]:.4f}, {inj_ci[1]:.4f}]; "
        f"arcs of S/N >= 5: {h['test_auroc_injections_snr_ge_5_vs_controls']:.4f}",
        f"Test AUROC, known lenses vs held-out negatives: {h['test_auroc_real_vs_negatives']:.4f} "
        f"[95%: {real_ci[0]:.4f}, {real_ci[1]:.4f}]",
        f"At {h['threshold']} (score > {h['threshold_value']:.4f}, {h['n_held_out_negatives']} held-out negatives): "
        f"{detected} of {n_real} test-split known lenses, {h['completeness_all']:.3f} of the injections",
        f"Completeness by arc S/N (injections): {by_snr}",
        f"Completeness by theta_E, multiply imaged injections: Spearman {h['spearman_theta_e']:.3f}; at theta_E "
        f'>= 2": {multiply:.3f} multiply vs {singly:.3f} singly imaged',
        f"Gates: {gates}",
    ]


def hidden_lens_truth(lake, survey) -> pa.Table:
    """The hidden-lens truth of the mock survey ``survey`` (a ``SurveyResource``): lenses painted
    into the mock sky that no catalog lists, kept beside the mock survey and read only after a run.
    InputError when the lake was built from another survey or mock seed (its sweep manifest records
    its origin), or when the truth's lenses are not all among the lake's search targets (the truth
    of another mock: every hidden lens of the lake's own mock is a searched galaxy)."""
    import pyarrow.parquet as pq

    from darkhaloscope.survey.manifest import survey_origin

    built, named = survey_origin(lake.table(*T.SWEEP_FILES.key).schema()), survey.origin()
    if built is not None and built != named:
        raise InputError(
            f"{lake.uri} was built from {built}, but DHS_SURVEY / DHS_MOCK_SEED name {named}; set them to the lake's"
        )
    path = survey.mock_manifest().hidden_truth_path
    truth = pq.read_table(path)
    searched = lake.table(*T.SEARCH_TARGETS.key).read(columns=["object_id"]).column("object_id")
    unsearched = ~np.isin(truth.column("object_id").to_numpy(), searched.to_numpy())
    if unsearched.any():
        raise InputError(
            f"{path}: {int(unsearched.sum())} of its {truth.num_rows} hidden lenses are not among the "
            f"search targets of {lake.uri}, so it is the truth of another mock; set DHS_MOCK_SEED and "
            "DHS_MOCK_DIR to the lake's"
        )
    return truth


def print_hidden_lens_recovery(lake) -> None:
    """The demo's discovery test: hidden lenses of the mock sky (:func:`hidden_lens_truth`)
    recovered among the candidates, by arc S/N, and the false ones."""
    from darkhaloscope.evaluation.discovery import hidden_lens_recovery
    from resources.config import build_resources

    survey = build_resources()["survey"]
    if not survey.is_mock:
        return
    report = hidden_lens_recovery(
        lake.read_table("search", "candidates"),
        hidden_lens_truth(lake, survey),
        lake.read_table("survey", "known_lenses"),
    )
    n_hidden = report.hidden.num_rows
    print(
        f"\nHidden-lens recovery: {report.n_recovered} of {n_hidden} hidden lenses among {report.n_candidates} "
        "candidates "
        f"({report.count('known')} known lenses, {report.n_false} false candidates). By arc S/N:"
    )
    by_snr = report.by_snr.to_pylist()
    print(
        format_rows(
            ["arc_snr", "n_hidden", "n_recovered", "recovered_fraction"],
            [
                (
                    f"[{r['snr_lo']:g}, {r['snr_hi']:g})",
                    r["n_hidden"],
                    r["n_recovered"],
                    None if r["recovered_fraction"] is None else round(r["recovered_fraction"], 2),
                )
                for r in by_snr
            ],
        )
    )


def print_closure(lake) -> None:
    """The selection function's closure on the mock's hidden lenses (``selection_closure``)."""
    cols, rows = run_query(lake, DEMO_CLOSURE_SQL)
    if rows:
        print(
            "\nClosure: hidden lenses recovered vs predicted per lens (detection model) and from C of their population:"
        )
        print(format_rows(cols, rows))


def print_forecast(lake) -> None:
    """Expected lenses the search finds per deg² and in the searched area (``lens_forecast``, overall)."""
    cols, rows = run_query(lake, DEMO_FORECAST_SQL)
    if rows:
        print("\nForecast (LensPop-like lenses per cell x C reweighted to them):")
        print(format_rows(cols, rows))


def print_grades_used(lake) -> None:
    """Which visual-grade rounds the lens finder was trained with: the numbers above are those of a
    graded lake whenever grades were landed in it (``dhs grade``)."""
    import json

    from darkhaloscope.training.training_set import GRADES_KEY

    used = json.loads((lake.read_schema("training", "training_set").metadata or {}).get(GRADES_KEY, b"{}"))
    if used.get("rounds"):
        print(
            f"\nTrained with visual grades: rounds {used['rounds']} ({used['n_graded_rows']} graded rows, "
            f"{used['n_relabelled']} catalog labels changed by a grade; sha256 {used['grades_sha256'][:12]}…)"
        )
    else:
        print("\nTrained with no visual grades (none landed: `dhs grade` adds a round)")


def completeness_grid(rows: list[tuple]) -> str:
    """Text grid of C(θ_E, z_l): rows θ_E, columns z_l; each cell 'C [lo,hi]' (* = insufficient)."""
    z_values = sorted({r[1] for r in rows})
    by_cell = {(r[0], r[1]): r for r in rows}
    lines = ["theta_E\\z_l " + " ".join(f"{z:^16.1f}" for z in z_values)]
    for te in sorted({r[0] for r in rows}):
        cells = []
        for z in z_values:
            _, _, c, lo, hi, ok, n = by_cell[(te, z)]
            cells.append(f"{'-':^16}" if not n else f"{c:.2f} [{lo:.2f},{hi:.2f}]{'' if ok else '*'}".ljust(16))
        lines.append(f'{te:>10.2f}" ' + " ".join(cells))
    return "\n".join(lines)


DEMO_THRESHOLD_SQL = """
SELECT name FROM thresholds WHERE resolvable AND kind = 'fpr' ORDER BY target LIMIT 1
"""
DEMO_CANDIDATES_SQL = """
SELECT rank, object_id, round(ra, 5) AS ra, round(dec, 5) AS dec, round(score, 4) AS score, round(score_percentile, 3)
AS pct,
       CASE WHEN known THEN 'known: ' || known_name ELSE 'new' END AS status, threshold_name
FROM candidates ORDER BY rank LIMIT 10
"""
DEMO_SF_SQL = """
SELECT theta_e_arcsec, z_l, completeness, ci68_lo, ci68_hi, sufficient, n_valid
FROM selection_function WHERE threshold_name = '{name}' ORDER BY theta_e_arcsec, z_l
"""
DEMO_CLOSURE_SQL = """
SELECT threshold_name, method, n_hidden, round(n_predicted, 1) AS n_predicted, round(n_predicted_sd, 1) AS sd,
       n_recovered, round(pull, 2) AS pull, round(power_15pct, 2) AS power_15pct
FROM selection_closure WHERE bin = 'all' ORDER BY threshold_name, method
"""
DEMO_FORECAST_SQL = """
SELECT threshold_name, population, round(area_deg2, 1) AS area_deg2, round(n_per_deg2, 4) AS per_deg2,
       round(n_per_deg2_sd, 4) AS sd, round(n_in_area, 1) AS in_area, round(n_unmeasured_per_deg2, 4) AS unmeasured
FROM lens_forecast WHERE bin = 'all' ORDER BY threshold_name
"""
DEMO_RECALL_SQL = """
SELECT threshold_name, tier, n, n_detected, round(recall, 3) AS recall, round(ci68_lo, 3) AS ci68_lo, round(ci68_hi, 3)
AS ci68_hi
FROM real_lens_recall ORDER BY threshold_name, tier
"""
DEMO_VALIDATION_SQL = """
SELECT threshold_name, method, tier, n, n_compared, n_outside_grid + n_insufficient_cell AS apart, n_detected,
       round(n_expected, 1) AS n_expected, round(n_expected_sd, 1) AS sd, round(pull, 2) AS pull
FROM real_lens_validation ORDER BY threshold_name, method DESC, tier
"""
