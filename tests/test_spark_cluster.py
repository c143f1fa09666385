"""The catalog stage and the search on a Spark cluster that is really another host: a standalone
master and two one-core workers in a network namespace with no default route, the lake on an S3
server (moto) on this side of the veth, behind a fault proxy (``tests.support.spark_cluster``).

- a task's executor runs inside the namespace and a broadcast round-trips (the driver advertises
  the address that routes to the master, found without being told);
- ``negatives`` and ``search_scores`` (``launch: spark``) publish the bytes a ``local[2]`` run
  publishes;
- faults: a worker killed mid-task (the task reruns, the same bytes), the veth taken down mid-run
  (a bounded failure naming the lost executors, nothing published, a rerun completes), S3
  answering 503 SlowDown (retried, the retries in the metadata), a driver advertising 127.0.0.1 and
  an unreachable master (bounded failures naming what failed, nothing published).

All tests share one cluster and, where they can, one Spark application; the ``local[2]`` runs they
compare with come first (one SparkContext per process).
"""

from __future__ import annotations

import threading
import time

import dagster as dg
import pyarrow.fs as pafs
import pytest

from darkhaloscope.catalog.spark_conf import spark_session
from io_managers import LakeIOManager
from lake_platform.lake import Lake
from resources import ComputeResource, LakeResource, SurveyResource
from resources.compute import CatalogLaunchResource, QuietPySparkResource
from resources.config import spark_config
from resources.imaging import ImagingResource
from resources.settings import spark_env
from table_registry import NEGATIVES, SELECTION_FUNNEL
from tests.support.cutout_server import CutoutServer
from tests.support.s3_server import fresh_bucket
from tests.support.wap import events, published_files, run_assets
from tests.test_catalog_pipes_s3 import NAMES
from tests.test_catalog_pipes_s3 import _lake as negatives_lake
from tests.test_search_assets import SWEEP, _instance
from tests.test_search_assets import _lake as search_lake
from tests.test_search_launch import CHUNK, SCORES, STAMPS, TARGETS, _search_tables

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.s3, pytest.mark.timeout(900)]
#: Seconds the cluster may take to give the driver an executor (at start, or back after a loss).
TIMEOUT_S = 60
SWEEPS_GET = r"/survey/sweeps/sweep_file(=|%3D)"  # the SDK may percent-encode the key


def _stop_spark() -> None:
    from pyspark import SparkContext

    if SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()


@pytest.fixture(scope="module")
def cluster_env(spark_cluster, monkeypatch_module):
    """The operator's properties file and the timeout in the environment, as on a real deployment."""
    monkeypatch_module.setenv("DHS_SPARK_CONF", str(spark_cluster.conf_file))
    monkeypatch_module.setenv("DHS_SPARK_TIMEOUT_S", str(TIMEOUT_S))
    monkeypatch_module.setenv("DHS_SPARK_DRIVER_MEMORY", "1g")
    yield spark_cluster
    _stop_spark()  # the next module's local session needs the process's one SparkContext


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


# ------------------------------------------------------------------------------ the runs


def _resources(lake: Lake, endpoint: str | None, master: str, **extra) -> dict:
    res = LakeResource(uri=lake.uri, s3_endpoint=endpoint)
    return {
        "lake": res,
        "io_manager": LakeIOManager(**res.model_dump()),
        # the search's Spark launch: its asset holds the spark pool (DHS_SEARCH_LAUNCH=spark)
        "compute": ComputeResource(device="cpu", profile="demo", search_launch="spark"),
        "pyspark": QuietPySparkResource(spark_config=spark_config(master)),
        "catalog_launch": CatalogLaunchResource(mode="local"),
        **extra,
    }


def _negatives(lake: Lake, endpoint: str | None, master: str, raise_on_error: bool = True):
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("sweep_file", NAMES)
    return run_assets(
        [NEGATIVES.key, SELECTION_FUNNEL.key],
        _resources(lake, endpoint, master),
        instance,
        partition_range=(NAMES[0], NAMES[-1]),
        raise_on_error=raise_on_error,
    )


def _s3_copy(local: Lake, env) -> Lake:
    """A lake in a fresh bucket of the cluster's S3 server (through the proxy) with ``local``'s files."""
    lake = Lake(f"s3://{fresh_bucket(env.s3, prefix='cluster')}/lake", s3_endpoint=env.proxy.endpoint_url)
    pafs.copy_files(local.root, lake.root, source_filesystem=local.fs, destination_filesystem=lake.fs)
    return lake


def _search(lake: Lake, endpoint: str | None, master: str, server: CutoutServer, root):
    res = _resources(
        lake,
        endpoint,
        master,
        survey=SurveyResource(survey=str(root / "no-mirror")),
        imaging=ImagingResource(cutout_source=server.base_url),
    )
    instance = _instance([SWEEP])
    assert run_assets([TARGETS], res, instance, partition_key=SWEEP).success
    cfg = {"ops": {"search_scores": {"config": {"keep_threshold": 0.0, "chunk": CHUNK, "launch": "spark"}}}}
    return run_assets([SCORES, STAMPS], res, instance, partition_key=SWEEP, run_config=cfg)


