"""The survey's sweep files as a whole, through dg.materialize on a DR10-layout mirror:

- ``X.fits`` beside ``X.fits.gz`` (one sky box twice) is refused, naming both files;
- an object in two sweeps partitions fails the blocking cross-partition audit of the staged
  partition, which is then not published;
- a sweep file that left the mirror loses its Dagster partition (the registration the sensor and
  ``dhs`` run) and its lake partitions (every table partitioned by sweep file), so queries and
  whole-table readers no longer see it, and the run says so.
"""

import gzip

import dagster as dg
import pyarrow as pa
import pytest
from astropy.io import fits

from darkhaloscope.errors import InputError
from darkhaloscope.survey import sweep_model as sm
from darkhaloscope.survey.sweeps import SweepBox, check_one_file_per_box, ingest_sweep, objects_in_other_sweeps
from lake_platform.lake import Lake
from lake_platform.query import run_query
from lens_assets.shared.partitions import sweep_file_change
from lens_assets.survey import sweep_files, sweeps
from resources import LakeResource, SurveyResource
from resources.survey import SWEEP_DIR
from tests.support.sweep_rows import dr10_rows

A = "sweep-030m005-035p000.fits"
B = "sweep-035m005-040p000.fits"


def _write(folder, name: str, box: SweepBox, n: int = 12):
    rows = dr10_rows(n, box)
    cols = [fits.Column(name=c, format=t, array=rows[c]) for c, t in sm.DR10_SWEEP_COLUMNS if t != "L"]
    path = folder / SWEEP_DIR / name
    path.parent.mkdir(parents=True, exist_ok=True)
    fits.HDUList([fits.PrimaryHDU(), fits.BinTableHDU.from_columns(cols)]).writeto(path)
    return path


def _resources(tmp_path, lake: Lake) -> dict:
    from io_managers import LakeIOManager

    return {
        "survey": SurveyResource(survey=str(tmp_path / "mirror")),
        "lake": LakeResource(uri=lake.uri),
        "io_manager": LakeIOManager(uri=lake.uri),
    }


def test_one_box_twice_is_refused_naming_both_files(tmp_path):
    path = _write(tmp_path / "mirror", A, SweepBox(30, 35, -5, 0))
    path.with_name(A + ".gz").write_bytes(gzip.compress(path.read_bytes(), mtime=0))
    lake = Lake(str(tmp_path / "lake"))
    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize(
        [sweep_files], instance=instance, resources=_resources(tmp_path, lake), raise_on_error=False
    )
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert (
        f"'{A}' and '{A}.gz'" in failure.event_specific_data.error.message
        and "same box" in failure.event_specific_data.error.message
    )
    assert instance.get_dynamic_partitions("sweep_file") == []  # nothing registered, nothing ingested
    assert not [e for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]


def test_overlapping_boxes_are_refused_and_a_tiling_is_accepted():
    assert check_one_file_per_box([A, B]) == [SweepBox(30, 35, -5, 0), SweepBox(35, 40, -5, 0)]
    with pytest.raises(
        InputError, match="'sweep-030m005-040p000.fits' and 'sweep-035m005-040p000.fits' cover overlapping"
    ):
        check_one_file_per_box(["sweep-030m005-040p000.fits", B])


def test_an_object_in_two_partitions_fails_the_cross_partition_check(tmp_path):
    mirror = tmp_path / "mirror"
    path = _write(mirror, A, SweepBox(30, 35, -5, 0))
    _write(mirror, B, SweepBox(35, 40, -5, 0))
    lake = Lake(str(tmp_path / "lake"))
    # A lake written before the manifest refused it: the same catalog ingested under its .gz name too.
    gz = tmp_path / (A + ".gz")
    gz.write_bytes(gzip.compress(path.read_bytes()))
    ingest_sweep(gz, lake.table("survey", "sweeps"))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("sweep_file", [A, B])
    resources = _resources(tmp_path, lake)
    for name, expect in ((B, True), (A, False)):
        run = dg.materialize([sweeps], instance=instance, resources=resources, partition_key=name, raise_on_error=False)
        [evaluation] = [
            e for e in run.get_asset_check_evaluations() if e.check_name == "sweeps_unique_across_partitions"
        ]
        assert evaluation.passed is expect, evaluation.description
        assert run.success is expect and lake.exists("survey", "sweeps", {"sweep_file": name}) is expect
    assert evaluation.metadata["duplicates"].value == 12 and evaluation.metadata["with"].value == {A + ".gz": 12}
    assert objects_in_other_sweeps(lake.table("survey", "sweeps"), B) == {
        "duplicates": 0,
        "with": {},
        "examples": [],
        "compared_with": [],
    }


def test_a_sweep_file_that_left_the_mirror_leaves_the_lake(tmp_path):
    mirror = tmp_path / "mirror"
    _write(mirror, A, SweepBox(30, 35, -5, 0))
    gone = _write(mirror, B, SweepBox(35, 40, -5, 0))
    lake = Lake(str(tmp_path / "lake"))
    instance = dg.DagsterInstance.ephemeral()
    resources = _resources(tmp_path, lake)
    assert dg.materialize([sweep_files], instance=instance, resources=resources).success
    sweep_file_change(instance, resources["survey"]).apply(instance)
    for name in (A, B):
        assert dg.materialize([sweeps], instance=instance, resources=resources, partition_key=name).success
        # a downstream table partitioned by sweep file, as the catalog stage writes it
        lake.write_table(
            "catalog", "negatives", pa.table({"object_id": [1], "sweep_file": [name]}), partition={"sweep_file": name}
        )
    assert run_query(lake, "SELECT DISTINCT sweep_file FROM sweeps ORDER BY 1")[1] == [(A,), (B,)]

    gone.unlink()
    result = dg.materialize([sweep_files], instance=instance, resources=resources)
    sweep_file_change(instance, resources["survey"]).apply(instance)
    assert instance.get_dynamic_partitions("sweep_file") == [A]
    assert run_query(lake, "SELECT DISTINCT sweep_file FROM sweeps ORDER BY 1")[1] == [(A,)]
    assert run_query(lake, "SELECT DISTINCT sweep_file FROM negatives")[1] == [(A,)]
    assert [p["sweep_file"] for p in lake.partitions("survey", "sweeps")] == [A]
    [mat] = result.asset_materializations_for_node("survey__sweep_files")
    assert mat.metadata["removed_partitions"].value == [
        {"table": "catalog/negatives", "partition": {"sweep_file": B}},
        {"table": "survey/sweeps", "partition": {"sweep_file": B}},
    ]
    warnings = [e.message for e in instance.all_logs(result.run_id) if e.level >= 30 and "removed" in (e.message or "")]
    assert any(f"'sweep_file': '{B}'" in w and "no longer in the survey" in w for w in warnings)
