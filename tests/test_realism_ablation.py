"""The source-realism ablation's library (darkhaloscope/evaluation/ablation.py): arms, the recall
at the fpr=1e-2 threshold of an arm's own negatives, the paired ΔC and its bootstrap sd; and the
trainer's per-arm injection models (lens_assets/pipes/train_lens_finder.py)."""

import numpy as np
import pyarrow as pa
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
    for recorded in ({}, {"source_model": "sersic", "nuisance": "none"}):  # the lens finder's own run
        same, v = with_injection_models(arrays, "v", recorded)
        assert same is arrays and v == "v"
    arm, v = with_injection_models(arrays, "v", {"source_model": "cosmos", "nuisance": "survey"})
    assert v == "v+cosmos/survey"
    assert arm.stream.config.source_model == "cosmos" and arm.stream.config.nuisance == "survey"
    assert arrays.stream.injection.source_model == "sersic"
    with pytest.raises(InputError, match="not \\['seed'\\]"):
        with_injection_models(arrays, "v", {"seed": 1})


def _training_set_table(rng):
    """A training set of 101 px stamps: real positives (an arc) and Gaussian-host negatives that
    host the injection stream (train and val), with a small stream spec."""
    from darkhaloscope.lensing.stream import StreamSpec
    from darkhaloscope.training.preprocess import PreprocessSpec
    from darkhaloscope.training.training_set import assemble_training_set

    split = ["train"] * 24 + ["val"] * 20
    label = ([1] * 8 + [0] * 16) + ([1] * 6 + [0] * 14)
    n, sigma = len(label), 0.004
    yy, xx = np.mgrid[:101, :101] - 50.0
    host = np.exp(-0.5 * (xx**2 + yy**2) / 4.0)[None] * np.array([0.2, 0.5, 0.8])[:, None, None]
    arc = (np.abs(np.hypot(xx, yy) - 8.0) < 1.0) & (xx > 0)
    images = (host[None] + rng.normal(0, sigma, (n, 3, 101, 101))).astype(np.float32)
    images[np.array(label) == 1] += 0.05 * arc.astype(np.float32)
    rows = pa.table(
        {
            "object_id": pa.array(np.arange(n) + 500, pa.int64()),
            "label": pa.array(label, pa.int8()),
            "split": split,
            "tier": ["A" if v else None for v in label],
            "pool": pa.nulls(n, pa.string()),
            "ra": np.linspace(150, 151, n),
            "dec": np.zeros(n),
            "type": ["DEV"] * n,
            "psfsize_g": np.full(n, 1.3, np.float32),
            "psfsize_r": np.linspace(1.0, 1.5, n).astype(np.float32),
            "psfsize_z": np.full(n, 1.1, np.float32),
            "psfdepth_g": np.full(n, 2e3, np.float32),
            "psfdepth_r": np.full(n, 1e3, np.float32),
            "psfdepth_z": np.full(n, 2e2, np.float32),
            "dx_pix": np.zeros(n, np.float32),
            "dy_pix": np.zeros(n, np.float32),
        }
    )
    stream = StreamSpec(injections_per_host=1, val_injections_per_host=1, min_arc_snr=8.0, window=33, render_chunk=8)
    return assemble_training_set(
        rows, images, np.full_like(images, 1.0 / sigma**2), preprocess=PreprocessSpec(crop=65), stream=stream
    )


def test_two_arms_materialize_on_the_same_truth_world(tmp_path, monkeypatch):
    """Two arms (sersic, sersic + clumps) trained one epoch each by the lens finder's trainer
    through Pipes, scored on the same truth lenses and held-out negatives: one row per arm, the
    Sérsic arm its own baseline (ΔC 0), the realism probe measured against each arm's validation
    injections, the contract passed; each arm is its own training run."""
    from pathlib import Path

    import dagster as dg

    from darkhaloscope.evaluation.scoring import CUTOUT_META
    from darkhaloscope.stamps import to_tensor_array
    from io_managers import LakeIOManager
    from lake_platform.lake import Lake
    from lens_assets.realism import realism_ablation
    from lens_assets.shared.partitions import sweep_partitions
    from resources import ComputeResource, LakeResource, SurveyResource
    from tests.support.tiny_finder import use_tiny_training_profile
    from tests.support.wap import run_assets

    root = Path(__file__).resolve().parents[1]
    use_tiny_training_profile(monkeypatch, root)
    rng = np.random.default_rng(0)
    sweep = "sweep-030m005-035p000.fits"
    lake = Lake(str(tmp_path / "lake"))
    lake.write_table("training", "training_set", _training_set_table(rng))
    n_truth, n_neg = 12, 100
    n = n_truth + n_neg
    images = rng.normal(0.0, 0.02, (n, 3, 101, 101)).astype(np.float32)
    images[:n_truth, :, 40:44, 45:56] += 0.5
    cut = {name: pa.nulls(n, pa.string()) for name in CUTOUT_META}
    cut.update(
        object_id=pa.array(np.arange(n), pa.int64()),
        label=pa.array([1] * n_truth + [0] * n_neg, pa.int8()),
        split=pa.array(["test"] * n),
        image=to_tensor_array(images),
    )
    lake.write_table("imaging", "cutouts", pa.table(cut), partition={"sweep_file": sweep})
    resources = {
        "lake": LakeResource(uri=lake.uri),
        "io_manager": LakeIOManager(uri=lake.uri),
        "compute": ComputeResource(device="cpu", profile="demo"),
        "survey": SurveyResource(survey=str(tmp_path / "mirror")),
        "pipes_subprocess_client": dg.PipesSubprocessClient(cwd=str(root)),
    }
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(sweep_partitions.name, [sweep])
    arms = ["sersic/none", "sersic_clumps/none"]
    config = {"ops": {"evaluation__realism_ablation": {"config": {"arms": arms, "epochs": 1}}}}
    result = run_assets([realism_ablation.key], resources, instance, run_config=config)
    checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert checks["realism_ablation_contract"].passed
    rows = {r["arm"]: r for r in lake.read_table("evaluation", "realism_ablation").to_pylist()}
    assert list(rows) == arms
    assert rows["sersic/none"]["delta_c"] == 0.0 and rows["sersic_clumps/none"]["baseline_arm"] == "sersic/none"
    for r in rows.values():
        assert r["n_truth"] == n_truth and r["n_negatives"] == n_neg
        assert 0.0 <= r["auroc_truth"] <= 1.0 and r["probe_auroc"] is not None
    # the probe compared the truth lenses with each arm's own validation injections (one into each of the 14 val hosts)
    assert len(rows) == 2
    assert len(list((tmp_path / "lake").rglob("complete.json"))) == 2  # each arm its own run
    # its page, beside the table where the evaluation report links to it, shows every arm
    page = (tmp_path / "lake" / "evaluation" / "realism_ablation.files" / "ablation.html").read_text()
    assert 'id="fig-realism-ablation"' in page and all(arm in page for arm in arms)