def _metadata(result, key) -> dict:
    """The metadata of ``key``'s materialization (the first partition's, when a run covers several)."""
    mats = [
        e.materialization
        for e in result.get_asset_materialization_events()
        if e.materialization.asset_key == dg.AssetKey(list(key))
    ]
    return {k: v.value for k, v in mats[0].metadata.items()}


def _when_held(proxy, action) -> threading.Thread:
    """A thread that waits until the proxy holds a request, then runs ``action`` (its error, if
    any, kept in ``.error``) while the test's main thread runs the assets."""

    def run():
        try:
            if not proxy.holding.wait(300):
                raise TimeoutError("no task read a sweep file")
            action()
        except BaseException as exc:
            proxy.release()
            thread.error = exc
            raise

    thread = threading.Thread(target=run, name="fault", daemon=True)
    thread.error = None
    thread.start()
    return thread


def _failure(result) -> str:
    (failure,) = events(result, "STEP_FAILURE")
    return failure.event_specific_data.error.to_string()


@pytest.fixture(scope="module")
def baselines(cluster_env, tmp_path_factory):
    """What ``local[2]`` publishes for the negatives and for the search (the search's images from a
    cutout service on the veth's root end, reachable from the namespace), and the local lakes
    their inputs came from. Runs before any cluster session of the module."""
    root = tmp_path_factory.mktemp("baselines")
    neg_inputs, neg = negatives_lake(root / "neg-inputs"), negatives_lake(root / "neg")
    _negatives(neg, None, "local[2]")
    server = CutoutServer(size=101, lifetime_s=3600, host=cluster_env.cluster.root_ip).__enter__()
    search_inputs, search = search_lake(root / "search-inputs")[0], search_lake(root / "search")[0]
    for sweep_lake in (search_inputs, search):  # a target the service cannot deliver, in both runs
        server.script(*_target(sweep_lake, 4), [404])
    _search(search, None, "local[2]", server, root)
    _stop_spark()
    yield {
        "negatives_inputs": neg_inputs,
        "negatives": published_files(neg),
        "search_inputs": search_inputs,
        "search": _search_tables(search),
        "server": server,
        "root": root,
    }
    server.__exit__(None, None, None)


def _target(lake: Lake, i: int) -> tuple[float, float]:
    sweep = lake.read_table("survey", "sweeps")
    return sweep.column("ra")[i].as_py(), sweep.column("dec")[i].as_py()


@pytest.fixture
def on_cluster(cluster_env, baselines):
    """The cluster's master; the module's cluster session runs (started when none does)."""
    proxy = cluster_env.proxy
    proxy.release()
    proxy.reset_counters()
    cluster_env.cluster.set_link(True)
    cluster_env.cluster.wait_alive()
    spark_session(cluster_env.cluster.master_url, app_name="dhs-cluster-tests", env=spark_env())
    return cluster_env.cluster.master_url


# ------------------------------------------------------------------------------ the tests


def test_executors_run_inside_the_namespace_and_a_broadcast_round_trips(cluster_env, on_cluster):
    cluster = cluster_env.cluster
    assert "default" not in cluster.routes_inside()  # nothing but the veth's subnet is reachable from inside
    spark = spark_session(on_cluster, env=spark_env())
    sc = spark.sparkContext
    # found by asking the kernel which local address routes to the master: the veth's root end
    assert sc.getConf().get("spark.driver.host") == cluster.root_ip
    assert sc.defaultParallelism == 2  # the cluster's cores, not a constant
    shared = sc.broadcast({"answer": 41})
    seen = sc.parallelize(range(4), 4).map(lambda i: (shared.value["answer"] + 1, open("/proc/net/dev").read()))
    seen = seen.collect()
    assert {n for n, _ in seen} == {42}
    for _, dev in seen:
        interfaces = {line.split(":")[0].strip() for line in dev.splitlines()[2:]}
        assert interfaces == {"lo", cluster.ns_if}, interfaces  # the namespace's, not this host's
    shared.destroy()


def test_negatives_and_search_on_the_cluster_publish_the_local_bytes(cluster_env, on_cluster, baselines):
    lake = _s3_copy(baselines["negatives_inputs"], cluster_env)
    result = _negatives(lake, cluster_env.proxy.endpoint_url, on_cluster)
    assert all(e.passed for e in result.get_asset_check_evaluations())
    assert published_files(lake) == baselines["negatives"]
    assert _metadata(result, NEGATIVES.key)["s3_retries"] == 0
    search = _s3_copy(baselines["search_inputs"], cluster_env)
    result = _search(search, cluster_env.proxy.endpoint_url, on_cluster, baselines["server"], baselines["root"])
    assert all(e.passed for e in result.get_asset_check_evaluations())
    md = _metadata(result, SCORES)
    assert (md["launch"], md["n_chunks"], md["n_scored_now"]) == ("spark", 3, 3)
    assert len(baselines["search"]) == 2 and _search_tables(search) == baselines["search"]


