"""One round of the grading loop on a mock-survey lake, with the mock's truth standing in for the
human grader: the gallery's top ``--top`` candidates graded ``A`` where they are a hidden lens of
the mock sky or a known lens, ``not_a_lens`` otherwise, written as the gallery's CSV export.

The truth is read here only (a benchmark, never an asset). It measures what an inspection round
buys: graded lenses join the next ``training_set`` as positives and leave the held-out negatives.

    python benchmarks/grading_round.py --lake /tmp/demo/lake --out /tmp/round1.csv
    DHS_LAKE=/tmp/demo/lake dhs grade /tmp/round1.csv
    DHS_LAKE=/tmp/demo/lake dhs materialize evaluation_report candidate_gallery
    python benchmarks/demo_headline.py --lake /tmp/demo/lake

``DHS_MOCK_SEED`` must name the lake's mock realisation (its truth file).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow.parquet as pq  # noqa: E402

from darkhaloscope.evaluation.discovery import hidden_lens_recovery  # noqa: E402
from darkhaloscope.search.gallery import DEFAULT_TOP_N, top_candidates  # noqa: E402
from darkhaloscope.search.grades import GRADE_COLUMNS  # noqa: E402
from lakehouse.lake import Lake  # noqa: E402
from resources.config import build_resources  # noqa: E402


def oracle_grades(lake: Lake, top: int) -> list[dict]:
    """Rows of :data:`GRADE_COLUMNS` for the ``top`` best-ranked candidates, graded by the truth."""
    survey = build_resources()["survey"]
    if not survey.location().is_mock:
        raise SystemExit("the oracle grader needs the mock survey's truth (DHS_SURVEY=mock)")
    shown = top_candidates(lake.read_table("search", "candidates"), top)
    report = hidden_lens_recovery(
        shown, pq.read_table(survey.mock_manifest().hidden_truth_path), lake.read_table("survey", "known_lenses")
    )
    return [
        {**{c: r[c] for c in GRADE_COLUMNS if c != "grade"}, "grade": "not_a_lens" if r["match"] == "false" else "A"}
        for r in report.candidates.to_pylist()
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lake", required=True)
    ap.add_argument("--out", required=True, help="the grades CSV to write")
    ap.add_argument(
        "--top", type=int, default=DEFAULT_TOP_N, help="candidates shown to the grader (the gallery's size)"
    )
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
