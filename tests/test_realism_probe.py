"""The realism probe (darkhaloscope.evaluation.realism) on synthetic features, and the finder's
penultimate features (training.inference.stamp_features) against its own head."""

import numpy as np
import pyarrow as pa
import pytest
import torch

from darkhaloscope.errors import InputError
from darkhaloscope.evaluation.realism import (
    REALISM_SCHEMA,
    match_injections,
    probe_auroc,
    probe_comparison,
    probe_warns,
    realism_row,
    realism_table,
)
from darkhaloscope.training.inference import stamp_features, stamp_logits
from darkhaloscope.training.models import build_model
from darkhaloscope.training.preprocess import PreprocessSpec

N_BOOT = 200  # enough for a 95 % interval's ends in a test; the asset uses PROBE_BOOTSTRAP_RESAMPLES


def _gauss(n, d, shift, seed):
    return np.random.default_rng(seed).normal(size=(n, d)) + shift


def test_identical_distributions_give_chance():
    p = probe_auroc(_gauss(120, 8, 0.0, 1), _gauss(120, 8, 0.0, 2), n_boot=N_BOOT)
    assert p["n_truth"] == 120 and p["n_injections"] == 120
    assert abs(p["probe_auroc"] - 0.5) < 0.12
    assert p["ci95_lo"] <= 0.5 <= p["ci95_hi"]


def test_shifted_distributions_are_separated():
    p = probe_auroc(_gauss(80, 8, 1.0, 3), _gauss(80, 8, 0.0, 4), n_boot=N_BOOT)
    assert p["probe_auroc"] > 0.95 and p["ci95_lo"] > 0.85
    table = realism_table([realism_row("truth vs injections", p, 80, 80, ["theta_e_arcsec"])])
    assert table.schema == REALISM_SCHEMA
    assert probe_warns(table) == ["truth vs injections"]


def test_grouped_folds_keep_a_host_in_one_fold():
    # injections of one host share its features exactly: grouped folds still score chance
    hosts = np.repeat(np.arange(30), 4)
    inj = _gauss(30, 6, 0.0, 5)[hosts]
    p = probe_auroc(_gauss(60, 6, 0.0, 6), inj, injection_groups=hosts, n_boot=N_BOOT)
    assert p["ci95_lo"] <= 0.5 <= p["ci95_hi"]


@pytest.mark.parametrize(
    "truth, inj, message",
    [
        (_gauss(3, 4, 0.0, 7), _gauss(50, 4, 0.0, 8), "at least 5 truth lenses"),
        (_gauss(50, 4, 0.0, 7), _gauss(2, 4, 0.0, 8), "at least 5 injections"),
        (np.where(np.eye(20, 4) > 0, np.nan, 0.0), _gauss(20, 4, 0.0, 8), "truth lenses: 4 rows hold NaN"),
        (_gauss(20, 4, 0.0, 7), _gauss(20, 5, 0.0, 8), "4 features, injections 5"),
        (np.zeros(20), _gauss(20, 4, 0.0, 8), "truth lenses: features must be"),
    ],
)
def test_bad_input_names_it(truth, inj, message):
    with pytest.raises(InputError, match=message):
        probe_auroc(truth, inj, n_boot=N_BOOT)


def test_too_few_injection_hosts_for_grouped_folds():
    with pytest.raises(InputError, match="at least 5 hosts, got 2"):
        probe_auroc(_gauss(20, 4, 0.0, 7), _gauss(20, 4, 0.0, 8), injection_groups=np.arange(20) % 2)


def test_nearest_neighbour_matching_without_replacement():
    inj = pa.table({"theta_e_arcsec": np.linspace(0.5, 3.0, 26), "arc_snr": np.full(26, 20.0)})
    truth = pa.table({"theta_e_arcsec": [1.0, 1.0, 2.5], "arc_snr": [20.0, 20.0, 20.0]})
    idx = match_injections(truth, inj, ["theta_e_arcsec", "arc_snr"], ("t",))
    assert len(set(idx.tolist())) == 3
    got = sorted(inj.column("theta_e_arcsec").to_numpy()[idx].round(3).tolist())
    assert got[2] == 2.5 and {got[0], got[1]} <= {0.9, 1.0, 1.1}
    assert len(match_injections(truth, inj, [], ("t",), per_truth=2)) == 6
    with pytest.raises(InputError, match="truth lenses: column 'arc_snr' is missing"):
        match_injections(truth.select(["theta_e_arcsec"]), inj, ["theta_e_arcsec", "arc_snr"], ("t",))
    with pytest.raises(InputError, match="unknown matching variable 'sigma'"):
        match_injections(truth, inj, ["sigma"], ("t",))
    with pytest.raises(InputError, match="26 injections cannot give 10"):
        match_injections(truth, inj, ["theta_e_arcsec"], ("t",), per_truth=10)


