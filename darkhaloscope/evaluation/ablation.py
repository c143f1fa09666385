"""The source-realism ablation: which aspects of source realism and imaging nuisance move the
finder's transfer to the truth world, and its completeness there?

Each arm is a finder trained through the same training path on injections of one source model
(``lensing.source_models``: sersic | sersic_clumps | cosmos) and one imaging nuisance
(``lensing.nuisance``: none | survey), every other input held fixed (the training set, its hosts,
the stream's seeds). Every arm is scored on the same truth world: the test split's known lenses
(drawn by the independent truth renderer on the mock) and the test split's negatives, both unseen
in training. An arm's row holds its AUROC of truth lenses against those negatives, its recall of
the truth lenses at the score threshold where 1 % of its own negatives pass (fpr = 1e-2), the
realism probe's AUROC (``evaluation.realism``) and ΔC, its recall minus the Sérsic baseline's
(``sersic`` with the same nuisance, else ``sersic/none``), with a paired bootstrap standard
deviation: the same lenses are resampled in both arms, so what they share cancels.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..errors import InputError
from ..lensing.nuisance import check_nuisance
from ..lensing.source_models import canonical_source_model
from ..seeding import rng_for
from ..stats import roc_auc
from ..training.data import VAL_STREAM_KEY, TrainingArrays, injected_arrays
from .thresholds import order_statistic_threshold

#: The ablation's page (table and figure) in its files folder.
ABLATION_PAGE = "ablation.html"
#: The false-positive rate on an arm's own held-out negatives that sets its recall threshold.
ABLATION_FPR = 1e-2
#: Bootstrap resamples of the lenses behind delta_c_sd.
DELTA_BOOTSTRAP_RESAMPLES = 1000
#: The baseline source model ΔC is measured against.
BASELINE_SOURCE = "sersic"
#: The arms of each profile, (source model, nuisance): demo a reduced design (sources alone),
#: full the whole {sersic, sersic_clumps, cosmos} x {none, survey} grid.
PROFILE_ARMS = {
    "demo": (("sersic", "none"), ("sersic_clumps", "none"), ("cosmos", "none")),
    "full": tuple((s, n) for n in ("none", "survey") for s in ("sersic", "sersic_clumps", "cosmos")),
}

ABLATION_SCHEMA = pa.schema(
    [
        pa.field("arm", pa.string()),
        pa.field("source_model", pa.string()),
        pa.field("nuisance", pa.string()),
        pa.field("n_truth", pa.int64()),
        pa.field("n_negatives", pa.int64()),
        pa.field("auroc_truth", pa.float64()),
        pa.field("threshold", pa.float64()),
        pa.field("recall_truth", pa.float64()),
        pa.field("probe_auroc", pa.float64()),
        pa.field("closure_pull", pa.float64()),
        pa.field("delta_c", pa.float64()),
        pa.field("delta_c_sd", pa.float64()),
        pa.field("baseline_arm", pa.string()),
    ]
)


def arm_name(source_model: str, nuisance: str) -> str:
    """The arm's name, ``<source_model>/<nuisance>``."""
    return f"{source_model}/{nuisance}"


def parse_arm(name: str) -> tuple[str, str]:
    """(source model, nuisance) of an arm named ``<source_model>/<nuisance>``; InputError naming
    the arm when either part is unknown."""
    source, sep, nuisance = str(name).partition("/")
    if not sep:
        raise InputError(f"ablation arm {name!r} must be <source_model>/<nuisance>, e.g. 'cosmos/survey'")
    try:
        check_nuisance(nuisance)
        return canonical_source_model(source), nuisance
    except InputError as exc:
        raise InputError(f"ablation arm {name!r}: {exc}") from exc


def profile_arms(profile: str) -> list[str]:
    """The arm names of a compute profile (demo: 3, full: 6); InputError for another profile."""
    if profile not in PROFILE_ARMS:
        raise InputError(f"the ablation has arms for the profiles {sorted(PROFILE_ARMS)}, not {profile!r}")
    return [arm_name(s, n) for s, n in PROFILE_ARMS[profile]]


def stream_injections(val: TrainingArrays, device: str = "cpu") -> tuple[pa.Table, np.ndarray]:
    """The realism probe's injections of an arm: its stream's fixed validation injections into the
    val split's hosts (``val``: the val rows of the training set with the arm's stream; the draw
    the trainer validates on, ``training.data.validation_arrays``). Returns (rows with
    ``injection_id`` (row index), ``host_object_id``, ``theta_e_arcsec`` [arcsec], ``arc_snr``;
    their stamps (n, 3, H, W) [nmgy/pixel]). InputError without a stream or val-split hosts."""
    from ..lensing.stream import draw_injections

    if val.stream is None or not val.n_hosts:
        raise InputError(
            f"training set {val.source}: the ablation's probe needs val-split injection hosts and a stream"
        )
    draw = draw_injections(
        val.host_columns, val.invvar, val.stream.validation, VAL_STREAM_KEY, val.stream.val_injections_per_host, device
    )
    inj = injected_arrays(val, draw)
    hosts = val.host_columns.column("object_id").to_numpy(zero_copy_only=False)[draw.host_row]
    rows = pa.table(
        {
            "injection_id": pa.array(np.arange(len(inj)), pa.int64()),
            "host_object_id": pa.array(hosts, pa.int64()),
            "theta_e_arcsec": pa.array(inj.theta_e_arcsec, pa.float64()),
            "arc_snr": pa.array(inj.arc_snr, pa.float64()),
        }
    )
    return rows, inj.image


