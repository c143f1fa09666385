"""The source-realism ablation's library (darkhaloscope/evaluation/ablation.py): arms, the recall
at the fpr=1e-2 threshold of an arm's own negatives, the paired ΔC and its bootstrap sd; and the
trainer's per-arm injection models (lens_assets/pipes/train_lens_finder.py)."""

import numpy as np
import pytest

from darkhaloscope.errors import InputError
from darkhaloscope.evaluation.ablation import (
    ablation_table,
    baseline_of,
    paired_delta,
    parse_arm,
    profile_arms,
    truth_detections,
)


def test_profiles_name_three_demo_arms_and_the_six_arm_full_grid():
    assert profile_arms("demo") == ["sersic/none", "sersic_clumps/none", "cosmos/none"]
    full = profile_arms("full")
    assert len(full) == 6 and {parse_arm(a) for a in full} == {
        (s, n) for s in ("sersic", "sersic_clumps", "cosmos") for n in ("none", "survey")
    }


@pytest.mark.parametrize("bad", ["cosmos", "galaxy/none", "sersic/blur"])
def test_an_unknown_arm_is_refused_by_name(bad):
    with pytest.raises(InputError, match="ablation arm"):
        parse_arm(bad)


def test_identical_arms_give_zero_with_zero_spread():
    hits = np.random.default_rng(1).random(400) < 0.6
    delta, sd = paired_delta(hits, hits)
    assert delta == 0.0 and sd == 0.0


def test_a_known_shift_is_recovered_with_the_paired_binomial_sd():
    """The arm finds every lens the baseline finds plus 10 % more: ΔC = 0.1, and the paired sd is
    that of a mean of n Bernoulli(0.1) differences, sqrt(0.1 * 0.9 / n)."""
    n = 2000
    rng = np.random.default_rng(2)
    base = rng.random(n) < 0.5
    arm = base.copy()
    gained = rng.choice(np.flatnonzero(~base), size=n // 10, replace=False)
    arm[gained] = True
    delta, sd = paired_delta(base, arm)
    assert delta == pytest.approx(0.1)
    assert sd == pytest.approx(np.sqrt(0.1 * 0.9 / n), rel=0.1)
    # unpaired, the two recalls' sds would add: pairing is what makes the shift significant
    assert sd < 0.5 * np.hypot(base.std(), arm.std()) / np.sqrt(n)


def test_paired_delta_needs_the_same_lenses():
    with pytest.raises(InputError, match="same non-empty set"):
        paired_delta(np.ones(3, bool), np.ones(4, bool))


def test_recall_at_the_arms_own_one_percent_threshold():
    negatives = np.linspace(0.0, 0.99, 100)  # the 2nd highest, 0.98, is the threshold: 1 negative above
    truth = np.array([0.995, 0.985, 0.5, np.nan])
    r = truth_detections(truth, np.r_[negatives, np.nan])
    assert r["threshold"] == pytest.approx(0.98) and r["n_negatives"] == 100
    assert r["hits"].tolist() == [True, True, False, False] and r["recall_truth"] == 0.5
    # the unscorable lens is missed in the recall and left out of the AUROC
    assert r["auroc_truth"] == pytest.approx((100 + 99 + 50.5) / 300)  # 0.5 ties one negative
    with pytest.raises(InputError, match="at least 100 valid held-out negatives"):
        truth_detections(truth, negatives[:50])


def test_table_measures_delta_against_the_sersic_arm_of_the_same_nuisance():
    rng = np.random.default_rng(3)
    neg = rng.random(200)
    truth = rng.random(50) * 1.2
    arms = {
        "sersic/none": truth_detections(truth, neg),
        "cosmos/none": truth_detections(truth + 0.3, neg),
        "cosmos/survey": truth_detections(truth, neg),
    }
    for a in arms.values():
        a["probe_auroc"] = 0.6
    rows = {r["arm"]: r for r in ablation_table(arms).to_pylist()}
    assert baseline_of("cosmos/survey", list(arms)) == "sersic/none"
    assert rows["sersic/none"]["delta_c"] == 0.0 and rows["sersic/none"]["delta_c_sd"] == 0.0
    assert rows["cosmos/none"]["delta_c"] == pytest.approx(
        rows["cosmos/none"]["recall_truth"] - rows["sersic/none"]["recall_truth"]
    )
    assert rows["cosmos/none"]["delta_c"] > 0 and rows["cosmos/none"]["delta_c_sd"] > 0
    assert rows["cosmos/survey"]["source_model"] == "cosmos" and rows["cosmos/survey"]["nuisance"] == "survey"
    assert all(r["closure_pull"] is None for r in rows.values())


def test_table_rows_satisfy_the_registry_contract():
    from table_registry import REALISM_ABLATION

    neg = np.linspace(0, 1, 100)
    arms = {"sersic/none": truth_detections(np.array([0.5, 1.2]), neg)}
    table = ablation_table(arms)
    assert [c.name for c in REALISM_ABLATION.contract.columns] == table.column_names


def test_trainer_renders_the_arms_models_as_its_own_run():
    from darkhaloscope.lensing.stream import StreamSpec
    from darkhaloscope.training.data import synthetic_arrays
    from lens_assets.pipes.train_lens_finder import with_injection_models

    arrays = synthetic_arrays(8, 33, seed=0)
    with pytest.raises(InputError, match="needs a training set with an injection stream"):
        with_injection_models(arrays, "v", {"source_model": "cosmos"})
    from dataclasses import replace

    arrays = replace(arrays, stream=StreamSpec())
    same, v = with_injection_models(arrays, "v", {})
    assert same is arrays and v == "v"
    arm, v = with_injection_models(arrays, "v", {"source_model": "cosmos", "nuisance": "survey"})
    assert v == "v+cosmos/survey"
    assert arm.stream.config.source_model == "cosmos" and arm.stream.config.nuisance == "survey"
    assert arrays.stream.injection.source_model == "sersic"
    with pytest.raises(InputError, match="not \\['seed'\\]"):
        with_injection_models(arrays, "v", {"seed": 1})
