"""cutout_validation through dg.materialize: quality gates and the shortcut scan, maskbits included."""

import dagster as dg
import numpy as np
import pyarrow as pa

from darkhaloscope.imaging.quality import SATUR_BITS
from darkhaloscope.stamps import to_tensor_array
from io_managers import LakeIOManager
from lake_platform.lake import Lake
from lens_assets.imaging import cutout_validation
from resources import LakeResource
from tests.support.wap import run_assets

SWEEP = "sweep-030m005-035p000.fits"


def _cutouts(n: int, saturated_positives: bool) -> pa.Table:
    """n positives and n negatives of identical noise statistics; positives optionally carry
    saturated pixels in their maskbits (a planted instrumental shortcut)."""
    rng = np.random.default_rng(7)
    label = np.r_[np.ones(n, np.int8), np.zeros(n, np.int8)]
    image = rng.normal(0.0, 0.01, (2 * n, 3, 101, 101)).astype(np.float32)
    maskbits = np.zeros((2 * n, 101, 101), np.int32)
    if saturated_positives:
        maskbits[:n, 45:56, 45:56] = 1 << SATUR_BITS["r"]
    return pa.table(
        {
            "object_id": pa.array(np.arange(2 * n), pa.int64()),
            "label": pa.array(label),
            "split": pa.array(["train"] * (2 * n)),
            "in_training_catalog": pa.array([True] * (2 * n)),
            "quality_ok": pa.array([True] * (2 * n)),
            "image": to_tensor_array(image),
            "maskbits": to_tensor_array(maskbits, pa.int32()),
        }
    )


def _run(lake: Lake):
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("sweep_file", [SWEEP])
    resource = LakeResource(uri=lake.uri)
    return run_assets(
        [cutout_validation.key],
        {"lake": resource, "io_manager": LakeIOManager(uri=resource.uri)},
        instance,
        raise_on_error=False,
    )


def _materialize(tmp_path, table: pa.Table):
    lake = Lake(str(tmp_path / "lake"))
    lake.write_table("imaging", "cutouts", table, partition={"sweep_file": SWEEP})
    result = _run(lake)
    aucs = {r["feature"]: r for r in lake.read_table("imaging", "cutout_validation").to_pylist()}
    return result, aucs


def test_saturation_shortcut_in_maskbits_is_measured_and_flagged(tmp_path):
    result, aucs = _materialize(tmp_path, _cutouts(40, saturated_positives=True))
    assert result.success
    assert aucs["saturation_frac"]["auc"] > 0.99 and aucs["saturation_frac"]["flag"] == "red"
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks == {
        "cutout_validation_contract": True,
        "positives_all_valid": True,
        "negatives_mostly_valid": True,
        "no_core_brightness_shortcut": True,
    }


def test_identical_populations_raise_no_flag(tmp_path):
    result, aucs = _materialize(tmp_path, _cutouts(40, saturated_positives=False))
    assert result.success
    assert not [f for f, r in aucs.items() if r["flag"] == "red"]


def test_no_training_catalog_cutouts_is_a_clear_failure(tmp_path):
    t = _cutouts(3, saturated_positives=False)
    t = t.set_column(
        t.schema.get_field_index("in_training_catalog"), "in_training_catalog", pa.array([False] * t.num_rows)
    )
    lake = Lake(str(tmp_path / "lake"))
    lake.write_table("imaging", "cutouts", t, partition={"sweep_file": SWEEP})
    result = _run(lake)
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "no training-catalog cutouts" in str(failure.event_specific_data.error)
