"""selection_model, selection_closure and lens_forecast through Dagster on a small mock survey: the
closure counts the hidden lenses whose host scored above the model's threshold, leaves out those the
finder saw in training, and predicts the rest from the model; the forecast folds the model with its
populations over the searched sweep files' area and compares the mock's with the same truth."""

from __future__ import annotations

import json

import dagster as dg
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lens_assets.evaluation as evaluation
from darkhaloscope.evaluation.forecast import sphere_box_area_deg2
from darkhaloscope.lensing.bank import PLAN_SUMMARY_KEY, table_conditioning, with_conditioning
from darkhaloscope.lensing.priors import PriorRegistry
from darkhaloscope.survey.sweeps import parse_sweep_filename
from io_managers import LakeIOManager
from lake_platform.lake import Lake
from resources import LakeResource, SurveyResource
from tests.support.wap import run_assets

BATCH = "batch-00000"


def _injections(n=2000, seed=3):
    rng = np.random.default_rng(seed)
    snr = 10 ** rng.uniform(0, 2.3, n)
    te = rng.uniform(0.5, 3.0, n)
    mag = rng.uniform(16.5, 20.0, n)
    p = 1 / (1 + np.exp(-(3.0 * (np.log10(snr) - 0.9) + 1.0 * (te - 1.2))))
    score = np.where(rng.uniform(size=n) < p, 0.95, 0.05)
    host = np.arange(n, dtype=np.int64) // 5
    return pa.table(
        {
            "src_mag_r": (11.0 + 0.2 * te - np.log10(snr)) / 0.4,
            "sigma_v_kms": 150.0 + 3.0 * (host % 50),
            "host_z": 0.2 + 0.01 * (host % 60),
            "injection_id": np.arange(n, dtype=np.int64),
            "kind": ["injection"] * n,
            "success": np.ones(n, bool),
            "valid": np.ones(n, bool),
            "score": score,
            "arc_snr": snr,
            "theta_e_arcsec": te,
            "lens_mag_z": mag,
            "host_object_id": host,
        }
    )


def test_closure_counts_predicts_and_leaves_out_what_training_saw(tmp_path):
    survey = SurveyResource(
        mock_dir=str(tmp_path / "mock"), mock_sweep_files=1, mock_rows_per_file=4000, mock_hidden_lenses=6
    )
    truth = pq.read_table(survey.mock_manifest().hidden_truth_path)
    ids = truth.column("object_id").to_numpy()
    sweep = truth.column("sweep_file")[0].as_py()
    lake = Lake(str(tmp_path / "lake"))
    lake.write_table("evaluation", "injection_scores", _injections(), partition={"injection_batch": BATCH})
    # injections score 0.95 or 0.05: fpr=1e-4 (0.97) has no detected injection, so no model
    lake.write_table(
        "evaluation",
        "thresholds",
        pa.table({"name": ["fpr=1e-2", "fpr=1e-3", "fpr=1e-4"], "threshold": [0.5, 0.9, 0.97]}),
    )
    n = len(ids)
    lake.write_table(
        "search",
        "search_scores",
        pa.table({"object_id": ids, "score": np.where(np.arange(n) % 2 == 0, 0.9, 0.1), "valid": np.ones(n, bool)}),
        partition={"sweep_file": sweep},
    )
    lake.write_table(
        "survey",
        "sweeps",
        pa.table({"object_id": ids, "flux_z": np.full(n, 20.0), "mw_transmission_z": np.ones(n)}),
        partition={"sweep_file": sweep},
    )
    lake.write_table("training", "training_set", pa.table({"object_id": ids[:1]}))  # the finder saw lens 0
    summary = {"theta_e_values": [0.5, 1.0, 1.5, 2.0, 2.5, 3.0], "z_l_values": [0.3]}
    priors = {k: [p.kind, p.lo, p.hi, p.mu, p.sigma] for k, p in PriorRegistry().priors.items()}
    plan = pa.table({"injection_id": [0]}).replace_schema_metadata({PLAN_SUMMARY_KEY: json.dumps(summary).encode()})
    plan = with_conditioning(plan, {"priors": priors})
    lake.write_table("injection", "injection_plan", plan)

    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("injection_batch", [BATCH])
    instance.add_dynamic_partitions("sweep_file", [sweep])
    resource = LakeResource(uri=lake.uri)
    resources = {"lake": resource, "io_manager": LakeIOManager(uri=resource.uri), "survey": survey}
    run_assets(
        [evaluation.selection_model.key, evaluation.selection_closure.key, evaluation.lens_forecast.key],
        resources,
        instance,
    )

    model = lake.read_table("evaluation", "selection_model")
    assert model.num_rows == 82 and set(model.column("threshold_name").to_pylist()) == {"fpr=1e-2", "fpr=1e-3"}
    rows = lake.read_table("evaluation", "selection_closure").to_pylist()
    closure = {r["bin"]: r for r in rows if r["threshold_name"] == "fpr=1e-2"}
    overall = closure["all"]
    assert overall["n_hidden"] == n - 1  # lens 0 was a training row
    assert overall["n_recovered"] == sum(1 for i in range(1, n) if i % 2 == 0)
    assert 0 < overall["n_predicted"] < n - 1 and overall["n_predicted_sd"] > 0
    assert overall["pull"] == (overall["n_recovered"] - overall["n_predicted"]) / overall["n_predicted_sd"]
    assert sum(r["n_hidden"] for b, r in closure.items() if b not in ("all", "in_prior_support")) == n - 1
    # the hosts scored 0.9 are not above the stricter fpr=1e-3 threshold (0.9)
    strict = [r for r in rows if r["threshold_name"] == "fpr=1e-3" and r["bin"] == "all"][0]
    assert strict["n_hidden"] == n - 1 and strict["n_recovered"] == 0
    support = closure["in_prior_support"]  # the mock draws some sources more compact than the prior's
    assert 0 <= support["n_hidden"] <= n - 1 and support["n_recovered"] <= overall["n_recovered"]

    forecast = {(r["population"], r["bin"]): r for r in lake.read_table("evaluation", "lens_forecast").to_pylist()}
    box = parse_sweep_filename(sweep)
    area = sphere_box_area_deg2(box.ra_min, box.ra_max, box.dec_min, box.dec_max)
    vdf, mock = forecast[("vdf", "all")], forecast[("mock", "all")]
    assert vdf["area_deg2"] == pytest.approx(area) and vdf["n_in_area"] == pytest.approx(vdf["n_per_deg2"] * area)
    assert 0 < vdf["n_per_deg2"] < vdf["n_lensed_per_deg2"]
    assert sum(r["n_per_deg2"] for (p, b), r in forecast.items() if p == "vdf" and b != "all") == pytest.approx(
        vdf["n_per_deg2"]
    )
    # the mock's fold, at the strictest fitted threshold, counts the same hidden lenses as the closure there
    assert (
        mock["threshold_name"] == "fpr=1e-3"
        and mock["n_truth"] == strict["n_recovered"]
        and mock["n_lensed_per_deg2"] == pytest.approx((n - 1) / area)
    )
    assert 0 < mock["n_in_area"] < n - 1
    assumptions = table_conditioning(lake.read_table("evaluation", "lens_forecast"))
    assert assumptions["vdf"]["sigma_star"] == 161.0 and assumptions["source_counts"]["slope"] == 0.3
