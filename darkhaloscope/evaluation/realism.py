"""The realism gate: can a linear probe on the lens finder's own representation tell the truth
world's lenses from the injections it was trained on?

The finder trains on injections of the project's engine (``darkhaloscope.lensing``); the lenses it
must find are drawn otherwise (on the mock by an independent renderer, ``mock_survey.truth_render``;
on DR10 by nature). A cross-validated logistic regression on the penultimate-layer features
(``training.inference.stamp_features``) of truth lenses against injections matched to them in
Einstein radius and — where both record them — arc S/N and the source's half-light radius and
position measures how far apart the two are in the space the finder decides in: AUROC 0.5 means the
finder cannot tell them apart, AUROC near 1 that its training set is a different world from the one
it is applied to (the seed study's linear probe separated real lenses from its injections at AUROC
0.997).

The AUROC is of the out-of-fold probabilities (each row scored by a probe fitted on the other
folds: a probe scored on its own fit measures memorisation); its 95 % interval is a percentile
bootstrap of those probabilities, resampled by group (an injection's host), so it holds the
sampling of the rows, not the refits of the probe.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import pyarrow as pa

from ..errors import InputError
from ..seeding import rng_for
from ..stats import auc_bootstrap_interval, roc_auc

#: Folds of the probe's stratified (group) cross-validation.
PROBE_FOLDS = 5
#: Bootstrap resamples behind the probe's 95 % interval.
PROBE_BOOTSTRAP_RESAMPLES = 1000
#: A probe AUROC above this warns: the finder's representation separates the two worlds.
PROBE_WARN_AUROC = 0.70
#: Arc S/N below which arcs are matched as equal (an arc of S/N 0 has no logarithm).
ARC_SNR_FLOOR = 0.1
#: The matching variables and how each is compared: θ_E linearly (arcsec), the arc S/N and the
#: source's half-light radius in log (a factor two matters alike at S/N 10 and 100, at 0.05″ and
#: 0.5″), the source's offset β/θ_E linearly. The source's size and position are matched because
#: the injection proposal spreads them far wider than any lens sample (doubles beyond the caustic,
#: sources of 0.03″): matched on θ_E and S/N alone, a probe tells arcs from doubles, which is the
#: population, not the realism of the rendering.
MATCH_TRANSFORMS = {
    "theta_e_arcsec": lambda v: v,
    "arc_snr": lambda v: np.log10(np.maximum(v, ARC_SNR_FLOOR)),
    "src_r_sersic_arcsec": np.log10,
    "src_beta_frac": lambda v: v,
}

REALISM_SCHEMA = pa.schema(
    [
        pa.field("comparison", pa.string()),
        pa.field("n_truth", pa.int64()),
        pa.field("n_injections", pa.int64()),
        pa.field("probe_auroc", pa.float64()),
        pa.field("ci95_lo", pa.float64()),
        pa.field("ci95_hi", pa.float64()),
        pa.field("matched_on", pa.string()),
    ]
)


def _matrix(features, what: str) -> np.ndarray:
    x = np.asarray(features, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] == 0:
        raise InputError(f"{what}: features must be a (rows, features) array, got shape {x.shape}")
    bad = ~np.isfinite(x).all(axis=1)
    if bad.any():
        raise InputError(
            f"{what}: {int(bad.sum())} rows hold NaN or infinite features (first row {np.flatnonzero(bad)[0]})"
        )
    return x


def probe_auroc(
    truth_features,
    injection_features,
    injection_groups=None,
    folds: int = PROBE_FOLDS,
    n_boot: int = PROBE_BOOTSTRAP_RESAMPLES,
    seed_key: tuple = ("evaluation", "realism_probe"),
) -> dict:
    """AUROC of a cross-validated linear probe (standardised features, L2 logistic regression,
    ``folds``-fold stratified cross-validation; stratified group folds when ``injection_groups``
    names each injection's host, every truth lens its own group) telling truth lenses (label 1)
    from injections (label 0), with its 95 % bootstrap interval (resampled by group).

    Returns {probe_auroc, ci95_lo, ci95_hi, n_truth, n_injections}. InputError when a class has
    fewer than ``folds`` rows, the feature widths differ or a row is not finite.
    """
    from ..training.gates import cross_validated_lr_probabilities

    t = _matrix(truth_features, "truth lenses")
    j = _matrix(injection_features, "injections")
    if t.shape[1] != j.shape[1]:
        raise InputError(f"truth lenses have {t.shape[1]} features, injections {j.shape[1]}")
    for what, n in (("truth lenses", len(t)), ("injections", len(j))):
        if n < folds:
            raise InputError(
                f"the realism probe needs at least {folds} {what} ({folds}-fold cross-validation), got {n}"
            )
    groups = None
    if injection_groups is not None:
        g = np.asarray(injection_groups).astype(np.int64).ravel()
        if g.shape != (len(j),):
            raise InputError(f"injection_groups has {g.size} entries for {len(j)} injections")
        if np.unique(g).size < folds:
            raise InputError(f"the realism probe needs injections from at least {folds} hosts, got {np.unique(g).size}")
        # truth lenses are their own groups, numbered past the hosts'
        groups = np.r_[np.arange(len(t)) + int(g.max()) + 1, g]
    x = np.vstack([t, j])
    y = np.r_[np.ones(len(t), np.int8), np.zeros(len(j), np.int8)]
    p = cross_validated_lr_probabilities(x, y, seed=seed_key, folds=folds, groups=groups)
    lo, hi = auc_bootstrap_interval(p, y, rng_for(*seed_key, "ci95"), n_boot=n_boot, level=0.95, clusters=groups)
    return {"probe_auroc": roc_auc(p, y), "ci95_lo": lo, "ci95_hi": hi, "n_truth": len(t), "n_injections": len(j)}


def match_injections(
    truth: pa.Table, injections: pa.Table, on: Sequence[str], seed_key: tuple, per_truth: int = 1
) -> np.ndarray:
    """Row indices into ``injections`` of ``per_truth`` nearest neighbours of every row of
    ``truth``, without replacement, in the columns ``on`` (each transformed by MATCH_TRANSFORMS and
    scaled by the injections' standard deviation). Truth lenses take their turn in a seeded random
    order, so no lens is favoured by its position. With ``on`` empty the injections are drawn at
    random.

    InputError when a column is missing or not finite, or when there are fewer injections than
    ``per_truth`` times the truth lenses.
    """
    on = list(on)
    for name in on:
        if name not in MATCH_TRANSFORMS:
            raise InputError(f"unknown matching variable {name!r}; known: {list(MATCH_TRANSFORMS)}")
        for what, t in (("truth lenses", truth), ("injections", injections)):
            if name not in t.column_names or not np.isfinite(_column(t, name)).all():
                raise InputError(f"{what}: column {name!r} is missing or not finite")
    n_t, n_j = truth.num_rows, injections.num_rows
    if n_j < per_truth * n_t:
        raise InputError(f"{n_j} injections cannot give {per_truth} matches to each of {n_t} truth lenses")
    rng = rng_for(*seed_key, "match")
    if not on:
        return rng.choice(n_j, size=per_truth * n_t, replace=False)
    zj = np.column_stack([MATCH_TRANSFORMS[n](_column(injections, n)) for n in on])
    zt = np.column_stack([MATCH_TRANSFORMS[n](_column(truth, n)) for n in on])
    sd = zj.std(axis=0)
    scale = np.where(sd > 0, sd, 1.0)
    zj, zt = zj / scale, zt / scale
    free = np.ones(n_j, bool)
    chosen = []
    for i in rng.permutation(n_t):
        d = np.where(free, ((zj - zt[i]) ** 2).sum(axis=1), np.inf)
        picks = np.argsort(d, kind="stable")[:per_truth]
        free[picks] = False
        chosen.extend(picks.tolist())
    return np.asarray(chosen, np.int64)


def _column(table: pa.Table, name: str) -> np.ndarray:
    return np.asarray(table.column(name).to_numpy(zero_copy_only=False), np.float64)


def realism_row(
    comparison: str, probe: dict | None, n_truth: int, n_injections: int, matched_on: Sequence[str]
) -> dict:
    """One row of REALISM_SCHEMA; ``probe`` is :func:`probe_auroc`'s result, or None when the
    comparison had too few rows to cross-validate (its AUROC and interval are then null)."""
    probe = probe or {}
    return {
        "comparison": comparison,
        "n_truth": int(n_truth),
        "n_injections": int(n_injections),
        "probe_auroc": probe.get("probe_auroc"),
        "ci95_lo": probe.get("ci95_lo"),
        "ci95_hi": probe.get("ci95_hi"),
        "matched_on": ",".join(matched_on) if matched_on else "none (random draw)",
    }


def realism_table(rows: list[dict]) -> pa.Table:
    """The realism probe's table (REALISM_SCHEMA) from :func:`realism_row` rows."""
    return pa.Table.from_pylist(rows, schema=REALISM_SCHEMA)


def probe_warns(table: pa.Table, limit: float = PROBE_WARN_AUROC) -> list[str]:
    """The comparisons whose probe AUROC exceeds ``limit`` (the realism check warns on them)."""
    return [r["comparison"] for r in table.to_pylist() if r["probe_auroc"] is not None and r["probe_auroc"] > limit]


def probe_comparison(
    comparison: str,
    truth: pa.Table,
    truth_images: np.ndarray,
    injections: pa.Table,
    injection_images: Callable[[list[int]], np.ndarray],
    model,
    spec,
    device: str,
    seed_key: tuple = ("evaluation", "realism_probe"),
    n_boot: int = PROBE_BOOTSTRAP_RESAMPLES,
) -> dict:
    """One realism-probe row (:func:`realism_row`).

    truth: the truth lenses, one row per stamp of ``truth_images`` (N, 3, H, W) nmgy, with those
    of the MATCH_TRANSFORMS columns the truth records; injections: rows of the injection bank
    (``injection_id``, ``host_object_id``, the matching columns; failed renders left out by the
    caller), matched to the truth one to one (:func:`match_injections`) on the MATCH_TRANSFORMS
    columns both record; ``injection_images(ids)``
    returns their stamps in the order of ``ids``. Features come from the finder ``model`` with its
    checkpoint ``spec`` (:func:`training.inference.stamp_features`); rows without valid features
    leave the probe. With fewer than PROBE_FOLDS rows of a class (or injection hosts) the AUROC is
    null.
    """
    from ..training.inference import stamp_features

    on = [n for n in MATCH_TRANSFORMS if n in truth.column_names and n in injections.column_names]
    picked = injections.take(pa.array(match_injections(truth, injections, on, seed_key), pa.int64()))
    ids = picked.column("injection_id").to_pylist()
    truth_f, truth_ok, _ = stamp_features(model, spec, truth_images, device=device)
    inj_f, inj_ok, _ = stamp_features(model, spec, injection_images(ids), device=device)
    truth_f, inj_f = truth_f[truth_ok], inj_f[inj_ok]
    hosts = picked.column("host_object_id").to_numpy(zero_copy_only=False)[inj_ok]
    probe = None
    if min(len(truth_f), len(inj_f), np.unique(hosts).size) >= PROBE_FOLDS:
        probe = probe_auroc(truth_f, inj_f, hosts, seed_key=seed_key, n_boot=n_boot)
    return realism_row(comparison, probe, len(truth_f), len(inj_f), on)
