"""Real-lens validation: held-out lenses detected against Σ C(θ_E, z_l) of their cells, with the
binomial and the cells' uncertainty, lenses outside the grid or in insufficient cells counted apart."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from scipy import stats as st

from darkhaloscope.errors import InputError
from darkhaloscope.evaluation.validation import largest_pull, real_lens_validation, with_lens_truth

THR = pa.table({"name": ["t0.5", "t0.9"], "threshold": [0.5, 0.9]})


def _selection(c: float = 0.5, half: float = 0.1, sufficient=(True, True, True, True)) -> pa.Table:
    """A 2 x 2 grid: θ_E cells [0.5, 1.5), [1.5, 2.5] arcsec, z_l cells [0.15, 0.45), [0.45, 0.75]."""
    rows = []
    for name in ("t0.5", "t0.9"):
        for i, (te_lo, zl_lo) in enumerate([(0.5, 0.15), (0.5, 0.45), (1.5, 0.15), (1.5, 0.45)]):
            rows.append(
                {
                    "threshold_name": name,
                    "theta_e_lo": te_lo,
                    "theta_e_hi": te_lo + 1.0,
                    "z_l_lo": zl_lo,
                    "z_l_hi": zl_lo + 0.3,
                    "completeness": c,
                    "ci68_lo": c - half,
                    "ci68_hi": c + half,
                    "sufficient": sufficient[i],
                }
            )
    return pa.Table.from_pylist(rows)


def _lenses(theta_e, z_l, score=None, tier=None) -> pa.Table:
    n = len(theta_e)
    return pa.table(
        {
            "object_id": pa.array(np.arange(100, 100 + n), pa.int64()),
            "tier": tier or ["A"] * n,
            "split": ["test"] * n,
            "score": pa.array(score if score is not None else [0.95] * n, pa.float32()),
            "valid": [True] * n,
            "theta_e_arcsec": pa.array(theta_e, pa.float64()),
            "z_l": pa.array(z_l, pa.float64()),
        }
    )


def _row(table: pa.Table, name: str, tier: str) -> dict:
    (row,) = [r for r in table.to_pylist() if r["threshold_name"] == name and r["tier"] == tier]
    return row


def test_a_completeness_of_one_half_everywhere_expects_half_the_lenses():
    te = [0.8, 1.0, 1.2, 1.8, 2.0, 2.2, 0.9, 2.4]
    zl = [0.2, 0.5, 0.3, 0.6, 0.2, 0.7, 0.44, 0.5]
    r = real_lens_validation(_lenses(te, zl), THR, _selection(half=0.0), training_object_ids=[])
    row = _row(r, "t0.5", "all")
    assert (row["n"], row["n_with_truth"], row["n_compared"], row["n_detected"]) == (8, 8, 8, 8)
    assert row["n_expected"] == pytest.approx(4.0)
    # cells without uncertainty: the sd is the binomial one
    assert row["n_expected_sd"] == pytest.approx(st.binom(8, 0.5).std())
    assert row["pull"] == pytest.approx((8 - 4.0) / st.binom(8, 0.5).std())
    assert _row(r, "t0.5", "B")["n"] == 0 and _row(r, "t0.5", "B")["pull"] is None


def test_the_cells_uncertainty_is_shared_by_the_lenses_of_a_cell():
    # three lenses in cell (0.5-1.5, 0.15-0.45), one in (1.5-2.5, 0.45-0.75)
    r = real_lens_validation(
        _lenses([0.8, 1.0, 1.2, 2.0], [0.2, 0.3, 0.4, 0.6]), THR, _selection(half=0.1), training_object_ids=[]
    )
    row = _row(r, "t0.9", "A")
    assert row["n_expected_sd"] == pytest.approx(np.sqrt(4 * 0.25 + (3 * 0.1) ** 2 + (1 * 0.1) ** 2))


def test_lenses_outside_the_grid_or_in_insufficient_cells_or_without_truth_are_counted_apart():
    te = [1.0, 5.0, 1.0, 2.0, None, 1.0, 2.5]
    zl = [0.2, 0.3, 0.9, 0.5, 0.3, None, 0.75]  # the last on the grid's outer upper edges
    sel = _selection(sufficient=(True, True, True, False))
    r = real_lens_validation(_lenses(te, zl), THR, sel, training_object_ids=[])
    row = _row(r, "t0.5", "A")
    assert (row["n"], row["n_with_truth"], row["n_outside_grid"]) == (7, 5, 2)
    assert (row["n_insufficient_cell"], row["n_compared"]) == (2, 1)
    assert row["n_expected"] == pytest.approx(0.5)


def test_detections_per_threshold_and_tier():
    te, zl = [1.0, 1.0, 2.0, 2.0], [0.2, 0.5, 0.2, 0.5]
    lenses = _lenses(te, zl, score=[0.95, 0.7, 0.3, 0.6], tier=["A", "A", "B", "B"])
    r = real_lens_validation(lenses, THR, _selection(), training_object_ids=[])
    assert r.num_rows == 6
    assert _row(r, "t0.5", "A")["n_detected"] == 2 and _row(r, "t0.5", "B")["n_detected"] == 1
    assert _row(r, "t0.9", "all")["n_detected"] == 1
    # tier A at t0.5: 2 detected against 1 expected, sd sqrt(2 · 0.25 + 2 · 0.1²)
    assert _row(r, "t0.5", "A")["pull"] == pytest.approx(1.0 / np.sqrt(0.52))
    assert largest_pull(r) == pytest.approx(max(abs(p) for p in r.column("pull").to_pylist()))


def test_unscorable_rows_other_splits_and_training_lenses():
    lenses = _lenses([1.0, 1.0, 2.0], [0.2, 0.5, 0.2])
    valid = pa.array([True, False, True])
    lenses = lenses.set_column(lenses.schema.get_field_index("valid"), "valid", valid)
    lenses = lenses.set_column(lenses.schema.get_field_index("split"), "split", pa.array(["test", "test", "val"]))
    row = _row(real_lens_validation(lenses, THR, _selection(), training_object_ids=[]), "t0.5", "all")
    assert (row["n"], row["n_compared"]) == (1, 1)
    with pytest.raises(InputError, match="object_id 100"):
        real_lens_validation(lenses, THR, _selection(), training_object_ids=[100])


def test_bad_input_names_the_column():
    lenses = _lenses([1.0], [0.2])
    with pytest.raises(InputError, match="theta_e_arcsec"):
        real_lens_validation(lenses.drop_columns(["theta_e_arcsec"]), THR, _selection(), training_object_ids=[])
    as_text = lenses.set_column(lenses.schema.get_field_index("z_l"), "z_l", pa.array(["0.2"]))
    with pytest.raises(InputError, match="'z_l'"):
        real_lens_validation(as_text, THR, _selection(), training_object_ids=[])
    negative = _lenses([-1.0], [0.2])
    with pytest.raises(InputError, match="'theta_e_arcsec' has negative"):
        real_lens_validation(negative, THR, _selection(), training_object_ids=[])
    with pytest.raises(InputError, match="sufficient"):
        real_lens_validation(lenses, THR, _selection().drop_columns(["sufficient"]), training_object_ids=[])
    other = pa.table({"name": ["t0.7"], "threshold": [0.7]})
    with pytest.raises(InputError, match="no cell at threshold 't0.7'"):
        real_lens_validation(lenses, other, _selection(), training_object_ids=[])


def test_with_lens_truth_joins_by_object_id_and_never_fills():
    scores = pa.table({"object_id": pa.array([1, 2, 3], pa.int64())})
    truth = pa.table({"object_id": [3, 1], "z_lens": [0.4, None], "theta_e_arcsec": [1.2, 0.9]})
    out = with_lens_truth(scores, truth)
    assert out.column("theta_e_arcsec").to_pylist() == [0.9, None, 1.2]
    assert out.column("z_l").to_pylist() == [None, None, 0.4]
    lenscat = with_lens_truth(scores, pa.table({"object_id": [1], "z_lens": [0.3]}))
    assert lenscat.column("theta_e_arcsec").to_pylist() == [None, None, None]
    assert lenscat.column("z_l").to_pylist() == [0.3, None, None]
    with pytest.raises(InputError, match="'object_id' repeats"):
        with_lens_truth(scores, pa.table({"object_id": [1, 1], "z_lens": [0.3, 0.4]}))
    with pytest.raises(InputError, match="z_lens"):
        with_lens_truth(scores, pa.table({"object_id": [1]}))
