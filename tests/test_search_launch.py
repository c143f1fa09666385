"""search_scores launched as Spark tasks (local[2]) and through Dagster Pipes (a subprocess, as
the trainer is launched) publishes the very bytes the in-process launch publishes, from the same
loopback cutout service with an unscorable row; a Spark run resumes by chunk; a failing Spark
task or Pipes process fails the partition and publishes nothing; a run whose launch needs another
pool than the code location's search_scores holds (DHS_SEARCH_LAUNCH) is refused."""

from __future__ import annotations

import dagster as dg
import pytest

from darkhaloscope.search.launch import search_with_published_finder
from darkhaloscope.search.streaming import SearchSettings
from lake_platform.lake import Lake
from resources import ComputeResource, SurveyResource
from resources.compute import QuietPySparkResource
from resources.config import spark_config
from resources.imaging import ImagingResource
from table_registry import SEARCH_SCORES, SEARCH_STAMPS, SEARCH_TARGETS
from tests.support.cutout_server import CutoutServer
from tests.support.wap import events, published_files, run_assets
from tests.test_search_assets import SWEEP, N, _instance, _lake, _resources

SCORES, STAMPS, TARGETS = SEARCH_SCORES.key, SEARCH_STAMPS.key, SEARCH_TARGETS.key

CHUNK = 2  # N = 6 targets: three chunks, so the Spark launch runs several tasks
PART = {"sweep_file": SWEEP}


def _config(launch: str) -> dict:
    return {"ops": {"search_scores": {"config": {"keep_threshold": 0.0, "chunk": CHUNK, "launch": launch}}}}


#: The compute resource of a code location whose default search launch is Spark (DHS_SEARCH_LAUNCH=spark):
#: its search_scores holds the spark pool.
SPARK_COMPUTE = ComputeResource(device="cpu", profile="demo", search_launch="spark")


def _spark() -> QuietPySparkResource:
    pytest.importorskip("pyspark")
    return QuietPySparkResource(spark_config=spark_config("local[2]"))


def _search_lake(root, server, **resources) -> tuple[Lake, dict, dg.DagsterInstance]:
    """A small lake with its search targets published, its resources (over the test's image service)
    and an instance with its sweep partition."""
    lake, sweep = _lake(root)
    server.script(
        sweep.column("ra")[4].as_py(), sweep.column("dec")[4].as_py(), [404]
    )  # a target the service cannot deliver
    res, instance = {**_resources(lake, root, server), **resources}, _instance([SWEEP])
    assert run_assets([TARGETS], res, instance, partition_key=SWEEP).success
    return lake, res, instance


def _search(lake_and_resources, launch: str, raise_on_error: bool = True):
    _, resources, instance = lake_and_resources
    return run_assets(
        [SCORES, STAMPS],
        resources,
        instance,
        partition_key=SWEEP,
        run_config=_config(launch),
        raise_on_error=raise_on_error,
    )


def _search_tables(lake: Lake) -> dict[str, str]:
    return {
        k: v
        for k, v in published_files(lake).items()
        if k.startswith(("search/search_scores/", "search/search_stamps/"))
    }


def _metadata(result) -> dict:
    (mat,) = [
        e.materialization
        for e in result.get_asset_materialization_events()
        if e.materialization.asset_key == dg.AssetKey(list(SCORES))
    ]
    return {k: v.value for k, v in mat.metadata.items()}


def _local_tables(root, server) -> dict[str, str]:
    searched = _search_lake(root, server)
    assert all(e.passed for e in _search(searched, "local").get_asset_check_evaluations())
    return _search_tables(searched[0])


