"""The test rows' AUROCs with their intervals, and the published stacked ensemble against each
of its members on the same test rows.

The score tables hold, beside ``score`` (the published model), one ``score_<member>`` column per
member of a stacked ensemble, from the same forward pass. Each model gets its own threshold at the
target false-positive rate from the same held-out negatives (the threshold rule of
``thresholds``), so the comparison is at equal false-positive rate, never at equal score.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..seeding import rng_for
from ..stats import auc_bootstrap_interval, roc_auc
from .thresholds import order_statistic_threshold, valid_scores

#: Prefix of the member score columns written beside ``score`` for a stacked ensemble.
MEMBER_SCORE_PREFIX = "score_"


def member_score_columns(table: pa.Table) -> list[str]:
    """The ``score_<member>`` columns of a score table (empty for a single network)."""
    return [c for c in table.column_names if c.startswith(MEMBER_SCORE_PREFIX)]


#: Bootstrap resamples behind each interval of :func:`auroc_intervals`.
AUROC_BOOTSTRAP_RESAMPLES = 1000


def usable_scores(table: pa.Table, what: str, column: str = "score") -> np.ndarray:
    """The usable scores of ``column`` of ``table`` (:func:`thresholds.valid_scores`); ``what``
    names the table in errors."""
    score, usable = valid_scores(table, what, column)
    return score[usable]


def auroc_intervals(
    injections: pa.Table,
    controls: pa.Table,
    real: pa.Table,
    negatives: pa.Table,
    n_boot: int = AUROC_BOOTSTRAP_RESAMPLES,
    seed_key: tuple = ("evaluation", "auroc_intervals"),
) -> pa.Table:
    """The published score's AUROC on the test rows, one row per comparison, with percentile
    bootstrap 68 % and 95 % intervals: injections against their paired controls, resampled by host
    (``host_object_id``: the bank puts each host under several injections, and its controls are one
    host's score repeated, so the host, not the row, is the independent draw), and real positives
    against held-out negatives, resampled by row (each a different galaxy). Unscorable rows are left
    out. Each interval's resamples are seeded by ``seed_key``, the comparison and the level."""
    (inj, inj_ok), (ctrl, ctrl_ok) = (
        valid_scores(injections, "injection scores"),
        valid_scores(controls, "control scores"),
    )
    host = np.r_[
        injections.column("host_object_id").to_numpy(zero_copy_only=False)[inj_ok],
        controls.column("host_object_id").to_numpy(zero_copy_only=False)[ctrl_ok],
    ]
    comparisons = (
        ("injections vs paired controls", inj[inj_ok], ctrl[ctrl_ok], host, "host"),
        (
            "real positives vs held-out negatives",
            usable_scores(real, "real positive scores"),
            usable_scores(negatives, "negative scores"),
            None,
            "object",
        ),
    )
    rows = []
    for name, pos, neg, clusters, unit in comparisons:
        s, y = np.r_[pos, neg], np.r_[np.ones(pos.size), np.zeros(neg.size)]
        row = {"comparison": name, "auroc": auroc(pos, neg)}
        for level in (0.68, 0.95):
            lo, hi = (
                auc_bootstrap_interval(s, y, rng_for(*seed_key, name, level), n_boot, level, clusters)
                if pos.size and neg.size
                else (float("nan"), float("nan"))
            )
            row[f"ci{round(level * 100)}_lo"], row[f"ci{round(level * 100)}_hi"] = lo, hi
        row.update(
            n_pos=int(pos.size),
            n_neg=int(neg.size),
            resampled=unit,
            n_resampled=int(np.unique(clusters).size) if clusters is not None else int(s.size),
        )
        rows.append(row)
    return pa.Table.from_pylist(rows)


def auroc(pos: np.ndarray, neg: np.ndarray) -> float:
    """AUROC of scores ``pos`` (lenses) against ``neg``; NaN when either is empty."""
    if not pos.size or not neg.size:
        return float("nan")
    return roc_auc(np.r_[pos, neg], np.r_[np.ones(pos.size), np.zeros(neg.size)])


def model_comparison(
    injections: pa.Table, controls: pa.Table, real: pa.Table, negatives: pa.Table, fpr: float = 1e-2
) -> pa.Table:
    """One row per model (``score`` = the published ensemble, then each member): AUROC of
    injections against their paired controls and of real positives against held-out negatives,
    its threshold at ``fpr`` from the held-out negatives, and there the completeness of the
    injections and the recall of the real positives. Empty when the tables hold no member scores."""
    members = member_score_columns(negatives)
    rows = []
    for column in (["score"] + members) if members else []:
        neg = usable_scores(negatives, "negative scores", column)
        t = order_statistic_threshold(np.sort(neg)[::-1], fpr)[0] if fpr * neg.size >= 1 else None
        inj, real_s = (
            usable_scores(injections, "injection scores", column),
            usable_scores(real, "real positive scores", column),
        )
        rows.append(
            {
                "model": "stacked_ensemble" if column == "score" else column[len(MEMBER_SCORE_PREFIX) :],
                "auroc_injections_vs_controls": auroc(inj, usable_scores(controls, "control scores", column)),
                "auroc_real_vs_negatives": auroc(real_s, neg),
                "threshold": t,
                "completeness": float(np.mean(inj > t)) if t is not None and inj.size else float("nan"),
                "real_recall": float(np.mean(real_s > t)) if t is not None and real_s.size else float("nan"),
                "n_injections": int(inj.size),
                "n_real": int(real_s.size),
                "n_negatives": int(neg.size),
            }
        )
    return pa.Table.from_pylist(rows) if rows else pa.table({"model": pa.array([], pa.string())})
