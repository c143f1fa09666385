"""The lens finder's headline numbers from a materialized lake (the demo's, any DHS_MOCK_SEED).

Reads only published tables: the ``lens_finder`` registry row (validation AUROC, gates, calibration),
the score tables, ``thresholds``, ``real_lens_recall`` and ``visual_grades``, and prints one JSON
line with what the targets of the demo are stated in: validation AUROC; test AUROC of injections
(all, and those of arc S/N >= 5) against their paired controls and of test-split known lenses
against held-out negatives (less any graded a lens), with the evaluation report's 95 % bootstrap
intervals (the injections resampled by host); at the fpr=1e-2 threshold the
completeness of the injections by arc S/N and the recall of the test-split known lenses; whether
C(θ_E) rises with θ_E (Spearman rank correlation of the θ_E marginal); the gates. Completeness is
also given for resolved arcs (θ_E at least the host's PSF FWHM), and by θ_E for the bright arcs
(S/N >= 20) with the fraction of them unresolved, which shows where the bright arcs are missed;
and the fraction of the paired controls above the threshold by their injection's arc S/N (arcs
of S/N < 2, invisible to any finder, found while their controls are not would point at a leak of
the arc into its host's pixels; found with their controls, at the host); and how many hosts the
injections share, with their AUROC on the N1 and on the N2 hosts alone. ``--without-hidden-lenses``
adds the threshold, recall and completeness had the held-out negatives held none of the mock sky's
hidden lenses, and the injections' AUROC had no hidden lens been an injection host (a diagnostic
with the truth).

    python benchmarks/demo_headline.py --lake /path/to/lake [--without-hidden-lenses]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402

from darkhaloscope.evaluation.comparison import auroc_intervals  # noqa: E402
from darkhaloscope.evaluation.scoring import held_out_negatives, injection_rows  # noqa: E402
from darkhaloscope.evaluation.thresholds import order_statistic_threshold  # noqa: E402
from darkhaloscope.search.grades import published_graded_lens_ids  # noqa: E402
from darkhaloscope.stats import roc_auc  # noqa: E402
from darkhaloscope.training.preprocess import arc_clears_core  # noqa: E402
from lakehouse.lake import Lake  # noqa: E402

SNR_BINS = ((0, 2), (2, 5), (5, 10), (10, 20), (20, 50), (50, np.inf))
THRESHOLD = "fpr=1e-2"


def _scores(table) -> np.ndarray:
    ok = table.column("valid").to_numpy(zero_copy_only=False)
    return table.column("score").to_numpy(zero_copy_only=False)[ok]


def auroc_of(pos: np.ndarray, neg: np.ndarray) -> float:
    """AUROC of scores ``pos`` (lenses) against ``neg``, to 4 decimals."""
    return round(roc_auc(np.r_[pos, neg], np.r_[np.ones(pos.size), np.zeros(neg.size)]), 4)


def _by_snr(p: np.ndarray, snr: np.ndarray, t: float) -> dict:
    return {
        f"{lo}-{hi}": [round(float(np.mean(p[(snr >= lo) & (snr < hi)] > t)), 3), int(((snr >= lo) & (snr < hi)).sum())]
        for lo, hi in SNR_BINS
    }


def without_hidden_lenses(
    neg_scores: np.ndarray,
    neg_ids: np.ndarray,
    hidden_ids: np.ndarray,
    real: np.ndarray,
    p: np.ndarray,
    snr: np.ndarray,
    resolved: np.ndarray,
    inj_host: np.ndarray,
    ctrl: np.ndarray,
    ctrl_host: np.ndarray,
) -> dict:
    """The fpr=1e-2 threshold, recall and completeness had the held-out negatives held no hidden
    lens of the mock sky, and the AUROC of injections against their paired controls had no hidden
    lens been an injection host (its control is then a lens: a diagnostic with the truth, no
    pipeline step can do this before inspection grades it)."""
    clean = neg_scores[~np.isin(neg_ids, hidden_ids)]
    t, _ = order_statistic_threshold(np.sort(clean)[::-1], 1e-2)
    lens_host, lens_ctrl = np.isin(inj_host, hidden_ids), np.isin(ctrl_host, hidden_ids)
    return {
        "hidden_lenses_among_held_out_negatives": int(neg_scores.size - clean.size),
        "threshold_value": float(t),
        "hidden_lenses_among_injection_hosts": int(np.unique(inj_host[lens_host]).size),
        "test_auroc_injections_vs_controls": auroc_of(p[~lens_host], ctrl[~lens_ctrl]),
        "test_auroc_real_vs_negatives": auroc_of(real, clean),
        "recall_test_known_lenses": round(float(np.mean(real > t)), 3),
        "completeness_by_arc_snr": _by_snr(p, snr, t),
        "completeness_by_arc_snr_resolved": _by_snr(p[resolved], snr[resolved], t),
    }


def headline(lake: Lake, hidden_ids: np.ndarray | None = None) -> dict:
    finder = lake.read_table("training", "lens_finder").to_pylist()[0]
    metrics = json.loads(finder["metrics"])
    gates = metrics["gates"] if isinstance(metrics["gates"], list) else json.loads(metrics["gates"])
    inj_scores = lake.dataset("evaluation", "injection_scores")
    inj, ctrl = injection_rows(inj_scores, "injection"), injection_rows(inj_scores, "control")
    cut = lake.read_table("evaluation", "cutout_scores")
    neg = held_out_negatives(cut, published_graded_lens_ids(lake))
    real = cut.filter(pc.and_(pc.equal(cut.column("label"), 1), pc.equal(cut.column("split"), "test")))
    thr = lake.read_table("evaluation", "thresholds").to_pylist()
    t = next(r["threshold"] for r in thr if r["name"] == THRESHOLD)
    ok, ctrl_ok = (rows.column("valid").to_numpy(zero_copy_only=False) for rows in (inj, ctrl))
    p, snr, te, fwhm, inj_host = (
        inj.column(c).to_numpy(zero_copy_only=False)[ok]
        for c in ("score", "arc_snr", "theta_e_arcsec", "psf_fwhm_r", "host_object_id")
    )
    ctrl_p, ctrl_host = (ctrl.column(c).to_numpy(zero_copy_only=False)[ctrl_ok] for c in ("score", "host_object_id"))
    pools = lake.read_table("imaging", "cutouts", columns=["object_id", "pool"]).to_pydict()
    pool_of = dict(zip(pools["object_id"], pools["pool"]))
    inj_pool, ctrl_pool = (np.array([pool_of[h] for h in hosts]) for hosts in (inj_host, ctrl_host))
    resolved = arc_clears_core(te, fwhm, radius=0.0)
    by_te = {float(v): float(np.mean(p[te == v] > t)) for v in np.unique(te)}
    recall = [
        r
        for r in lake.read_table("evaluation", "real_lens_recall").to_pylist()
        if r["threshold_name"] == THRESHOLD and r["tier"] == "all"
    ][0]
    out = {
        "val_auroc": round(finder["val_auroc"], 4),
        "test_auroc_injections_vs_controls": auroc_of(p, ctrl_p),
        # the arcs of S/N < 5 (a quarter of the bank) are those the finder rarely ranks above other
        # hosts; this ranks the others against every control
        "test_auroc_injections_snr_ge_5_vs_controls": auroc_of(p[snr >= 5], ctrl_p),
        # the bank reuses each host across cells: how many hosts its controls are, and the AUROC on
        # the N1 (representative) and N2 (confuser) hosts alone
        "injection_hosts": int(np.unique(inj_host).size),
        "test_auroc_injections_vs_controls_by_host_pool": {
            str(k): [auroc_of(p[inj_pool == k], ctrl_p[ctrl_pool == k]), int(np.unique(inj_host[inj_pool == k]).size)]
            for k in np.unique(inj_pool)
        },
        "test_auroc_real_vs_negatives": auroc_of(_scores(real), _scores(neg)),
        # the evaluation report's intervals: the injections resampled by host, the rest by galaxy
        "test_auroc_ci95": {
            r["comparison"]: [round(r["ci95_lo"], 4), round(r["ci95_hi"], 4)]
            for r in auroc_intervals(inj, ctrl, real, neg).to_pylist()
        },
        "threshold": THRESHOLD,
        "threshold_value": t,
        "n_held_out_negatives": int(neg.num_rows),
        "completeness_by_arc_snr": _by_snr(p, snr, t),
        "completeness_by_arc_snr_resolved": _by_snr(p[resolved], snr[resolved], t),
        "controls_above_threshold_by_arc_snr": _by_snr(
            *(ctrl.column(c).to_numpy(zero_copy_only=False)[ctrl_ok] for c in ("score", "arc_snr")), t
        ),
        "completeness_all": round(float(np.mean(p > t)), 3),
        "recall_test_known_lenses": [recall["n_detected"], recall["n"]],
        "completeness_by_theta_e": {f"{k:.2f}": round(v, 3) for k, v in by_te.items()},
        "arc_snr_ge_20_by_theta_e": {
            f"{v:.2f}": {
                "completeness": round(float(np.mean(p[m] > t)), 3),
                "n": int(m.sum()),
                "unresolved": round(float(np.mean(~resolved[m])), 2),
            }
            for v in np.unique(te)
            if (m := (te == v) & (snr >= 20)).any()
        },
        "spearman_theta_e": round(float(spearmanr(list(by_te), list(by_te.values())).statistic), 3),
        "gates": {g["name"]: [round(g["value"], 4), g["passed"]] for g in gates},
        "ece_before_after": [round(cal["ece_before"], 4), round(cal["ece_after"], 4)]
        if (cal := metrics.get("calibration"))
        else None,
        "best_epoch": metrics["best_epoch"],
        "epochs_run": metrics["epochs_run"],
    }
    if hidden_ids is not None:
        ok_neg = neg.column("valid").to_numpy(zero_copy_only=False)
        out["without_hidden_lenses"] = without_hidden_lenses(
            neg.column("score").to_numpy(zero_copy_only=False)[ok_neg],
            neg.column("object_id").to_numpy()[ok_neg],
            hidden_ids,
            _scores(real),
            p,
            snr,
            resolved,
            inj_host,
            ctrl_p,
            ctrl_host,
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lake", required=True)
    ap.add_argument(
        "--without-hidden-lenses",
        action="store_true",
        help="also the numbers had the held-out negatives held no hidden lens (reads the truth of the mock DHS_MOCK_SEED and "
        "DHS_MOCK_DIR name, and refuses one whose hidden lenses the lake did not search)",
    )
    a = ap.parse_args()
    lake = Lake(a.lake)
    hidden = None
    if a.without_hidden_lenses:
        import pyarrow.parquet as pq

        from darkhaloscope.survey.manifest import survey_origin
        from resources.config import build_resources

        survey = build_resources()["survey"]
        built = survey_origin(lake.dataset("survey", "sweep_files").schema)
        named = survey.location().origin()
        if built is not None and built != named:
            raise SystemExit(
                f"{a.lake} was built from {built}, but DHS_SURVEY / DHS_MOCK_SEED name {named}; set them to the lake's"
            )
        truth = survey.mock_manifest().hidden_truth_path
        hidden = pq.read_table(truth, columns=["object_id"]).column("object_id").to_numpy()
        # the truth is the mock named by DHS_MOCK_SEED / DHS_MOCK_DIR, not necessarily the lake's: every
        # hidden lens of the lake's own mock is a searched galaxy, and another seed's are (nearly) not
        unsearched = ~np.isin(
            hidden, lake.read_table("search", "search_targets", columns=["object_id"]).column("object_id").to_numpy()
        )
        if unsearched.any():
            raise SystemExit(
                f"{truth}: {int(unsearched.sum())} of its {hidden.size} hidden lenses are not among "
                f"the search targets of {a.lake}, so it is the truth of another mock; set DHS_MOCK_SEED and "
                "DHS_MOCK_DIR to those the lake was built with"
            )
    print(json.dumps(headline(lake, hidden)))


if __name__ == "__main__":
    main()
