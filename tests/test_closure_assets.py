"""thresholds, selection_model, selection_populations, selection_closure and lens_forecast through
Dagster on a small mock survey: the thresholds count (and check) the hidden hosts among their
negatives, the detection model is published with its ranges and calibration, C is reweighted to the
named populations, the closure counts the hidden lenses whose host scored above each threshold
against both predictions, and the forecast multiplies the LensPop-like lenses by C over the searched
area."""

from __future__ import annotations

import dagster as dg
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lens_assets.evaluation as evaluation
from darkhaloscope.evaluation.forecast import sphere_box_area_deg2
from darkhaloscope.survey.sweeps import parse_sweep_filename
from io_managers import LakeIOManager
from lake_platform.lake import Lake
from resources import ComputeResource, LakeResource, SurveyResource
from tests.support.injection_lake import write_injection_bank
from tests.support.wap import run_assets
from tests.test_closure import _injections

BATCH = "batch-00000"
THETA_E, Z_L = [0.75, 1.25, 1.75, 2.25], [0.2, 0.4]


@pytest.mark.slow
def test_closure_assets_on_a_small_mock(tmp_path):
    survey = SurveyResource(
        mock_dir=str(tmp_path / "mock"), mock_sweep_files=1, mock_rows_per_file=9000, mock_hidden_lenses=4
    )
    truth = pq.read_table(survey.mock_manifest().hidden_truth_path)
    ids = truth.column("object_id").to_numpy()
    sweep = truth.column("sweep_file")[0].as_py()
    n = len(ids)
    lake = Lake(str(tmp_path / "lake"))
    bank = _injections(2000).append_column("kind", pa.array(["injection"] * 2000))
    write_injection_bank(lake, bank, THETA_E, Z_L, BATCH)
    # held-out negatives (test split) whose scores set the thresholds; none hosts a hidden lens
    m = 400
    negatives = pa.table(
        {
            "object_id": np.arange(10**9, 10**9 + m, dtype=np.int64),
            "label": np.zeros(m, np.int8),
            "split": ["test"] * m,
            "in_training_catalog": np.ones(m, bool),
            "score": np.linspace(0.0, 0.8, m),
            "valid": np.ones(m, bool),
        }
    )
    lake.write_table("evaluation", "cutout_scores", negatives, partition={"sweep_file": sweep})
    lake.write_table(
        "search",
        "search_scores",
        pa.table({"object_id": ids, "score": np.where(np.arange(n) % 2 == 0, 0.95, 0.1), "valid": np.ones(n, bool)}),
        partition={"sweep_file": sweep},
    )
    lake.write_table(
        "survey",
        "sweeps",
        pa.table(
            {
                "object_id": ids,
                "flux_z": np.full(n, 20.0),
                "mw_transmission_z": np.ones(n),
                "psfsize_r": np.full(n, 1.3),
                "psfdepth_r": np.full(n, float(np.median(bank.column("psfdepth_r").to_numpy()))),
            }
        ),
        partition={"sweep_file": sweep},
    )
    lake.write_table("training", "training_set", pa.table({"object_id": np.array([1], np.int64)}))

    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("injection_batch", [BATCH])
    instance.add_dynamic_partitions("sweep_file", [sweep])
    resource = LakeResource(uri=lake.uri)
    resources = {
        "lake": resource,
        "io_manager": LakeIOManager(uri=resource.uri),
        "survey": survey,
        "compute": ComputeResource(profile="full"),
    }
    run_assets(
        [
            evaluation.thresholds.key,
            *evaluation.selection_model.keys,
            evaluation.selection_populations.key,
            evaluation.selection_closure.key,
            evaluation.lens_forecast.key,
        ],
        resources,
        instance,
    )

    thresholds = lake.read_table("evaluation", "thresholds").to_pylist()
    assert {r["n_hidden_in_negatives"] for r in thresholds} == {0}
    model = lake.read_table("evaluation", "selection_model")
    assert {"src_r_sersic_arcsec", "src_beta_frac"} <= set(",".join(model.column("columns").to_pylist()).split(","))
    assert lake.read_table("evaluation", "selection_calibration").num_rows % 10 == 0
    pops = lake.read_table("evaluation", "selection_populations")
    assert {"proposal", "lenspop", "mock"} <= set(pops.column("population").to_pylist())

    rows = lake.read_table("evaluation", "selection_closure").to_pylist()
    loose = {(r["method"], r["bin"]): r for r in rows if r["threshold_name"] == "score>0.5"}
    for method in ("per_lens", "population"):
        overall = loose[(method, "all")]
        kept = overall["n_hidden"]
        assert 0 < kept <= n
        assert overall["n_recovered"] <= kept and overall["n_predicted_sd"] > 0
        assert overall["pull"] == pytest.approx(
            (overall["n_recovered"] - overall["n_predicted"]) / overall["n_predicted_sd"]
        )
        assert overall["power_15pct"] == pytest.approx(0.15 * overall["n_predicted"] / overall["n_predicted_sd"])
    strict = [r for r in rows if r["threshold_name"] == "score>0.9" and r["bin"] == "all"]
    assert all(r["n_recovered"] == sum(1 for i in range(n) if i % 2 == 0) or r["n_hidden"] < n for r in strict)

    forecast = {(r["threshold_name"], r["bin"]): r for r in lake.read_table("evaluation", "lens_forecast").to_pylist()}
    box = parse_sweep_filename(sweep)
    area = sphere_box_area_deg2(box.ra_min, box.ra_max, box.dec_min, box.dec_max)
    overall = forecast[("score>0.5", "all")]
    assert overall["area_deg2"] == pytest.approx(area) and overall["n_in_area"] == pytest.approx(
        overall["n_per_deg2"] * area
    )
    assert 0 < overall["n_per_deg2"] < overall["n_lensed_per_deg2"]
