"""The stacked ensemble (Paper IV): the meta-learner over members' probabilities is deterministic and
combines complementary members; an ensemble checkpoint round-trips and scores; the lens finder with
two members stacks them, chooses what to publish on the validation set and says why."""

import json

import numpy as np
import pytest
import torch

from darkhaloscope.stats import roc_auc
from darkhaloscope.training.checkpoint import load_checkpoint, read_spec
from darkhaloscope.training.data import synthetic_arrays
from darkhaloscope.training.ensemble import cross_fitted_auroc, fit_meta_learner
from darkhaloscope.training.inference import score_stamps
from darkhaloscope.training.loop import TrainConfig
from darkhaloscope.training.models import StackedEnsemble, count_parameters
from darkhaloscope.training.preprocess import PreprocessSpec
from darkhaloscope.training.runs import published_files, train_lens_finder

torch.set_num_threads(1)


def _complementary(n=2000, seed=0):
    """Two members that each see half of the positives (an OR of two detectors)."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.5).astype(np.int8)
    which = rng.random(n) < 0.5
    a = np.where((y == 1) & which, 4.0, -2.0) + rng.normal(0, 1, n)
    b = np.where((y == 1) & ~which, 4.0, -2.0) + rng.normal(0, 1, n)
    return np.stack([a, b], axis=1), y


def test_meta_learner_is_deterministic_and_combines_members():
    z, y = _complementary()
    m1, m2 = fit_meta_learner(z, y, seed=3), fit_meta_learner(z, y, seed=3)
    assert all(torch.equal(p, q) for p, q in zip(m1.state_dict().values(), m2.state_dict().values()))
    assert count_parameters(m1) == 2 * 300 + 300 + 300 + 1  # one hidden layer of 300 nodes over two probabilities
    stacked = cross_fitted_auroc(z, y, seed=3)
    assert stacked > max(roc_auc(z[:, 0], y), roc_auc(z[:, 1], y)) + 0.1


def test_ensemble_model_scores_members_then_meta():
    ens = StackedEnsemble(3, ("bottleneck_resnet_tiny", "strided_resnet"), hidden=300).eval()
    x = torch.randn(4, 3, 33, 33)
    with torch.no_grad():
        z = ens.member_logits(x)
        assert z.shape == (4, 2)
        assert torch.allclose(ens(x), ens.meta(torch.sigmoid(z)).squeeze(-1))
    with pytest.raises(Exception, match="two single-network members"):
        StackedEnsemble(3, ("strided_resnet",))


def test_two_members_are_stacked_compared_and_published(tmp_path):
    a = synthetic_arrays(200, 33, seed=8, arc_amplitude=4.0)
    base = dict(epochs=1, batch_size=32, lr=1e-2, patience=0, device="cpu", checkpoint_every_steps=0)
    members = [TrainConfig(arch="bottleneck_resnet_tiny", **base), TrainConfig(arch="strided_resnet", **base)]
    s = train_lens_finder(a, members, PreprocessSpec(), tmp_path / "ckpt", "v1", say=lambda m: None)
    choice = s["ensemble"]
    assert set(choice["member_val_auroc"]) == {"bottleneck_resnet_tiny", "strided_resnet"}
    assert choice["published"] in ("stacked_ensemble", "bottleneck_resnet_tiny", "strided_resnet") and choice["reason"]
    assert len(s["members"]) == 2 and s["finished"] and s["architecture"] == choice["published"]
    ens_dirs = [
        d for d in (tmp_path / "ckpt" / "runs").iterdir() if read_spec(d, "best").architecture == "stacked_ensemble"
    ]
    assert len(ens_dirs) == 1
    model, spec = load_checkpoint(ens_dirs[0], "best")
    assert spec.arch_args == {"members": ["bottleneck_resnet_tiny", "strided_resnet"], "hidden": 300}
    assert spec.temperature > 0 and "calibration" in spec.metrics
    probs, ok, _ = score_stamps(model, spec, a.image[:8])
    assert ok.all() and np.all((probs >= 0) & (probs <= 1))
    assert json.loads(dict(published_files(s["run_dir"]))["best.json"])["architecture"] == choice["published"]


def test_members_scored_in_the_same_pass_and_compared_on_the_same_rows():
    import pyarrow as pa

    from darkhaloscope.evaluation.comparison import model_comparison
    from darkhaloscope.training.checkpoint import CheckpointSpec
    from darkhaloscope.training.inference import score_with_members

    torch.manual_seed(0)
    ens = StackedEnsemble(3, ("bottleneck_resnet_tiny", "strided_resnet")).eval()
    spec = CheckpointSpec(
        name="best",
        architecture="stacked_ensemble",
        in_channels=3,
        preprocess=PreprocessSpec(),
        param_count=0,
        param_shapes={},
        weights_file="x",
        weights_sha256="0",
        temperature=2.0,
        arch_args={"members": ["bottleneck_resnet_tiny", "strided_resnet"], "hidden": 300},
    )
    images = synthetic_arrays(12, 33, seed=1).image
    probs, ok, _, members = score_with_members(ens, spec, images)
    single, _, _ = score_stamps(ens, spec, images)
    np.testing.assert_allclose(probs, single, rtol=1e-6)
    alone, _, _ = score_stamps(ens.members[1], PreprocessSpec(), images)
    assert set(members) == {"bottleneck_resnet_tiny", "strided_resnet"}
    np.testing.assert_allclose(members["strided_resnet"], alone, rtol=1e-6)

    rng = np.random.default_rng(0)

    def table(n, shift):
        return pa.table(
            {"score": rng.normal(shift, 1, n), "score_a": rng.normal(shift / 2, 1, n), "valid": np.ones(n, bool)}
        )

    cmp = model_comparison(table(300, 3.0), table(300, 0.0), table(40, 3.0), table(500, 0.0))
    rows = {r["model"]: r for r in cmp.to_pylist()}
    assert set(rows) == {"stacked_ensemble", "a"} and rows["stacked_ensemble"]["n_negatives"] == 500
    assert rows["stacked_ensemble"]["auroc_injections_vs_controls"] > rows["a"]["auroc_injections_vs_controls"]
    assert rows["stacked_ensemble"]["completeness"] > rows["a"]["completeness"]
    single_net = pa.table({"score": [0.1, 0.9], "valid": [True, True]})
    assert model_comparison(single_net, single_net, single_net, single_net).num_rows == 0
