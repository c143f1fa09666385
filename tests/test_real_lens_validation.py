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


def _mock_lake(tmp_path, c: float):
    """A lake with the validation's inputs: 6 test-split and 1 training lens, a 2 x 2 selection
    function of C = ``c`` everywhere, two thresholds."""
    from lake_platform.lake import Lake

    lake = Lake(str(tmp_path / "lake"))
    ids = np.arange(1, 8, dtype=np.int64)
    scores = pa.table(
        {
            "object_id": np.concatenate([ids, [10**9]]),
            "label": np.array([1] * 7 + [0], np.int8),
            "split": ["test"] * 6 + ["train", "test"],
            "tier": ["A", "A", "A", "B", "B", "B", "A", None],
            "score": [0.95, 0.95, 0.6, 0.95, 0.2, 0.1, 0.99, 0.3],
            "valid": [True] * 8,
        }
    )
    lake.write_table("evaluation", "cutout_scores", scores, partition={"sweep_file": "sweep-000p000-010p005.fits"})
    lake.write_table("evaluation", "thresholds", THR)
    lake.write_table("evaluation", "selection_function", _selection(c=c, half=0.0))
    lake.write_table("training", "training_set", pa.table({"object_id": np.array([7], np.int64)}))
    lake.write_table(
        "catalog", "positives", pa.table({"object_id": ids, "z_lens": [0.2, 0.5, None, 0.3, 0.6, 0.3, 0.2]})
    )
    truth = pa.table(
        {
            "object_id": ids,
            "z_lens": [0.2, 0.5, 0.3, 0.3, 0.6, 0.3, 0.2],
            "theta_e_arcsec": [1.0, 2.0, 1.2, 3.5, 1.8, 0.9, 1.0],  # the fourth outside the grid
        }
    )
    return lake, truth


def test_the_asset_on_the_mock_uses_the_known_lens_truth_and_warns_on_a_large_pull(tmp_path):
    import types

    import dagster as dg
    import pyarrow.parquet as pq

    from io_managers import LakeIOManager
    from resources import LakeResource, SurveyResource
    from tests.support.wap import run_assets

    lake, truth = _mock_lake(tmp_path, c=0.05)
    pq.write_table(truth, tmp_path / "known_lens_truth.parquet")

    class TruthSurvey(SurveyResource):
        """The mock survey, its manifest reduced to the known-lens truth written above."""

        truth_file: str = ""

        @property
        def is_mock(self) -> bool:
            return True

        def mock_manifest(self):
            import pathlib

            return types.SimpleNamespace(truth_path=pathlib.Path(self.truth_file))

    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("sweep_file", ["sweep-000p000-010p005.fits"])
    resource = LakeResource(uri=lake.uri)
    resources = {
        "lake": resource,
        "io_manager": LakeIOManager(uri=resource.uri),
        "survey": TruthSurvey(truth_file=str(tmp_path / "known_lens_truth.parquet")),
    }
    result = run_assets([("evaluation", "real_lens_validation")], resources, instance)
    table = lake.read_table("evaluation", "real_lens_validation")
    row = _row(table, "t0.5", "all")
    assert (row["n"], row["n_with_truth"], row["n_outside_grid"], row["n_compared"]) == (6, 6, 1, 5)
    assert row["n_detected"] == 3 and row["n_expected"] == pytest.approx(0.25)
    checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert checks["real_lens_validation_contract"].passed
    # tier A at t0.5: 3 of 3 detected against 0.15 ± sqrt(3 · 0.05 · 0.95): a pull of 7.6, warned
    pull = checks["real_lens_validation_pull"]
    assert not pull.passed and pull.severity == dg.AssetCheckSeverity.WARN
    assert _row(table, "t0.5", "A")["pull"] == pytest.approx((3 - 0.15) / np.sqrt(3 * 0.05 * 0.95))


def test_on_a_real_survey_the_truth_is_lenscats_z_lens_and_a_measured_theta_e_by_name(tmp_path):
    from lens_assets.validation import _lens_truth
    from resources import SurveyResource

    positives = pa.table(
        {"object_id": pa.array([1, 2, 3], pa.int64()), "name": ["J1", "J2", "J3"], "z_lens": [0.2, None, 0.5]}
    )
    mirror = str(tmp_path / "mirror")
    truth, source = _lens_truth(SurveyResource(survey=mirror), positives)
    assert truth.column("theta_e_arcsec").null_count == 3 and "no θ_E" in source
    scores = _lenses([1.0, 1.0, 1.0], [0.2, 0.2, 0.2]).drop_columns(["theta_e_arcsec", "z_l"])
    scores = scores.set_column(0, "object_id", pa.array([1, 2, 3], pa.int64()))
    row = _row(real_lens_validation(with_lens_truth(scores, truth), THR, _selection(), []), "t0.5", "all")
    assert (row["n"], row["n_with_truth"], row["n_compared"], row["pull"]) == (3, 0, 0, None)

    radii = tmp_path / "theta_e.csv"
    radii.write_text("name,theta_e_arcsec\nJ1,1.1\nJ2,1.3\nJ9,2.0\n")
    truth, source = _lens_truth(SurveyResource(survey=mirror, known_lens_theta_e=str(radii)), positives)
    assert truth.column("theta_e_arcsec").to_pylist() == [1.1, 1.3, None] and "theta_e.csv" in source
    row = _row(real_lens_validation(with_lens_truth(scores, truth), THR, _selection(), []), "t0.5", "all")
    # J2 has no z_lens, J3 no θ_E: one lens compared
    assert (row["n_with_truth"], row["n_compared"], row["n_expected"]) == (1, 1, 0.5)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("name,theta\nJ1,1.0\n", "theta_e_arcsec"),
        ("name,theta_e_arcsec\nJ1,-1.0\n", "'theta_e_arcsec' has 1 value"),
        ("name,theta_e_arcsec\nJ1,1.0\nJ1,2.0\n", "'name' repeats"),
        ("name,theta_e_arcsec\n,1.0\n", "'name' is empty"),
        ("name,theta_e_arcsec\nJ1,big\n", "'theta_e_arcsec' is string"),
    ],
)
def test_a_bad_theta_e_table_names_the_file_and_column(tmp_path, text, match):
    from darkhaloscope.evaluation.validation import read_theta_e_table

    path = tmp_path / "radii.csv"
    path.write_text(text)
    with pytest.raises(InputError, match=match) as err:
        read_theta_e_table(str(path))
    assert "radii.csv" in str(err.value)
    with pytest.raises(InputError, match="no such file"):
        read_theta_e_table(str(tmp_path / "absent.parquet"))
