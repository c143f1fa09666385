"""The demo's closing summary: the headline tables of a materialized lake, printed by ``dhs demo``."""

from __future__ import annotations

from lakehouse.query import format_rows, run_query


def print_demo_summary(lake, seconds: float) -> None:
    """Print C(θ_E, z_l) at the strictest resolvable FPR threshold, the real-lens recall, the top 10
    search candidates, the hidden-lens recovery (mock survey) and where the report and gallery are."""
    print(f"\nDemo finished in {seconds:.0f}s. Lake: {lake.uri}\n")
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
    print("\nTop 10 search candidates:")
    cols, rows = run_query(lake, DEMO_CANDIDATES_SQL)
    print(format_rows(cols, rows))
    print_hidden_lens_recovery(lake)
    print_closure(lake)
    print_grades_used(lake)
    cols, rows = run_query(lake, "SELECT uri FROM evaluation_report")
    print(f"\nEvaluation report: {rows[0][0] if rows else '(missing)'}")
    cols, rows = run_query(lake, "SELECT uri FROM candidate_gallery")
    print(f"Candidate gallery: {rows[0][0] if rows else '(missing)'}")
    print('Try: dhs query "select * from selection_function limit 20"')


def print_hidden_lens_recovery(lake) -> None:
    """The demo's discovery test: hidden lenses of the mock sky (truth kept beside the mock survey,
    read here only, after the run) recovered among the candidates, by arc S/N, and the false ones."""
    import pyarrow.parquet as pq

    from darkhaloscope.evaluation.discovery import hidden_lens_recovery
    from resources.config import build_resources

    survey = build_resources()["survey"]
    if not survey.is_mock:
        return
    report = hidden_lens_recovery(
        lake.read_table("search", "candidates"),
        pq.read_table(survey.mock_manifest().hidden_truth_path),
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
            "\nClosure: hidden lenses whose host the finder never saw, recovered vs predicted by the selection model:"
        )
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
SELECT bin AS theta_e, n_hidden, round(n_predicted, 1) AS n_predicted, round(n_predicted_sd, 1) AS sd, n_recovered,
       round(pull, 2) AS pull
FROM selection_closure ORDER BY bin = 'all', theta_e_lo
"""
DEMO_RECALL_SQL = """
SELECT threshold_name, tier, n, n_detected, round(recall, 3) AS recall, round(ci68_lo, 3) AS ci68_lo, round(ci68_hi, 3)
AS ci68_hi
FROM real_lens_recall ORDER BY threshold_name, tier
"""
