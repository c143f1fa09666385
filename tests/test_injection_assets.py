"""injection_plan and injection_bank through dg.materialize, with the bank's checks passing and failing."""

import dagster as dg
import numpy as np
import pyarrow as pa

import lens_assets.injection as injection
from darkhaloscope.lake import Lake
from darkhaloscope.stamps import to_tensor_array
from resources import ComputeResource, LakeResource

SWEEP = "sweep-030m005-035p000.fits"
PLAN = {"theta_e_grid": [1.0, 1.5, 0.5], "z_l_grid": [0.3, 0.5, 0.2], "per_cell": 3, "batch_size": 6}


def _hosts(lake: Lake, n: int = 8) -> None:
    rng = np.random.default_rng(11)
    lake.write_table("imaging", "cutouts", pa.table({
        "object_id": pa.array(np.arange(1, n + 1), pa.int64()), "ra": np.linspace(31, 32, n), "dec": np.full(n, -2.0),
        "split": ["test", "train"] * (n // 2), "type": ["DEV", "SER"] * (n // 2),
        **{f"psfsize_{b}": pa.array(np.full(n, s), pa.float32()) for b, s in zip("grz", (1.4, 1.25, 1.1))},
        **{f"psfdepth_{b}": pa.array(np.full(n, d), pa.float32()) for b, d in zip("grz", (2e3, 1e3, 2e2))},
        "dx_pix": pa.array(rng.uniform(-0.5, 0.5, n), pa.float32()), "dy_pix": pa.array(rng.uniform(-0.5, 0.5, n), pa.float32()),
        "label": pa.array(np.zeros(n), pa.int8()), "quality_ok": [True] * n,
        "image": to_tensor_array(rng.normal(0, 0.01, (n, 3, 101, 101)).astype(np.float32)),
        "invvar": to_tensor_array(np.full((n, 3, 101, 101), 1e4, np.float32)),
    }), partition={"sweep_file": SWEEP})


def test_bank_checks_pass_on_real_renders_and_fail_on_a_tightened_bound(tmp_path, monkeypatch):
    lake = Lake(str(tmp_path / "lake"))
    _hosts(lake)
    instance = dg.DagsterInstance.ephemeral()
    resources = {"lake": LakeResource(uri=lake.uri), "compute": ComputeResource(device="cpu", profile="demo")}
    plan = dg.materialize([injection.injection_plan], instance=instance, resources=resources,
                          run_config={"ops": {"injection__injection_plan": {"config": PLAN}}})
    assert plan.success
    tasks = lake.read_table("injection", "injection_plan")
    assert set(tasks.column("host_split").to_pylist()) == {"test"}  # selection-function hosts are unseen
    key = instance.get_dynamic_partitions("injection_batch")[0]
    checks = [injection.injection_matches_lenstronomy, injection.injection_physics_valid]
    bank = dg.materialize([injection.injection_bank, *checks], instance=instance, resources=resources, partition_key=key)
    assert bank.success
    assert {e.check_name: e.passed for e in bank.get_asset_check_evaluations()} == {
        "injection_matches_lenstronomy": True, "injection_physics_valid": True}

    monkeypatch.setattr(injection, "FLUX_TOL_MAX", 1e-9)  # no render meets this: the check must say so
    strict = dg.materialize([injection.injection_bank, *checks], instance=instance, resources=resources, partition_key=key, raise_on_error=False)
    failed = {e.check_name: e for e in strict.get_asset_check_evaluations() if not e.passed}
    assert set(failed) == {"injection_physics_valid"}
    assert "stamp arc flux vs source flux × μ" in str(failed["injection_physics_valid"].metadata["problems"].value)
