"""The realism_probe asset's choice of truth lenses: the test split's known lenses not in the
training set, with θ_E from the mock's known-lens truth (lens_assets/realism.py)."""

from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from darkhaloscope.stamps import to_tensor_array
from lens_assets.realism import _truth_lenses


def test_truth_lenses_are_unseen_test_split_lenses_with_their_theta_e(tmp_path):
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
    # the known-lens truth in another order; object 14 has no truth row and leaves the sample
    pq.write_table(
        pa.table({"object_id": pa.array([15, 12, 10], pa.int64()), "theta_e_arcsec": [3.0, 2.0, 1.0]}), truth_path
    )
    mock = SimpleNamespace(is_mock=True, mock_manifest=lambda: SimpleNamespace(truth_path=truth_path))
    truth, stamps = _truth_lenses(ds.dataset(cutouts), ds.dataset(training), mock)
    assert truth.column("object_id").to_pylist() == [10, 12]
    assert truth.column("theta_e_arcsec").to_pylist() == [1.0, 2.0]
    assert stamps[:, 0, 0, 0].tolist() == [0.0, 2.0]
    real = SimpleNamespace(is_mock=False)
    truth, stamps = _truth_lenses(ds.dataset(cutouts), ds.dataset(training), real)
    assert truth.column_names == ["object_id"] and truth.column("object_id").to_pylist() == [10, 12, 14]
    assert stamps.shape == (3, 3, 101, 101)
