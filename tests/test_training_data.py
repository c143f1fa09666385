"""Training data: Parquet loading, epoch-aware augmentation, worker independence, labelled hard negatives."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from darkhaloscope.errors import InputError
from darkhaloscope.stamps import to_tensor_array
from darkhaloscope.training.data import load_training_set, synthetic_arrays
from darkhaloscope.training.dataset import (
    AugmentedStampDataset,
    azimuthal_shuffle,
    batches_for_plan,
    collate_prebatched,
    hard_negative,
)
from darkhaloscope.training.preprocess import PreprocessSpec, core_mask, dihedral, radial_bins

torch.set_num_threads(1)
S = 101


def _table(n=12, nan_row=None, bad_label=False):
    rng = np.random.default_rng(0)
    img = rng.normal(1.0, 0.1, (n, 3, S, S)).astype(np.float32)
    if nan_row is not None:
        img[nan_row, 2] = np.nan
    kind = np.array(["negative", "real_positive", "injected_positive"] * (n // 3))
    label = (kind != "negative").astype(np.int8)
    if bad_label:
        label[0] = 2
    inj = kind == "injected_positive"
    ctrl_rows = (img - 0.05).astype(np.float32)
    ctrl = pa.FixedShapeTensorArray.from_storage(
        to_tensor_array(ctrl_rows).type,
        pa.array([r.ravel() if m else None for r, m in zip(ctrl_rows, inj)], pa.list_(pa.float32(), 3 * S * S)),
    )
    return pa.table(
        {
            "object_id": pa.array(np.arange(100, 100 + n), pa.int64()),
            "label": pa.array(label, pa.int8()),
            "weight": pa.array(np.where(kind == "real_positive", 0.5, 1.0), pa.float32()),
            "split": pa.array(["train", "val"] * (n // 2)),
            "kind": pa.array(kind),
            "tier": pa.array([("B" if k == "real_positive" else None) for k in kind], pa.string()),
            "pool": pa.array([None] * n, pa.string()),
            "image": to_tensor_array(img),
            "control": ctrl,
            "theta_e_arcsec": pa.array([1.2 if m else None for m in inj], pa.float32()),
            "psfsize_r": pa.array(np.full(n, 1.1), pa.float32()),
        }
    )


def test_load_parquet_file_and_folder(tmp_path):
    t = _table()
    pq.write_table(t.slice(0, 6), tmp_path / "part-0.parquet")
    pq.write_table(t.slice(6), tmp_path / "part-1.parquet")
    for src in (tmp_path, tmp_path / "part-0.parquet"):
        a = load_training_set(src)
        assert a.image.shape[1:] == (3, S, S) and a.image.dtype == np.float32
    a = load_training_set(tmp_path)
    assert len(a) == 12 and a.control.shape == (4, 3, S, S)
    inj = np.flatnonzero(a.kind == "injected_positive")
    np.testing.assert_allclose(a.controls_for(inj), a.image[inj] - 0.05, atol=1e-6)
    assert set(a.tier) == {"", "B"} and np.isnan(a.theta_e_arcsec[a.kind == "negative"]).all()
    val = a.split_rows("val")
    assert set(val.split) == {"val"} and (val.control_index >= 0).sum() == (val.kind == "injected_positive").sum()


def test_load_rejects_bad_rows(tmp_path):
    with pytest.raises(InputError, match="'label'"):
        load_training_set(_table(bad_label=True))
    with pytest.raises(InputError, match=r"object_id \[104\]"):
        load_training_set(_table(nan_row=4))
    a = load_training_set(_table(nan_row=4), on_invalid="drop")
    assert len(a) == 11 and a.meta["dropped_object_ids"] == [104]
    with pytest.raises(InputError, match="missing columns"):
        load_training_set(_table().drop_columns(["weight"]))
    with pytest.raises(InputError, match="does not exist"):
        load_training_set(tmp_path / "nope.parquet")


def _ds(**kw):
    a = synthetic_arrays(40, 33, seed=1)
    return AugmentedStampDataset(a, PreprocessSpec(), seed=5, **kw)


def test_augmentation_changes_per_epoch_but_is_deterministic():
    ds = _ds()
    keys0 = [(0, i) for i in range(16)]
    x0, _, _ = ds.__getitems__(keys0)
    x0b, _, _ = ds.__getitems__(keys0)
    x1, _, _ = ds.__getitems__([(1, i) for i in range(16)])
    assert torch.equal(x0, x0b)
    changed = [not torch.equal(x0[i], x1[i]) for i in range(16)]
    assert sum(changed) >= 10  # 7/8 chance per sample that the dihedral element differs
    # every augmented stamp is a flip/rotation of the plain preprocessed one
    plain = AugmentedStampDataset(ds.a, PreprocessSpec(), seed=5, augment=False).__getitems__(keys0)[0]
    for i in range(16):
        assert any(torch.equal(x0[i], dihedral(plain[i : i + 1], torch.tensor([c]))[0]) for c in range(8))


def test_worker_sharding_gives_same_batches_as_single_process():
    ds = _ds(hard_negative_prob=0.5, core_dropout_prob=0.3)
    batches = batches_for_plan(ds.epoch_plan(2), 2, 8)
    single = list(torch.utils.data.DataLoader(ds, batch_sampler=batches, collate_fn=collate_prebatched))
    multi = list(torch.utils.data.DataLoader(ds, batch_sampler=batches, collate_fn=collate_prebatched, num_workers=2))
    assert len(single) == len(multi) == len(batches)
    for (a, ya, wa), (b, yb, wb) in zip(single, multi):
        assert torch.equal(a, b) and torch.equal(ya, yb) and torch.equal(wa, wb)
    seen = np.concatenate([[k[1] for k in b] for b in batches])
    assert len(set(seen.tolist())) == seen.size  # no sample twice in an epoch


def test_hard_negatives_are_extra_label_zero_samples():
    ds = _ds(hard_negative_prob=1.0)
    n, m = ds.n, ds.hn_rows.size
    plan = ds.epoch_plan(0)
    assert plan.size == n + m and m == int((ds.a.label == 1).sum())
    x, y, w = ds.__getitems__([(0, n + k) for k in range(m)])
    assert torch.all(y == 0) and torch.all(w == 1)
    assert _ds(hard_negative_prob=0.0).epoch_plan(0).size == n
    half = _ds(hard_negative_prob=0.5)
    sizes = [half.epoch_plan(e).size - n for e in range(6)]
    assert 0 < min(sizes) and max(sizes) < m and len(set(sizes)) > 1  # a different subset each epoch


def test_azimuthal_shuffle_keeps_radial_content_same_permutation_across_bands():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 33, 33)).astype(np.float32)
    x[1] = 2 * x[0]
    s = azimuthal_shuffle(x, np.random.default_rng(1))
    assert not np.array_equal(s, x)
    np.testing.assert_array_equal(s[1], 2 * s[0])  # one permutation for all bands
    b = radial_bins(33, 33, 2.0)
    for k in np.unique(b):
        np.testing.assert_array_equal(np.sort(s[0][b == k]), np.sort(x[0][b == k]))
    ctrl = rng.normal(size=(3, 33, 33)).astype(np.float32)
    hn = hard_negative(ctrl + x, ctrl, np.random.default_rng(1))
    np.testing.assert_allclose(hn - ctrl, s, atol=1e-5)


def test_core_dropout_zeroes_core_only():
    ds = _ds(core_dropout_prob=1.0)
    x, _, _ = ds.__getitems__([(0, i) for i in range(4)])
    core = torch.from_numpy(core_mask(33, 33, 5))
    assert torch.all(x[..., core] == 0) and torch.any(x[..., ~core] != 0)


def test_negatives_per_positive_mask_caps_each_split_deterministically():
    from darkhaloscope.training.data import negatives_per_positive_mask

    label = np.array([1, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0])
    split = np.array(["train"] * 6 + ["val"] * 5, dtype=object)
    oid = np.arange(100, 111)
    keep = negatives_per_positive_mask(label, split, oid, ratio=2)
    assert keep[label == 1].all()
    assert int((keep & (split == "train") & (label == 0)).sum()) == 2  # 1 positive x 2
    assert int((keep & (split == "val") & (label == 0)).sum()) == 3  # cap 4 > 3 negatives: all kept
    perm = np.random.default_rng(0).permutation(len(label))
    again = negatives_per_positive_mask(label[perm], split[perm], oid[perm], ratio=2)
    assert set(oid[perm][again]) == set(oid[keep])  # chosen by object id, not row order
    assert negatives_per_positive_mask(label, split, oid, ratio=0).all()
