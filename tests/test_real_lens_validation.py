"""Real-lens validation: held-out lenses detected against Σ C(θ_E, z_l) of their cells, with the
binomial and the cells' uncertainty, lenses outside the grid or in insufficient cells counted apart;
and, where the truth carries ψ, against Σ P_det(ψ) of the detection model, which the check gates on."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from scipy import stats as st

from darkhaloscope.errors import InputError
from darkhaloscope.evaluation.detection import PARAMETERS, fit_detection_model
from darkhaloscope.evaluation.validation import largest_pull, real_lens_validation, with_lens_truth
from tests.test_closure import PROPOSAL, THETA_E, Z_L, _injections

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


def _row(table: pa.Table, name: str, tier: str, method: str = "cell") -> dict:
    (row,) = [
        r for r in table.to_pylist() if r["threshold_name"] == name and r["tier"] == tier and r["method"] == method
    ]
    return row


@pytest.fixture(scope="module")
def bank() -> pa.Table:
    """Synthetic scored injections whose detection follows a known law of ψ (``tests.test_closure``)."""
    return _injections(2000)


@pytest.fixture(scope="module")
def model(bank):
    return fit_detection_model(bank, "t0.5", 0.5, PROPOSAL, [0.5, 2.5], n_bootstrap=3)


def _lenses_with_psi(bank: pa.Table, n: int = 12) -> pa.Table:
    """The first ``n`` injections as held-out lenses: their ψ, their scores, tier A."""
    rows = bank.slice(0, n)
    lenses = _lenses(
        rows.column("theta_e_arcsec").to_pylist(), rows.column("z_l").to_pylist(), rows.column("score").to_pylist()
    )
    for column in PARAMETERS:
        if column not in lenses.column_names:
            lenses = lenses.append_column(column, rows.column(column))
    return lenses


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
    assert largest_pull(r) == (pytest.approx(max(abs(p) for p in r.column("pull").to_pylist())), "cell")


def test_per_lens_rows_sum_the_detection_model_at_each_lens_psi(bank, model):
    lenses = _lenses_with_psi(bank)
    big = lenses.column("src_r_sersic_arcsec").to_numpy().copy()
    big[0] = 5.0  # beyond the proposal's 1″: outside the model's validity range
    mag = lenses.column("src_mag_r").to_pylist()
    mag[1] = None  # no source magnitude: no ψ
    lenses = lenses.set_column(lenses.column_names.index("src_r_sersic_arcsec"), "src_r_sersic_arcsec", pa.array(big))
    lenses = lenses.set_column(lenses.column_names.index("src_mag_r"), "src_mag_r", pa.array(mag, pa.float64()))
    r = real_lens_validation(lenses, THR, _selection(), training_object_ids=[], models={"t0.5": model})
    assert r.num_rows == 6 + 3  # no model at t0.9: no per-lens rows there
    row = _row(r, "t0.5", "all", "per_lens")
    assert (row["n"], row["n_with_truth"], row["n_outside_grid"], row["n_compared"]) == (12, 11, 1, 10)
    compared = lenses.slice(2)
    p = model.probabilities(compared)
    sd = np.sqrt(np.var(p[1:].sum(axis=1)) + np.sum(p[0] * (1 - p[0])))
    assert row["n_expected"] == pytest.approx(p[0].sum()) and row["n_expected_sd"] == pytest.approx(sd)
    detected = int((compared.column("score").to_numpy() > 0.5).sum())
    assert row["n_detected"] == detected and row["pull"] == pytest.approx((detected - p[0].sum()) / sd)
    assert _row(r, "t0.5", "all")["n_compared"] == 12  # the cell method needs θ_E and z_l only
    pulls = [abs(x["pull"]) for x in r.to_pylist() if x["method"] == "per_lens" and x["pull"] is not None]
    assert largest_pull(r) == (pytest.approx(max(pulls)), "per_lens")
    with pytest.raises(InputError, match="src_q"):
        real_lens_validation(lenses.drop_columns(["src_q"]), THR, _selection(), [], models={"t0.5": model})


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


def _mock_lake(tmp_path, c: float, bank: pa.Table):
    """A lake with the validation's inputs: 6 test-split and 1 training lens, a 2 x 2 selection
    function of C = ``c`` everywhere, two thresholds, the scored injection bank ``bank`` and the
    lenses' host rows in the sweeps; and the known lenses' truth as the mock writes it, ψ those of the
    bank's first 7 injections."""
    from darkhaloscope.constants import mag_to_flux
    from lake_platform.lake import Lake
    from tests.support.injection_lake import write_injection_bank

    lake = Lake(str(tmp_path / "lake"))
    sweep = "sweep-000p000-010p005.fits"
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
    lake.write_table("evaluation", "cutout_scores", scores, partition={"sweep_file": sweep})
    lake.write_table("evaluation", "thresholds", THR)
    lake.write_table("evaluation", "selection_function", _selection(c=c, half=0.0))
    lake.write_table("training", "training_set", pa.table({"object_id": np.array([7], np.int64)}))
    lake.write_table(
        "catalog", "positives", pa.table({"object_id": ids, "z_lens": [0.2, 0.5, None, 0.3, 0.6, 0.3, 0.2]})
    )
    write_injection_bank(lake, bank.append_column("kind", pa.array(["injection"] * bank.num_rows)), THETA_E, Z_L, "b0")
    psi = {k: bank.column(k).to_numpy()[:7] for k in bank.column_names}
    lake.write_table(
        "survey",
        "sweeps",
        pa.table(
            {
                "object_id": ids,
                "flux_z": mag_to_flux(psi["lens_mag_z"]),
                "mw_transmission_z": np.ones(7),
                "psfsize_r": psi["psf_fwhm_r"],
                "psfdepth_r": psi["psfdepth_r"],
            }
        ),
        partition={"sweep_file": sweep},
    )
    theta_e = np.array([1.0, 2.0, 1.2, 3.5, 1.8, 0.9, 1.0])  # the fourth outside the grid

    def ellipticity(q):
        return (1 - q) / (1 + q)

    truth = pa.table(
        {
            "object_id": ids,
            "z_lens": [0.2, 0.5, 0.3, 0.3, 0.6, 0.3, 0.2],  # 0.5 and 0.6 beyond the bank's lens redshifts
            "theta_e_arcsec": theta_e,
            "lens_e1": ellipticity(psi["lens_q"]),
            "lens_e2": np.zeros(7),
            "shear_g1": psi["shear_g1"],
            "shear_g2": psi["shear_g2"],
            "source_mag_r": psi["src_mag_r"],
            "source_r_sersic_arcsec": psi["src_r_sersic_arcsec"],
            "source_n_sersic": psi["src_n_sersic"],
            "source_e1": np.zeros(7),
            "source_e2": ellipticity(psi["src_q"]),
            "source_x_arcsec": np.zeros(7),
            "source_y_arcsec": -psi["src_beta_frac"] * theta_e,
            "g_minus_r": psi["src_g_minus_r"],
            "r_minus_z": psi["src_r_minus_z"],
        }
    )
    return lake, truth