@pytest.mark.spark
def test_spark_launch_publishes_the_local_rows_and_resumes_by_chunk(tmp_path):
    with CutoutServer(size=101, lifetime_s=300) as server:
        local = _local_tables(tmp_path / "local", server)
        searched = _search_lake(tmp_path / "spark", server, pyspark=_spark(), compute=SPARK_COMPUTE)
        lake, resources, _ = searched
        # a run that died after committing its first chunk (the chunk an in-process run commits)
        targets = lake.read_table(*TARGETS, partition=PART)
        source = resources["imaging"].settings(resources["survey"])
        search_with_published_finder(
            lake.table("training", "lens_finder"),
            lake.inflight(),
            {SWEEP: targets},
            source,
            "cpu",
            SearchSettings(chunk=CHUNK, keep_threshold=0.0),
            chunks={SWEEP: [0]},
        )
        positions = list(zip(targets.column("ra").to_pylist(), targets.column("dec").to_pylist()))
        before = [server.count(ra, dec) for ra, dec in positions]
        result = _search(searched, "spark")
        fetched = [server.count(ra, dec) - b for (ra, dec), b in zip(positions, before)]
    assert all(e.passed for e in result.get_asset_check_evaluations())
    md = _metadata(result)
    assert (md["launch"], md["n_chunks"], md["n_scored_now"], md["n_resumed"], md["device"]) == (
        "spark",
        3,
        2,
        1,
        "cpu",
    )
    assert fetched[:CHUNK] == [0] * CHUNK and all(
        n >= 1 for n in fetched[CHUNK:]
    )  # the committed chunk is neither cut nor scored again
    assert len(local) == 2 and _search_tables(lake) == local
    scores = lake.read_table(*SCORES, partition=PART).sort_by("object_id")
    assert scores.num_rows == N and scores.column("invalid_reason")[4].as_py().startswith("fetch_failed: http_404")


def test_pipes_launch_publishes_the_local_rows(tmp_path):
    with CutoutServer(size=101, lifetime_s=300) as server:
        local = _local_tables(tmp_path / "local", server)
        searched = _search_lake(tmp_path / "pipes", server)
        result = _search(searched, "pipes")
    assert all(e.passed for e in result.get_asset_check_evaluations())
    md = _metadata(result)
    assert (md["launch"], md["n_chunks"], md["n_scored_now"], md["n_resumed"], md["device"]) == (
        "pipes",
        3,
        3,
        0,
        "cpu",
    )
    logs = [e.user_message for e in searched[2].all_logs(result.run_id)]
    assert any(f"{SWEEP}: chunk 3/3 scored" in m for m in logs)  # the process's progress, through Pipes
    assert len(local) == 2 and _search_tables(searched[0]) == local


@pytest.mark.spark
def test_a_failing_spark_task_or_pipes_process_fails_the_partition_and_publishes_nothing(tmp_path):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "survey-bricks.fits.gz").write_bytes(b"not a FITS file")  # the executors cannot open the image source
    with CutoutServer(size=101, lifetime_s=120) as server:
        searched = _search_lake(
            tmp_path,
            server,
            pyspark=_spark(),
            survey=SurveyResource(survey=str(mirror)),
            imaging=ImagingResource(cutout_source="auto"),
            compute=ComputeResource(device="cpu", profile="demo"),
        )
        lake, resources, instance = searched
        before = published_files(lake)
        unknown = _search(searched, "gpu", raise_on_error=False)
        other_pool = _search(searched, "spark", raise_on_error=False)
        failed = _search((lake, {**resources, "compute": SPARK_COMPUTE}, instance), "spark", raise_on_error=False)
        failed_process = _search(searched, "pipes", raise_on_error=False)
    assert not unknown.success and "search launch 'gpu'" in _failure(unknown)
    assert not other_pool.success and "search launch 'spark' holds the 'spark' pool" in _failure(other_pool)
    assert "set DHS_SEARCH_LAUNCH=spark" in _failure(other_pool)
    assert not failed.success and "cannot read brick table" in _failure(failed)
    assert not failed_process.success and "External execution process failed" in _failure(failed_process)
    logged = [
        e.dagster_event.event_specific_data.error.message
        for e in searched[2].all_logs(failed_process.run_id)
        if e.dagster_event and getattr(e.dagster_event.event_specific_data, "error", None)
    ]
    assert any("InputError: cannot read brick table" in m for m in logged)  # the process's own error, through Pipes
    assert published_files(lake) == before and not lake.exists(*SCORES)


def _failure(result) -> str:
    (failure,) = events(result, "STEP_FAILURE")
    return failure.event_specific_data.error.to_string()
