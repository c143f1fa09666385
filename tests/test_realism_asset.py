"""The realism_probe asset's choice of truth lenses: the test split's known lenses not in the
training set, with θ_E, the arc's S/N and the source's size and position from the mock's known-lens
truth (lens_assets/realism.py)."""

from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from darkhaloscope.stamps import to_tensor_array
from lens_assets.realism import _truth_lenses


def test_truth_lenses_are_unseen_test_split_lenses_with_their_theta_e_and_arc_snr(tmp_path):
    n = 6
    images = np.arange(n, dtype=np.float32)[:, None, None, None] * np.ones((n, 3, 101, 101), np.float32)
    cutouts = pa.table(
        {
            "object_id": pa.array(np.arange(10, 10 + n), pa.int64()),
            "label": pa.array([1, 1, 1, 0, 1, 1], pa.int8()),
            "split": ["test", "train", "test", "test", "test", "test"],
            "image": to_tensor_array(images),
        }
    )
    training = pa.table({"object_id": pa.array([15], pa.int64())})  # a test-split lens seen in training
    truth_path = tmp_path / "known_lens_truth.parquet"
    # the known-lens truth in another order; object 14's arc has no S/N (off the sky's coverage): it
    # leaves the sample
    pq.write_table(
        pa.table(
            {
                "object_id": pa.array([15, 12, 10, 14], pa.int64()),
                "theta_e_arcsec": [3.0, 2.0, 1.0, 1.5],
                "arc_snr": [30.0, 12.0, 5.0, float("nan")],
                "z_lens": [0.3, 0.4, 0.5, 0.6],
                **{c: [0.0] * 4 for c in ("lens_e1", "lens_e2", "source_e1", "source_e2", "source_y_arcsec")},
                "source_r_sersic_arcsec": [0.4, 0.3, 0.2, 0.1],
                "source_x_arcsec": [0.3, 0.4, 0.5, 0.6],  # β/θ_E 0.1, 0.2, 0.5, 0.4
            }
        ),
        truth_path,
    )
    mock = SimpleNamespace(is_mock=True, mock_manifest=lambda: SimpleNamespace(truth_path=truth_path))
    truth, stamps = _truth_lenses(ds.dataset(cutouts), ds.dataset(training), mock)
    assert truth.column("object_id").to_pylist() == [10, 12]
    assert truth.column("theta_e_arcsec").to_pylist() == [1.0, 2.0]
    assert truth.column("arc_snr").to_pylist() == [5.0, 12.0]
    # and the source's size and position the probe also matches on
    assert truth.column("src_r_sersic_arcsec").to_pylist() == [0.2, 0.3]
    assert truth.column("src_beta_frac").to_pylist() == [0.5, 0.2]
    assert stamps[:, 0, 0, 0].tolist() == [0.0, 2.0]
    real = SimpleNamespace(is_mock=False)
    truth, stamps = _truth_lenses(ds.dataset(cutouts), ds.dataset(training), real)
    assert truth.column_names == ["object_id"] and truth.column("object_id").to_pylist() == [10, 12, 14]
    assert stamps.shape == (3, 3, 101, 101)


def test_realism_probe_materializes_and_warns_without_blocking(tmp_path):
    """On a survey that is not the mock (no θ_E: a random draw of injections), with a tiny untrained
    finder: one row published, the gate a warning (an untrained network's random features tell
    lens-like stamps from noise stamps), the contract passed."""
    import dagster as dg

    from darkhaloscope.evaluation.scoring import CUTOUT_META
    from darkhaloscope.lensing.bank import InjectionConfig, bank_columns, plan_injection_grid, render_injection_batch
    from io_managers import LakeIOManager
    from lake_platform.lake import Lake
    from lens_assets.realism import realism_probe
    from lens_assets.shared.partitions import injection_batches, sweep_partitions
    from resources import ComputeResource, LakeResource, SurveyResource
    from tests.support.tiny_finder import publish_tiny_finder
    from tests.support.wap import run_assets
    from tests.test_injection_bank_lib import _hosts

    sweep, batch = "sweep-030m005-035p000.fits", "batch-00000"
    lake = Lake(str(tmp_path / "lake"))
    publish_tiny_finder(lake)
    rng = np.random.default_rng(0)
    n = 12
    truth_images = rng.normal(0.0, 0.02, (n, 3, 101, 101)).astype(np.float32)
    truth_images[:, :, 40:44, 45:56] += 0.5  # an arc-like bar the injections lack
    # the injections: real plan rows on 27 hosts, the bank their parameters (it stores no stamps:
    # the probe renders its injections again onto the hosts' cutouts)
    tasks = plan_injection_grid(_hosts(27), InjectionConfig(per_cell=1)).slice(0, 20)
    hosts = np.unique(tasks.column("host_object_id").to_numpy())
    host_images = rng.normal(0.0, 0.02, (hosts.size, 3, 101, 101)).astype(np.float32)
    cut = {name: pa.nulls(n + hosts.size, pa.string()) for name in CUTOUT_META}
    cut.update(
        object_id=pa.array(np.r_[np.arange(n), hosts], pa.int64()),
        label=pa.array(np.r_[np.ones(n), np.zeros(hosts.size)], pa.int8()),
        split=pa.array(["test"] * (n + hosts.size)),
        image=to_tensor_array(np.concatenate([truth_images, host_images])),
        invvar=to_tensor_array(np.full((n + hosts.size, 3, 101, 101), 1 / 0.02**2, np.float32)),
    )
    lake.write_table("imaging", "cutouts", pa.table(cut), partition={"sweep_file": sweep})
    lake.write_table("training", "training_set", pa.table({"object_id": pa.array([100], pa.int64())}))
    lake.write_table("injection", "injection_plan", tasks)
    index = np.searchsorted(hosts, tasks.column("host_object_id").to_numpy())
    _, _, params = render_injection_batch(tasks, host_images[index], np.full_like(host_images[index], 1 / 0.02**2))
    lake.write_table("injection", "injection_bank", bank_columns(tasks, params), partition={"injection_batch": batch})
    resource = LakeResource(uri=lake.uri)
    resources = {
        "lake": resource,
        "io_manager": LakeIOManager(uri=resource.uri),
        "compute": ComputeResource(device="cpu", profile="demo"),
        "survey": SurveyResource(survey=str(tmp_path / "mirror")),
    }
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(sweep_partitions.name, [sweep])
    instance.add_dynamic_partitions(injection_batches.name, [batch])
    result = run_assets([realism_probe.key], resources, instance)
    checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert checks["realism_probe_contract"].passed
    assert (
        not checks["realism_probe_gate"].passed and checks["realism_probe_gate"].severity == dg.AssetCheckSeverity.WARN
    )
    row = lake.read_table("evaluation", "realism_probe").to_pylist()[0]
    assert row["n_truth"] == n and row["n_injections"] == n and row["matched_on"] == "none (random draw)"
    assert row["probe_auroc"] > 0.7