def test_the_asset_on_the_mock_uses_the_known_lens_truth_and_gates_on_the_per_lens_rows(tmp_path, bank):
    import types

    import dagster as dg
    import pyarrow.parquet as pq

    from io_managers import LakeIOManager
    from resources import LakeResource, SurveyResource
    from tests.support.wap import run_assets

    lake, truth = _mock_lake(tmp_path, 0.05, bank)
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
    instance.add_dynamic_partitions("injection_batch", ["b0"])
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
    # tier A at t0.5: 3 of 3 detected against 0.15 ± sqrt(3 · 0.05 · 0.95): a pull of 7.6 from C
    assert _row(table, "t0.5", "A")["pull"] == pytest.approx((3 - 0.15) / np.sqrt(3 * 0.05 * 0.95))
    # per lens: the lenses at z_l 0.5 and 0.6 and at θ_E 3.5 are outside the model's range
    per_lens = _row(table, "t0.5", "all", "per_lens")
    assert (per_lens["n_with_truth"], per_lens["n_outside_grid"], per_lens["n_compared"]) == (6, 3, 3)
    assert per_lens["n_detected"] == 2 and 0 < per_lens["n_expected"] < 3
    checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert checks["real_lens_validation_contract"].passed
    # the check gates on the per-lens rows, which compare the lenses with their own ψ
    pull = checks["real_lens_validation_pull"]
    worst, method = largest_pull(table)
    assert method == "per_lens" and pull.metadata["method"].value == "per_lens"
    assert pull.passed == (worst <= 3.0) and pull.severity == dg.AssetCheckSeverity.WARN


def test_the_mock_known_lens_truth_maps_to_the_detection_models_parameters(tmp_path, bank):
    from lenstronomy.Util.param_util import ellipticity2phi_q

    from mock_survey.lenses import known_lens_parameters

    _, truth = _mock_lake(tmp_path, 0.5, bank)
    truth = truth.set_column(truth.column_names.index("lens_e2"), "lens_e2", pa.array(np.linspace(-0.2, 0.2, 7)))
    out = known_lens_parameters(truth)
    for q, (e1, e2) in (("lens_q", ("lens_e1", "lens_e2")), ("src_q", ("source_e1", "source_e2"))):
        pairs = zip(truth.column(e1).to_pylist(), truth.column(e2).to_pylist())
        expected = [ellipticity2phi_q(a, b)[1] for a, b in pairs]
        assert out.column(q).to_numpy() == pytest.approx(expected, rel=1e-12)
    assert out.column("src_q").to_numpy() == pytest.approx(bank.column("src_q").to_numpy()[:7], rel=1e-12)
    assert out.column("src_beta_frac").to_numpy() == pytest.approx(bank.column("src_beta_frac").to_numpy()[:7])
    assert out.column("z_l").to_pylist() == truth.column("z_lens").to_pylist()
    assert out.column("src_mag_r").to_pylist() == truth.column("source_mag_r").to_pylist()


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
