"""The training set: assembled by the library from cutout rows (splits, tier weights, class ratio,
injection hosts with their inverse variance, the recorded preprocessing and injection-stream specs,
no rendered injection), and through dg.materialize as the asset calls it, with the visual grades
of search candidates joining it (graded lenses as positives, graded non-lenses as negatives, the
rounds used recorded)."""

import json
from dataclasses import replace

import dagster as dg
import numpy as np
import pyarrow as pa
import pytest

from darkhaloscope.errors import InputError
from darkhaloscope.lensing.bank import HOST_COLUMNS
from darkhaloscope.search.grades import GRADES_SCHEMA
from darkhaloscope.search.targets import TARGET_SCHEMA
from darkhaloscope.stamps import from_tensor_column
from darkhaloscope.training.data import load_training_set
from darkhaloscope.training.profiles import training_profile
from darkhaloscope.training.training_set import assemble_training_set, recorded_specs, training_rows
from io_managers import LakeIOManager
from lake_platform.lake import Lake
from lens_assets.training import training_set
from resources import ComputeResource, LakeResource, SurveyResource
from resources.imaging import ImagingResource
from tests.support.cutout_rows import cutouts_table
from tests.support.cutout_server import CutoutServer

SWEEP = "sweep-030m005-035p000.fits"


def test_assembled_training_set_holds_catalog_rows_and_injection_hosts():
    cut = cutouts_table()
    rows = training_rows(cut.drop(["image", "invvar"]))
    keep = np.isin(cut.column("object_id").to_numpy(), rows.column("object_id").to_numpy())
    images, invvar = from_tensor_column(cut.column("image"))[keep], from_tensor_column(cut.column("invvar"))[keep]
    prof = training_profile("demo")
    t = assemble_training_set(
        rows,
        images,
        invvar,
        preprocess=prof.preprocess,
        stream=prof.stream,
        tier_weights={"A": 1.0, "B": 0.5},
        negatives_per_positive=3,
    )
    assert set(t.column("split").to_pylist()) == {"train", "val"}  # the test split stays untouched
    rows_ = {r["object_id"]: r for r in t.select(["object_id", "label", "weight", "split"]).to_pylist()}
    assert rows_[1]["weight"] == 1.0 and rows_[2]["weight"] == 0.5  # tier A, tier B
    per_split = {
        s: (
            sum(r["label"] for r in rows_.values() if r["split"] == s),
            sum(1 - r["label"] for r in rows_.values() if r["split"] == s),
        )
        for s in ("train", "val")
    }
    assert per_split == {"train": (2, 6), "val": (1, 3)}  # at most 3 negatives per positive in each split
    assert set(HOST_COLUMNS) <= set(t.column_names) and "control" not in t.column_names  # no rendered injection
    assert recorded_specs(t.schema) == (prof.preprocess, prof.stream)
    a = load_training_set(t)
    hosts = a.object_id[a.host_index >= 0]
    negatives = set(a.object_id[a.label == 0].tolist())
    assert set(hosts.tolist()) == negatives - {6}  # every negative with a PSF size hosts injections
    assert (
        a.invvar.shape == (len(hosts), 3, 101, 101)
        and a.stream == prof.stream
        and a.host_columns.num_rows == len(hosts)
    )
    assert a.host_columns.column("object_id").to_pylist() == hosts.tolist()
    assert a.meta["preprocess_spec"] == prof.preprocess.to_dict()
    with pytest.raises(InputError, match="host injections"):
        assemble_training_set(rows, images, invvar, preprocess=prof.preprocess, stream=prof.stream, host_types=("PSF",))


