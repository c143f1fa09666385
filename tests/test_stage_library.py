"""Library functions the assets call (no Dagster): cutout targets and resume, stamps by id, the
recorded selection, the plan's grid in the selection function, bank rows for lenstronomy, audits."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from darkhaloscope.catalog.cuts import (
    NEGATIVE_SCHEMA,
    NegativeSelectionConfig,
    funnel_with_selection,
    recorded_selection,
)
from darkhaloscope.errors import InputError
from darkhaloscope.imaging.cutout_table import (
    TARGET_COLUMNS,
    InflightFetches,
    cutout_targets,
    load_stamps,
    reusable_cutouts,
)
from darkhaloscope.lensing.verify import lenstronomy_arguments
from darkhaloscope.stamps import to_tensor_array
from darkhaloscope.survey.manifest import sweep_manifest
from lake_platform.audits import Audit, combine, contract_audit, inside_box_audit
from lake_platform.contracts import Column, Contract
from lake_platform.lake import Lake
from table_registry import SWEEP_FILES
from table_registry.survey import SWEEPS_CONTRACT

SWEEP = "sweep-030m005-035p000.fits"


def _negatives(ids) -> pa.Table:
    n = len(ids)
    rows = {f.name: [None] * n for f in NEGATIVE_SCHEMA}
    rows.update(
        object_id=list(ids),
        ra=[31.0] * n,
        dec=[-2.0] * n,
        type=["DEV"] * n,
        split=["train"] * n,
        sweep_file=[SWEEP] * n,
        pool=["N1"] * n,
        nobs_z_bin=["3-5"] * n,
        type_bin=["DEV"] * n,
    )
    return pa.Table.from_pydict(rows, schema=pa.schema([f.with_nullable(True) for f in NEGATIVE_SCHEMA]))


def test_cutout_targets_label_negatives_and_positives_of_one_sweep_file():
    neg = _negatives([5, 1, 3])
    pos = pa.table({**{c: neg.column(c).slice(0, 2) for c in TARGET_COLUMNS}, "tier": ["A", "B"], "name": ["L1", "L2"]})
    pos = pos.set_column(pos.schema.get_field_index("object_id"), "object_id", pa.array([3, 9], pa.int64()))
    pos = pos.set_column(pos.schema.get_field_index("sweep_file"), "sweep_file", pa.array([SWEEP, "other.fits"]))
    targets = cutout_targets(neg, pos, pa.array([1, 3], pa.int64()), SWEEP)
    rows = [(r["object_id"], r["label"], r["in_training_catalog"], r["pool"]) for r in targets.to_pylist()]
    # sorted by id; the positive of another sweep file is not a target; id 3 is both (positive first)
    assert rows == [(1, 0, True, "N1"), (3, 1, True, "positive"), (3, 0, True, "N1"), (5, 0, False, "N1")]


def test_resume_reuses_fetched_cutouts_once_and_drops_failed_ones(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    inflight = InflightFetches(lake.inflight(), SWEEP)
    chunk = pa.table({"object_id": pa.array([1, 2], pa.int64()), "fetch_error": ["", "http_404"]})
    list(inflight.recording(chunk.to_batches()))
    published = pa.table({"object_id": pa.array([1, 3], pa.int64()), "fetch_error": ["", ""]})
    targets = pa.table({"object_id": pa.array([1, 2, 3], pa.int64())})
    reused = reusable_cutouts([published] + inflight.tables(), targets)
    assert reused.column("object_id").to_pylist() == [1, 3]  # 1 once, 2 failed: asked again
    assert lake.tables() == []  # in flight is not a table
    inflight.clear()
    assert inflight.tables() == [] and reusable_cutouts([], targets) is None


def test_load_stamps_in_request_order_with_a_found_mask(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    images = np.arange(3 * 3 * 101 * 101, dtype=np.float32).reshape(3, 3, 101, 101)
    lake.write_table(
        "imaging",
        "cutouts",
        pa.table({"object_id": pa.array([10, 20, 30], pa.int64()), "image": to_tensor_array(images)}),
        partition={"sweep_file": SWEEP},
    )
    (stamps,), found = load_stamps(lake.dataset("imaging", "cutouts"), [30, 99, 10, 30])
    assert found.tolist() == [True, False, True, True]
    assert np.array_equal(stamps[0], images[2]) and np.array_equal(stamps[2], images[0]) and not stamps[1].any()


def test_the_recorded_selection_is_the_one_every_partition_was_built_with():
    custom = NegativeSelectionConfig(zmag_max=19.5)
    funnel = {
        "input": 10,
        "dec_footprint": 1,
        "type": 1,
        "maskbits": 1,
        "nobs": 1,
        "zmag": 1,
        "known_lens": 1,
        "closure_reserve": 1,
        "selected": 3,
    }
    one = funnel_with_selection({"a.fits": funnel}, custom)
    assert recorded_selection(one).zmag_max == 19.5
    mixed = pa.concat_tables([one, funnel_with_selection({"b.fits": funnel}, NegativeSelectionConfig())])
    with pytest.raises(InputError, match="2 different selections"):
        recorded_selection(mixed)


def test_negatives_config_defaults_are_the_librarys():
    from lens_assets.catalog import NegativesConfig

    assert NegativesConfig().selection() == NegativeSelectionConfig()


def test_bank_row_to_lenstronomy_arguments():
    row = {
        "theta_e_arcsec": 1.2,
        "lens_e1": 0.1,
        "lens_e2": -0.05,
        "lens_center_x_arcsec": 0.02,
        "lens_center_y_arcsec": -0.01,
        "shear_g1": 0.03,
        "shear_g2": 0.0,
        "src_r_sersic_arcsec": 0.2,
        "src_n_sersic": 1.0,
        "src_e1": 0.0,
        "src_e2": 0.1,
        "src_x_arcsec": 0.1,
        "src_y_arcsec": -0.2,
        "psf_fwhm_r": 1.3,
        "src_mag_r": 22.5,
    }
    lens, src, fwhm, flux = lenstronomy_arguments(row)
    assert lens == {
        "theta_e": 1.2,
        "e1": 0.1,
        "e2": -0.05,
        "center_x": 0.02,
        "center_y": -0.01,
        "gamma1": 0.03,
        "gamma2": 0.0,
    }
    assert src["center_x"] == pytest.approx(0.12) and src["center_y"] == pytest.approx(
        -0.21
    )  # the source offset is from the lens
    assert fwhm == 1.3 and flux == pytest.approx(1.0)  # 22.5 AB = 1 nanomaggy


def test_audits_report_contract_and_box_violations_and_combine_partitions():
    manifest = sweep_manifest(["sweep-030m005-035p000.fits", "sweep-030m005-035p000.fits"], [1, 2])
    bad = contract_audit(Audit("sweep_files_contract", "contract"), manifest, SWEEP_FILES.contract)
    assert not bad.passed and bad.blocking and bad.severity == "ERROR" and "duplicate key" in bad.description
    coords = pa.table({"ra": [31.0, 36.0], "dec": [-1.0, -1.0]})
    box = inside_box_audit(Audit("sweeps_inside_box", "box"), coords, 30, 35, -5, 0)
    assert not box.passed and box.metadata["rows_outside_box"] == 1
    ok = contract_audit(SWEEPS_CONTRACT, pa.table({"x": [1]}), Contract("t", (Column("x", pa.int64(), "", "a count"),)))
    [merged] = combine([ok, ok.__class__(**{**ok.__dict__, "passed": False, "description": "broken"})], ["p1", "p2"])
    assert (
        not merged.passed
        and merged.description == "p2: broken"
        and set(merged.metadata["by_partition"]) == {"p1", "p2"}
    )
    warn = Audit("drift", "drift", blocking=False).outcome(False, problem="off")
    assert (warn.blocking, warn.severity, warn.description) == (False, "WARN", "off")