def _stamps(n, seed, arc=0.0):
    x = np.random.default_rng(seed).normal(0.0, 1e-3, size=(n, 3, 33, 33)).astype(np.float32)
    x[:, :, 16, 16] += 0.05
    x[:, :, 10, 12:21] += np.float32(arc)  # an arc-like bar north of the centre
    return x


def test_probe_comparison_on_a_finder():
    torch.manual_seed(0)
    model = build_model("strided_resnet", 3).eval()
    n = 12
    truth = pa.table({"object_id": np.arange(n), "theta_e_arcsec": np.linspace(1.0, 2.0, n)})
    injections = pa.table(
        {
            "injection_id": np.arange(100, 140),
            "host_object_id": np.repeat(np.arange(20), 2),
            "theta_e_arcsec": np.linspace(0.8, 2.2, 40),
            "arc_snr": np.full(40, 30.0),
        }
    )
    pool = dict(zip(range(100, 140), _stamps(40, 2)))

    def images(ids):
        return np.stack([pool[i] for i in ids])

    same = probe_comparison(
        "same", truth, _stamps(n, 1), injections, images, model, PreprocessSpec(), "cpu", n_boot=N_BOOT
    )
    assert same["matched_on"] == "theta_e_arcsec" and same["n_truth"] == n and same["n_injections"] == n
    # matched on what both record: the truth's source size is not among the injections' columns
    sized = truth.append_column("src_r_sersic_arcsec", pa.array(np.full(n, 0.2)))
    row = probe_comparison(
        "sized", sized, _stamps(n, 1), injections, images, model, PreprocessSpec(), "cpu", n_boot=N_BOOT
    )
    assert row["matched_on"] == "theta_e_arcsec"
    both = injections.append_column("src_r_sersic_arcsec", pa.array(np.geomspace(0.05, 1.0, 40)))
    row = probe_comparison("both", sized, _stamps(n, 1), both, images, model, PreprocessSpec(), "cpu", n_boot=N_BOOT)
    assert row["matched_on"] == "theta_e_arcsec,src_r_sersic_arcsec"
    assert same["ci95_lo"] <= 0.5 <= same["ci95_hi"]
    apart = probe_comparison(
        "apart", truth, _stamps(n, 1, arc=0.5), injections, images, model, PreprocessSpec(), "cpu", n_boot=N_BOOT
    )
    assert apart["probe_auroc"] > 0.9
    few = probe_comparison(
        "few", truth.slice(0, 3), _stamps(3, 1), injections, images, model, PreprocessSpec(), "cpu", n_boot=N_BOOT
    )
    assert few["probe_auroc"] is None and few["n_truth"] == 3
    assert realism_table([same, apart, few]).num_rows == 3


@pytest.mark.parametrize("arch", ["strided_resnet", "bottleneck_resnet_tiny"])
def test_pooled_features_are_what_the_head_reads(arch):
    torch.manual_seed(0)
    model = build_model(arch, 3).eval()
    spec = PreprocessSpec()
    images = np.random.default_rng(9).normal(1e-3, 1e-2, size=(5, 3, 33, 33)).astype(np.float32)
    images[2, 1] = np.nan
    feats, valid, reason = stamp_features(model, spec, images, device="cpu", batch_size=2)
    logits, _, _ = stamp_logits(model, spec, images, device="cpu", batch_size=2)
    assert feats.shape[0] == 5 and not valid[2] and np.isnan(feats[2]).all() and "nonfinite_r" in reason[2]
    head = (
        model.head.weight.detach().double().numpy() @ feats[valid].T
        + model.head.bias.detach().double().numpy()[:, None]
    )
    np.testing.assert_allclose(head.ravel(), logits[valid], rtol=1e-4, atol=1e-5)


def test_report_shows_the_realism_probe():
    from darkhaloscope.evaluation.report import build_report

    row = realism_row("mock known lenses vs injections", None, 3, 3, ["theta_e_arcsec"])
    page = build_report(realism=realism_table([row]))
    assert 'id="table-realism-probe"' in page and "mock known lenses vs injections" in page
    assert "theta_e_arcsec" in page and "realism_probe_gate" in page
    assert "Realism" in build_report() and "Not provided" in build_report().split("Realism")[1][:200]