def test_training_set_asset_records_the_profile(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    lake.write_table("imaging", "cutouts", cutouts_table(), partition={"sweep_file": SWEEP})
    result = dg.materialize(
        [training_set],
        resources=_resources(lake, tmp_path),
        run_config={"ops": {"training__training_set": {"config": {"negatives_per_positive": 3}}}},
    )
    assert result.success
    t = lake.read_table("training", "training_set")
    prof = training_profile("demo")
    assert recorded_specs(lake.read_schema("training", "training_set")) == (prof.preprocess, prof.stream)
    n_hosts = int(t.column("invvar").is_valid().to_numpy(zero_copy_only=False).sum())
    assert t.num_rows == 12 and n_hosts in (8, 9)
    md = result.asset_materializations_for_node("training__training_set")[0].metadata
    assert md["counts"].value["train/injection_host"] + md["counts"].value["val/injection_host"] == n_hosts
    assert md["injection_stream"].value["min_arc_snr"] == prof.stream.min_arc_snr


def test_training_set_config_sets_the_stream_acceptance(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    lake.write_table("imaging", "cutouts", cutouts_table(), partition={"sweep_file": SWEEP})
    config = lambda snr: {"ops": {"training__training_set": {"config": {"min_arc_snr": snr}}}}  # noqa: E731
    result = dg.materialize([training_set], resources=_resources(lake, tmp_path), run_config=config(3.0))
    assert result.success
    prof = training_profile("demo")
    assert recorded_specs(lake.read_schema("training", "training_set")) == (
        prof.preprocess,
        replace(prof.stream, min_arc_snr=3.0),
    )
    md = result.asset_materializations_for_node("training__training_set")[0].metadata
    assert md["injection_stream"].value["min_arc_snr"] == 3.0 != prof.stream.min_arc_snr
    # a threshold no arc S/N can mean is refused by name, and the published table stays as it was
    bad = dg.materialize(
        [training_set], resources=_resources(lake, tmp_path), run_config=config(-1.0), raise_on_error=False
    )
    assert not bad.success
    failure = next(e for e in bad.all_events if e.event_type_value == "STEP_FAILURE")
    assert "min_arc_snr must be a finite number >= 0, got -1.0" in str(failure.event_specific_data.error.message)
    assert recorded_specs(lake.read_schema("training", "training_set"))[1].min_arc_snr == 3.0
    # a threshold without a stream to apply it to is refused too, not silently ignored
    off = {"ops": {"training__training_set": {"config": {"min_arc_snr": 3.0, "injections": False}}}}
    bad = dg.materialize([training_set], resources=_resources(lake, tmp_path), run_config=off, raise_on_error=False)
    failure = next(e for e in bad.all_events if e.event_type_value == "STEP_FAILURE")
    assert "injections is false" in str(failure.event_specific_data.error.message)
    # the faint share of the training arcs, and a share no fraction can be, refused by name
    faint = {"ops": {"training__training_set": {"config": {"faint_fraction": 0.25}}}}
    assert dg.materialize([training_set], resources=_resources(lake, tmp_path), run_config=faint).success
    assert recorded_specs(lake.read_schema("training", "training_set"))[1] == replace(prof.stream, faint_fraction=0.25)
    over = {"ops": {"training__training_set": {"config": {"faint_fraction": 2.0}}}}
    bad = dg.materialize([training_set], resources=_resources(lake, tmp_path), run_config=over, raise_on_error=False)
    failure = next(e for e in bad.all_events if e.event_type_value == "STEP_FAILURE")
    assert "faint_fraction must be a number in [0, 1], got 2.0" in str(failure.event_specific_data.error.message)
    assert recorded_specs(lake.read_schema("training", "training_set"))[1].faint_fraction == 0.25


def _resources(lake: Lake, tmp_path, cutout_source: str = "auto") -> dict:
    return {
        "lake": LakeResource(uri=lake.uri),
        "io_manager": LakeIOManager(uri=lake.uri),
        "compute": ComputeResource(device="cpu", profile="demo"),
        "survey": SurveyResource(survey=str(tmp_path / "no-mirror")),
        "imaging": ImagingResource(cutout_source=cutout_source),
    }


def _search_targets(ids, splits) -> pa.Table:
    n = len(ids)
    values = {
        "object_id": ids,
        "sweep_file": [SWEEP] * n,
        "row_index": list(range(n)),
        "ra": [32.0 + 0.01 * i for i in range(n)],
        "dec": [0.5] * n,
        "type": ["DEV"] * n,
        "split": splits,
        "psfsize_r": [1.2] * n,
    }
    return pa.table({f.name: pa.array(values.get(f.name, [None] * n), f.type) for f in TARGET_SCHEMA})


def _grades(rows: list[tuple[int, int, str]]) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {
                "round": r,
                "object_id": o,
                "grade": g,
                "ra": 0.0,
                "dec": 0.0,
                "score": 0.99,
                "model_version": "v1",
                "known": False,
                "source_file": f"round{r}.csv",
                "source_sha256": "0" * 64,
            }
            for r, o, g in rows
        ],
        schema=GRADES_SCHEMA,
    )


