"""The lens finder's headline numbers from a materialized lake (the demo's, any DHS_MOCK_SEED), as
one JSON line: :func:`darkhaloscope.evaluation.headline.headline` of the lake's published tables
(the numbers ``dhs demo`` prints at its end, in full).

``--without-hidden-lenses`` adds the threshold, recall and completeness had the held-out negatives
held none of the mock sky's hidden lenses, and the injections' AUROC had no hidden lens been an
injection host (a diagnostic with the truth, :func:`dhs.demo_summary.hidden_lens_truth`, which
refuses the truth of a mock the lake was not built from).

    python -m research.demo_headline --lake /path/to/lake [--without-hidden-lenses]

Results: BENCHMARKS.md, *The headline AUROCs with their intervals, and the published demos on a
later machine*, and each recipe section's three-seed rows.
"""

from __future__ import annotations

import argparse
import json

from darkhaloscope.errors import InputError
from dhs.demo_summary import hidden_lens_truth, lake_headline
from lake_platform.lake import Lake
from resources.config import build_resources


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lake", required=True)
    ap.add_argument(
        "--without-hidden-lenses",
        action="store_true",
        help="also the numbers had the held-out negatives held no hidden lens (reads the truth of the mock "
        "DHS_MOCK_SEED and DHS_MOCK_DIR name, and refuses one the lake was not built from)",
    )
    a = ap.parse_args()
    lake = Lake(a.lake)
    hidden = None
    if a.without_hidden_lenses:
        try:
            hidden = hidden_lens_truth(lake, build_resources()["survey"]).column("object_id").to_numpy()
        except InputError as exc:
            raise SystemExit(str(exc)) from exc
    print(json.dumps(lake_headline(lake, hidden)))


if __name__ == "__main__":
    main()