def truth_detections(truth_scores, negative_scores, fpr: float = ABLATION_FPR) -> dict:
    """One arm's scores of the truth world: {auroc_truth, threshold, recall_truth, hits, n_truth,
    n_negatives}. ``truth_scores`` (N,) and ``negative_scores`` (M,) are calibrated probabilities,
    NaN where a stamp was unscorable (a truth lens then counts as missed; a negative leaves the
    threshold). The threshold is the order statistic of the negatives with ``floor(fpr * M)``
    above it; ``hits`` (N,) bool, which truth lenses score strictly above it.

    InputError with no truth lens or fewer than ``1 / fpr`` valid negatives (no such threshold)."""
    t = np.asarray(truth_scores, np.float64).ravel()
    neg = np.asarray(negative_scores, np.float64).ravel()
    neg = neg[np.isfinite(neg)]
    if t.size == 0:
        raise InputError("the ablation has no truth lenses to score (test-split known lenses unseen in training)")
    if neg.size * fpr < 1.0:
        raise InputError(
            f"the ablation's fpr={fpr:g} threshold needs at least {int(np.ceil(1 / fpr))} valid held-out "
            f"negatives, got {neg.size}"
        )
    threshold, _ = order_statistic_threshold(np.sort(neg)[::-1], fpr)
    hits = np.isfinite(t) & (np.nan_to_num(t, nan=-np.inf) > threshold)
    ok = np.isfinite(t)
    labels = np.r_[np.ones(int(ok.sum()), np.int8), np.zeros(neg.size, np.int8)]
    return {
        "auroc_truth": roc_auc(np.r_[t[ok], neg], labels),
        "threshold": threshold,
        "recall_truth": float(hits.mean()),
        "hits": hits,
        "n_truth": int(t.size),
        "n_negatives": int(neg.size),
    }


def paired_delta(
    base_hits, arm_hits, seed_key: tuple = ("evaluation", "realism_ablation"), n_boot: int = DELTA_BOOTSTRAP_RESAMPLES
) -> tuple[float, float]:
    """(ΔC, its sd): the arm's recall of the truth lenses minus the baseline's, from per-lens
    detections (bool, the same lenses in the same order in both), and the standard deviation of
    that difference over ``n_boot`` bootstrap resamples of the lenses, each resample taking the
    same lenses in both arms (paired). InputError when the arrays differ in length or are empty."""
    b = np.asarray(base_hits, bool).ravel()
    a = np.asarray(arm_hits, bool).ravel()
    if b.shape != a.shape or b.size == 0:
        raise InputError(f"paired ΔC needs the same non-empty set of lenses in both arms, got {b.size} and {a.size}")
    d = a.astype(np.float64) - b.astype(np.float64)
    idx = rng_for(*seed_key, "delta_c").integers(0, d.size, (n_boot, d.size))
    return float(d.mean()), float(d[idx].mean(axis=1).std(ddof=1))


def baseline_of(arm: str, arms: list[str]) -> str | None:
    """The arm ΔC is measured against: the Sérsic arm of the same nuisance, else ``sersic/none``,
    else None (no baseline among ``arms``)."""
    _, nuisance = parse_arm(arm)
    for candidate in (arm_name(BASELINE_SOURCE, nuisance), arm_name(BASELINE_SOURCE, "none")):
        if candidate in arms:
            return candidate
    return None


def ablation_table(arms: dict[str, dict]) -> pa.Table:
    """The ablation's table (ABLATION_SCHEMA), one row per arm, from ``arms``: arm name ->
    :func:`truth_detections` result with ``probe_auroc`` (None when unmeasured) added. closure_pull
    is null: the closure (``selection_closure``) is not rerun per arm."""
    names = list(arms)
    rows = []
    for name in names:
        r = arms[name]
        source, nuisance = parse_arm(name)
        base = baseline_of(name, names)
        delta, sd = paired_delta(arms[base]["hits"], r["hits"]) if base is not None else (None, None)
        rows.append(
            {
                "arm": name,
                "source_model": source,
                "nuisance": nuisance,
                **{k: r[k] for k in ("n_truth", "n_negatives", "auroc_truth", "threshold", "recall_truth")},
                "probe_auroc": r.get("probe_auroc"),
                "closure_pull": None,
                "delta_c": delta,
                "delta_c_sd": sd,
                "baseline_arm": base,
            }
        )
    return pa.Table.from_pylist(rows, schema=ABLATION_SCHEMA)