def test_visual_grades_join_the_next_training_set_openly(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    lake.write_table("imaging", "cutouts", cutouts_table(), partition={"sweep_file": SWEEP})
    lake.write_table(
        "search",
        "search_targets",
        _search_targets([101, 102, 103], ["train", "val", "test"]),
        partition={"sweep_file": SWEEP},
    )
    # round 1: two new candidates (a lens, a non-lens), a test-split one, a catalog negative graded a
    # lens and a catalog positive graded not a lens; round 2 regrades candidate 101 and shows three
    # objects ungraded: a catalog negative (left out, awaiting inspection), a catalog positive
    # (stays) and the negative graded a lens in round 1 (stays a lens)
    lake.write_table(
        "search",
        "visual_grades",
        _grades(
            [
                (1, 101, "A"),
                (1, 102, "not_a_lens"),
                (1, 103, "B"),
                (1, 7, "A"),
                (1, 1, "not_a_lens"),
                (2, 101, "C"),
                (2, 9, "ungraded"),
                (2, 2, "ungraded"),
                (2, 7, "ungraded"),
            ]
        ),
    )
    with CutoutServer(size=101, lifetime_s=120) as server:
        result = dg.materialize([training_set], resources=_resources(lake, tmp_path, server.base_url))
    assert result.success
    t = lake.read_table("training", "training_set")
    row = {
        r["object_id"]: r
        for r in t.select(["object_id", "label", "tier", "pool", "weight", "grade_round", "split"]).to_pylist()
    }
    assert 103 not in row  # the test split stays untouched
    assert row[101] == {
        "object_id": 101,
        "label": 1,
        "tier": "C",
        "pool": "graded",
        "weight": 0.25,
        "grade_round": 2,
        "split": "train",
    }
    assert row[102]["label"] == 0 and row[102]["pool"] == "graded" and row[102]["grade_round"] == 1
    assert (row[7]["label"], row[7]["tier"], row[7]["pool"], row[7]["grade_round"]) == (
        1,
        "A",
        "N1",
        1,
    )  # relabelled, not silently
    assert (row[1]["label"], row[1]["grade_round"]) == (0, 1) and row[5]["grade_round"] is None
    hosts = dict(zip(t.column("object_id").to_pylist(), t.column("invvar").is_valid().to_pylist()))
    assert not any(hosts[i] for i in (101, 102, 7, 1)) and hosts[8]  # a graded row hosts no injection
    used = json.loads(t.schema.metadata[b"dhs.grades"])
    assert (
        used["rounds"] == [1, 2]
        and used["n_relabelled"] == 2
        and used["n_graded_added"] == 2
        and used["n_graded_outside_train_val"] == 1
    )
    assert 9 not in row and used["n_awaiting_inspection"] == 2 and used["n_negatives_awaiting_inspection_left_out"] == 1
    assert (row[2]["label"], row[2]["grade_round"]) == (1, None)
    a = load_training_set(t)
    assert a.image[list(a.object_id).index(101)].std() > 0  # the stamp was cut from the image source
    md = result.asset_materializations_for_node("training__training_set")[0].metadata
    assert md["visual_grades_used"].value["grades_sha256"] == used["grades_sha256"]
    none = dg.materialize(
        [training_set],
        resources=_resources(lake, tmp_path),
        run_config={"ops": {"training__training_set": {"config": {"grades_round": 0}}}},
    )
    plain = lake.read_table("training", "training_set")
    assert (
        none.success and plain.num_rows == 19 and plain.column("grade_round").null_count == 19
    )  # the catalog's train and val rows only
    assert json.loads(plain.schema.metadata[b"dhs.grades"])["rounds"] == []


def test_grades_of_objects_no_search_covers_are_refused(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    lake.write_table("imaging", "cutouts", cutouts_table(), partition={"sweep_file": SWEEP})
    lake.write_table("search", "search_targets", _search_targets([101], ["train"]), partition={"sweep_file": SWEEP})
    lake.write_table("search", "visual_grades", _grades([(1, 555, "A")]))
    result = dg.materialize([training_set], resources=_resources(lake, tmp_path), raise_on_error=False)
    assert not result.success and not lake.exists("training", "training_set")
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "graded objects [555]" in str(failure.event_specific_data.error.message)
