"""The evaluation's AUROCs with their bootstrap intervals: the point values are scikit-learn's, the
injections are resampled by host and the known lenses and negatives by galaxy, unscorable rows are
left out, and the same inputs give the same intervals."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from sklearn import metrics as skm

from darkhaloscope.errors import InputError
from darkhaloscope.evaluation.comparison import auroc_intervals
from darkhaloscope.seeding import rng_for
from darkhaloscope.stats import auc_bootstrap_interval


def _bank(n_hosts: int = 60, per_host: int = 9):
    """An injection bank as the pipeline builds it: each host under ``per_host`` injections, its
    controls that host's one score repeated, and a host offset shared by its injections; plus
    real positives and negatives, one galaxy each. One injection failed to render."""
    rng = rng_for("test", "aurocs")
    host = np.repeat(np.arange(100, 100 + n_hosts, dtype=np.int64), per_host)
    offset = np.repeat(rng.normal(0.0, 1.5, n_hosts), per_host)
    inj_logit = offset + rng.normal(1.5, 1.0, host.size)
    valid = np.ones(host.size, bool)
    valid[5] = False
    inj = pa.table(
        {"score": pa.array(1 / (1 + np.exp(-inj_logit)), mask=~valid), "valid": valid, "host_object_id": host}
    )
    ctrl = pa.table({"score": 1 / (1 + np.exp(-offset)), "valid": np.ones(host.size, bool), "host_object_id": host})
    real = pa.table({"score": rng.beta(5, 2, 40), "valid": np.ones(40, bool)})
    neg = pa.table({"score": rng.beta(2, 5, 400), "valid": np.ones(400, bool)})
    return inj, ctrl, real, neg


def _pairs(pos, neg):
    return np.r_[pos, neg], np.r_[np.ones(len(pos)), np.zeros(len(neg))]


def test_aurocs_are_sklearns_with_host_resampled_intervals():
    inj, ctrl, real, neg = _bank()
    table = auroc_intervals(inj, ctrl, real, neg, n_boot=400)
    rows = {r["comparison"]: r for r in table.to_pylist()}
    injections, known = rows["injections vs paired controls"], rows["real positives vs held-out negatives"]
    ok = inj.column("valid").to_numpy()
    s, y = _pairs(inj.column("score").to_numpy(zero_copy_only=False)[ok], ctrl.column("score").to_numpy())
    assert injections["auroc"] == skm.roc_auc_score(y, s)
    assert (injections["n_pos"], injections["n_neg"], injections["resampled"], injections["n_resampled"]) == (
        539,
        540,
        "host",
        60,
    )
    sr, yr = _pairs(real.column("score").to_numpy(), neg.column("score").to_numpy())
    assert known["auroc"] == skm.roc_auc_score(yr, sr)
    assert (known["resampled"], known["n_resampled"]) == ("object", 440)
    for r in rows.values():
        assert r["ci95_lo"] < r["ci68_lo"] < r["auroc"] < r["ci68_hi"] < r["ci95_hi"]
    # the injections' interval resamples whole hosts (their nine injections and nine controls
    # together), seeded by the comparison and the level; the known lenses' resamples galaxies
    host = np.r_[inj.column("host_object_id").to_numpy()[ok], ctrl.column("host_object_id").to_numpy()]
    for level in (0.68, 0.95):
        tag = f"ci{round(level * 100)}"
        rng = rng_for("evaluation", "auroc_intervals", "injections vs paired controls", level)
        assert (injections[f"{tag}_lo"], injections[f"{tag}_hi"]) == auc_bootstrap_interval(
            s, y, rng, 400, level, clusters=host
        )
        rng = rng_for("evaluation", "auroc_intervals", "real positives vs held-out negatives", level)
        assert (known[f"{tag}_lo"], known[f"{tag}_hi"]) == auc_bootstrap_interval(sr, yr, rng, 400, level)
    by_row = auc_bootstrap_interval(
        s, y, rng_for("evaluation", "auroc_intervals", "injections vs paired controls", 0.95), 400, 0.95
    )
    assert by_row != (injections["ci95_lo"], injections["ci95_hi"])
    assert auroc_intervals(inj, ctrl, real, neg, n_boot=400).equals(table)


def test_a_control_of_unknown_validity_is_refused_by_name():
    """The comparison reads scores as every evaluation stage does (``thresholds.valid_scores``): a
    null ``valid`` is ambiguous, not a row to drop."""
    inj, ctrl, real, neg = _bank()
    ctrl = ctrl.set_column(1, "valid", pa.array([None] + [True] * (ctrl.num_rows - 1), pa.bool_()))
    with pytest.raises(InputError, match="control scores: column 'valid' has 1 null value"):
        auroc_intervals(inj, ctrl, real, neg, n_boot=10)
