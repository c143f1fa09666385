"""Where does the per-lens closure miss? The hidden lenses predicted (Σ P_det) and recovered, split by
the truth renderer's source model, the EPL slope and θ_E, beside the bank's own closure: the
scored injections weighted to the mock population, their detected fraction against the mean of the
detection model's out-of-fold P_det (a model that under-predicts its own bank there under-predicts
the hidden lenses for a reason of its own, not of the truth world).

    python -m research.closure_breakdown --lake closure/seed-0/lakehouse \\
        --truth .dhs_mock/demo/seed-0-<key>/truth/hidden_lens_truth.parquet

Prints one JSON line per usable threshold. The detection model is fitted as ``selection_closure``
fits it; unlike the asset, every hidden lens inside the model's validity range is kept (the cells'
sufficiency is not asked).
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import table_registry as T
from darkhaloscope.evaluation.closure import host_scores, theta_e_edges, with_host_parameters
from darkhaloscope.evaluation.detection import cross_validated, feature_values, fit_detection_model
from darkhaloscope.evaluation.populations import importance_weights, injection_columns, named_population
from darkhaloscope.evaluation.scoring import injection_rows
from darkhaloscope.evaluation.thresholds import usable_thresholds
from darkhaloscope.lensing.bank import plan_grid, plan_proposal
from darkhaloscope.lensing.priors import SOURCE_PARAMETERS
from lake_platform.lake import Lake

#: Splits of the hidden lenses: (column, bin edges or None for its values).
SPLITS = (("source_model", None), ("lens_gamma", (1.6, 2.0, 2.2, 2.5)), ("theta_e_arcsec", (0.5, 1.0, 1.5, 2.0, 3.1)))


def splits(hidden: pa.Table, p: np.ndarray, recovered: np.ndarray, use: np.ndarray) -> dict:
    """{split label: [n, Σ P_det, n recovered]} over the usable hidden lenses."""
    out = {}
    for column, edges in SPLITS:
        v = hidden.column(column).to_numpy(zero_copy_only=False)
        groups = (
            [(str(s), v == s) for s in np.unique(v)]
            if edges is None
            else [(f"{column} [{lo:g}, {hi:g})", (v >= lo) & (v < hi)) for lo, hi in zip(edges[:-1], edges[1:])]
        )
        for label, sel in groups:
            sel = sel & use
            out[label] = [int(sel.sum()), round(float(p[sel].sum()), 1), int(recovered[sel].sum())]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lake", required=True, help="a closure run's lake (read only)")
    ap.add_argument("--truth", required=True, help="the mock's hidden_lens_truth.parquet")
    a = ap.parse_args()
    lake = Lake(a.lake)
    hidden = with_host_parameters(pq.read_table(a.truth), lake.table(*T.SWEEPS.key).dataset())
    host_score = host_scores(hidden, lake.table(*T.SEARCH_SCORES.key).dataset())
    injections = injection_rows(lake.table(*T.INJECTION_SCORES.key).dataset(), "injection")
    plan = lake.table(*T.INJECTION_PLAN.key).read()
    proposal, (theta_e, _) = plan_proposal(plan), plan_grid(plan)
    valid = np.asarray(injections.column("valid").to_numpy(zero_copy_only=False), bool)
    bank = injections.filter(pa.array(valid & np.all(np.isfinite(feature_values(injections)), axis=1)))
    cols = injection_columns(bank, (*SOURCE_PARAMETERS, "z_s", "z_l", "theta_e_arcsec"))
    w = importance_weights(named_population("mock", proposal), cols, proposal)
    score = np.asarray(bank.column("score").to_numpy(zero_copy_only=False), np.float64)
    for name, value in usable_thresholds(lake.table(*T.THRESHOLDS.key).read()):
        model = fit_detection_model(bank, name, value, proposal, theta_e_edges(theta_e))
        use = ~model.outside_support(feature_values(hidden))
        p = np.zeros(hidden.num_rows)
        p[use] = model.probability(hidden.filter(pa.array(use)))
        recovered = host_score > value
        cv = cross_validated(bank, value)
        row = {
            "threshold": name,
            "hidden": [int(use.sum()), round(float(p[use].sum()), 1), int(recovered[use].sum())],
            "by": splits(hidden, p, recovered, use),
            "bank_mock_weighted_detected": round(float(np.average(score > value, weights=w)), 3),
            "bank_mock_weighted_oof_p_det": round(float(np.average(cv["p"], weights=w)), 3),
            "brier_cv": round(cv["brier"], 4),
        }
        print(json.dumps(row))


if __name__ == "__main__":
    main()