def test_a_worker_killed_mid_task_reruns_the_task_with_the_same_bytes(cluster_env, on_cluster, baselines):
    cluster, proxy = cluster_env.cluster, cluster_env.proxy
    lake = _s3_copy(baselines["negatives_inputs"], cluster_env)
    proxy.fail("hold", times=1, method="GET", path_re=SWEEPS_GET)  # the first sweep file read waits
    killed = []

    def kill():
        owner = cluster.connection_owner(proxy.held_from[0], (cluster.root_ip, proxy.port))
        killed.append(cluster.worker_running(owner))
        cluster.kill_worker(killed[0])  # the worker, its executor and the task's Python worker, at once
        proxy.release()

    fault = _when_held(proxy, kill)
    result = _negatives(lake, proxy.endpoint_url, on_cluster, raise_on_error=False)
    fault.join(60)
    assert fault.error is None and killed, fault.error
    assert result.success, _failure(result)
    held = next(p for m, p, a in proxy.log if a == "hold")
    # the killed task's file was read again, by its rerun
    assert [p for m, p, _ in proxy.log if m == "GET"].count(held) >= 2
    assert published_files(lake) == baselines["negatives"]
    cluster.start_worker(killed[0])
    cluster.wait_alive()


def test_s3_slowdown_is_retried_and_counted_in_the_metadata(cluster_env, on_cluster, baselines):
    proxy = cluster_env.proxy
    lake = _s3_copy(baselines["negatives_inputs"], cluster_env)
    proxy.fail("slowdown", times=4, path_re=SWEEPS_GET)  # the executors' reads of the sweep files
    result = _negatives(lake, proxy.endpoint_url, on_cluster)
    assert proxy.actions["slowdown"] == 4
    assert _metadata(result, NEGATIVES.key)["s3_retries"] == 4  # the SDK's retries, reported by the executors
    assert published_files(lake) == baselines["negatives"]


def test_the_link_cut_mid_run_fails_in_bounded_time_naming_the_lost_executors(cluster_env, on_cluster, baselines):
    cluster, proxy = cluster_env.cluster, cluster_env.proxy
    lake = _s3_copy(baselines["negatives_inputs"], cluster_env)
    before = published_files(lake)
    proxy.fail("hold", times=1, method="GET", path_re=SWEEPS_GET)  # a task is mid-read when the link goes
    cut = []
    fault = _when_held(proxy, lambda: (cut.append(time.monotonic()), cluster.set_link(False)))
    result = _negatives(lake, proxy.endpoint_url, on_cluster, raise_on_error=False)
    elapsed = time.monotonic() - cut[0] if cut else None
    fault.join(60)
    cluster.set_link(True)
    proxy.release()
    assert fault.error is None, fault.error
    assert not result.success
    message = _failure(result)
    assert "lost every executor" in message and cluster.ns_ip in message and on_cluster in message, message
    assert elapsed < TIMEOUT_S, elapsed  # the watchdog cancels after T/4 without a reachable executor
    assert published_files(lake) == before and not lake.exists(*NEGATIVES.key)  # nothing half-published
    cluster.wait_alive()
    again = _negatives(lake, proxy.endpoint_url, on_cluster)  # a new application: the lost one is stopped
    assert again.success and published_files(lake) == baselines["negatives"]


def test_a_driver_the_executors_cannot_reach_or_an_unreachable_master_fail_in_bounded_time(
    cluster_env, on_cluster, baselines, monkeypatch
):
    lake = _s3_copy(baselines["negatives_inputs"], cluster_env)
    before = published_files(lake)
    _stop_spark()
    monkeypatch.setenv("DHS_SPARK_DRIVER_HOST", "127.0.0.1")  # the old default: executors dial their own loopback
    monkeypatch.setenv("DHS_SPARK_TIMEOUT_S", "20")
    t0 = time.monotonic()
    result = _negatives(lake, cluster_env.proxy.endpoint_url, on_cluster, raise_on_error=False)
    elapsed = time.monotonic() - t0
    message = _failure(result)
    assert "SparkClusterError" in message, message
    assert "the executors could not reach the driver at 127.0.0.1:" in message, message
    assert on_cluster in message
    assert elapsed < 20 + 30, elapsed  # the timeout, and the driver's own start
    monkeypatch.delenv("DHS_SPARK_DRIVER_HOST")
    monkeypatch.setenv("DHS_SPARK_TIMEOUT_S", str(TIMEOUT_S))
    t0 = time.monotonic()
    unreachable = f"spark://{cluster_env.cluster.ns_ip}:7078"  # the cluster's host, no master on that port
    result = _negatives(lake, cluster_env.proxy.endpoint_url, unreachable, raise_on_error=False)
    assert f"the Spark master {unreachable} (DHS_SPARK_MASTER) is unreachable" in _failure(result)
    assert time.monotonic() - t0 < 30
    assert published_files(lake) == before and not lake.exists(*NEGATIVES.key)
    again = _negatives(lake, cluster_env.proxy.endpoint_url, on_cluster)  # the next run completes
    assert again.success and published_files(lake) == baselines["negatives"]
