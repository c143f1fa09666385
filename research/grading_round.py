"""One round of the grading loop on a mock-survey lake, with the mock's truth standing in for the
human grader: the ``--top`` best-ranked candidates (by default every one, as the gallery shows
them) graded ``A`` where they are a hidden lens of the mock sky or a known lens, ``not_a_lens``
otherwise, written as the gallery's CSV export.

The truth is read here only (research, never an asset). It measures what an inspection round
buys: graded lenses join the next ``training_set`` as positives and leave the held-out negatives.

    python -m research.grading_round --lake /tmp/demo/lake --out /tmp/round1.csv
    DHS_LAKE=/tmp/demo/lake dhs grade /tmp/round1.csv
    DHS_LAKE=/tmp/demo/lake dhs materialize evaluation_report candidate_gallery
    python -m research.demo_headline --lake /tmp/demo/lake

``DHS_MOCK_SEED`` and ``DHS_MOCK_DIR`` must name the lake's mock realisation (its truth file; another
is refused). Results: BENCHMARKS.md, *Lens finder recipe (demo profile): ablations* (one grading
round) and *What holds the all-injection AUROC* (graded lenses are no longer injection hosts).
"""

from __future__ import annotations

import argparse
import csv
import json

import table_registry as T
from darkhaloscope.errors import InputError
from darkhaloscope.evaluation.discovery import hidden_lens_recovery
from darkhaloscope.search.grades import GRADE_COLUMNS
from dhs.demo_summary import hidden_lens_truth
from lake_platform.lake import Lake
from resources.config import build_resources


def oracle_grades(lake: Lake, top: int | None) -> list[dict]:
    """Rows of :data:`GRADE_COLUMNS` for the ``top`` best-ranked candidates (None: every one),
    graded by the truth."""
    survey = build_resources()["survey"]
    if not survey.is_mock:
        raise SystemExit("the oracle grader needs the mock survey's truth (DHS_SURVEY=mock)")
    try:
        truth = hidden_lens_truth(lake, survey)
    except InputError as exc:
        raise SystemExit(str(exc)) from exc
    candidates = lake.table(*T.CANDIDATES.key).read().sort_by("rank")
    shown = candidates if top is None else candidates.slice(0, top)
    report = hidden_lens_recovery(shown, truth, lake.table(*T.KNOWN_LENSES.key).read())
    return [
        {**{c: r[c] for c in GRADE_COLUMNS if c != "grade"}, "grade": "not_a_lens" if r["match"] == "false" else "A"}
        for r in report.candidates.to_pylist()
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lake", required=True)
    ap.add_argument("--out", required=True, help="the grades CSV to write")
    ap.add_argument("--top", type=int, default=None, help="grade only the N best-ranked candidates (default: all)")
    a = ap.parse_args()
    rows = oracle_grades(Lake(a.lake), a.top)
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(GRADE_COLUMNS))
        w.writeheader()
        for r in rows:
            w.writerow(
                {
                    **r,
                    "ra": repr(r["ra"]),
                    "dec": repr(r["dec"]),
                    "score": repr(r["score"]),
                    "known": str(r["known"]).lower(),
                }
            )
    print(
        json.dumps(
            {
                "graded": len(rows),
                "lenses": sum(r["grade"] == "A" for r in rows),
                "not_a_lens": sum(r["grade"] == "not_a_lens" for r in rows),
                "out": a.out,
            }
        )
    )


if __name__ == "__main__":
    main()
