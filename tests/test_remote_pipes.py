"""Steps launched through ``DHS_LAUNCH_PREFIX`` on a host that shares nothing with the orchestrator
but the lake and the Pipes bucket (``resources.launch.PipesLaunchClient``).

The far side is the session's network namespace (``tests.support.netns``: no default route, moto
on the root end of the veth), entered with a clean environment (``env -i``: a PATH and the AWS
test credentials, passed explicitly, nothing else) and a private ``/tmp`` (``unshare -m`` and a
fresh tmpfs), so the step can read and write only the lake on S3. Through that prefix:

- the trainer publishes the model bytes and the registry row a local launch publishes, its logs
  and metrics arriving in the Dagster run, its run folder in the lake's in-flight area;
- the search worker publishes the rows of the in-process launch;
- a prefix that exits non-zero, a step that never writes its messages and a missing bucket each
  fail in bounded time naming what failed, publish nothing, and the next run completes.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pyarrow.fs as pafs
import pytest

from darkhaloscope.errors import InputError
from io_managers import LakeIOManager
from lake_platform.lake import Lake
from lens_assets import training as training_assets
from resources import ComputeResource, LakeResource, SurveyResource
from resources.compute import CatalogLaunchResource, QuietPySparkResource
from resources.config import spark_config
from resources.imaging import ImagingResource
from resources.launch import PipesLaunchClient, shown
from resources.settings import validate
from table_registry import LENS_FINDER, NEGATIVES, SELECTION_FUNNEL
from tests.support.cutout_server import CutoutServer
from tests.support.netns import far_side_prefix
from tests.support.s3_server import TEST_ENV, fresh_bucket
from tests.support.tiny_finder import use_tiny_training_profile, write_tiny_training_set
from tests.support.wap import events, published_files, run_assets
from tests.test_catalog_pipes_s3 import NAMES
from tests.test_catalog_pipes_s3 import _lake as negatives_lake
from tests.test_search_assets import SWEEP, _instance
from tests.test_search_assets import _lake as search_lake
from tests.test_search_launch import CHUNK, SCORES, STAMPS, TARGETS, _search_tables

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def tiny_profile(monkeypatch):
    use_tiny_training_profile(monkeypatch, ROOT)


RUNS = ("_inflight", "training", "lens_finder_runs.files", "runs")


def _s3_lake(host, name: str = "remote") -> Lake:
    return Lake(f"s3://{fresh_bucket(host.s3, prefix=name)}/lake", s3_endpoint=host.s3.endpoint_url)


def _launcher(host, prefix: str = "", **kwargs) -> PipesLaunchClient:
    bucket = fresh_bucket(host.s3, prefix="pipes") if prefix else ""
    return PipesLaunchClient(
        launch_prefix=prefix, bucket=bucket, s3_endpoint=host.s3.endpoint_url, cwd=str(ROOT), **kwargs
    )


def _train(lake: Lake, launcher: PipesLaunchClient, instance=None):
    resource = LakeResource(uri=lake.uri, s3_endpoint=lake.s3_endpoint)
    return dg.materialize(
        [training_assets.lens_finder],
        resources={
            "lake": resource,
            "io_manager": LakeIOManager(**resource.model_dump()),
            "compute": ComputeResource(device="cpu", profile="demo"),
            "pipes_subprocess_client": launcher,
        },
        run_config={"ops": {"training__lens_finder": {"config": {"core_threshold": 0.99}}}},
        instance=instance,
        raise_on_error=False,
    )


def _read(lake: Lake, relative: str) -> bytes:
    with lake.fs.open_input_stream(f"{lake.root}/{relative}") as f:
        return f.read()


def _published_model(lake: Lake) -> dict[str, object]:
    """The published checkpoint's files and registry row; the spec without the epochs' wall-clock
    seconds (the only field that is not a function of the inputs)."""
    files = {k: v for k, v in published_files(lake).items() if k.startswith("training/lens_finder")}
    spec = json.loads(_read(lake, "training/lens_finder.files/artifact=checkpoint/best.json"))
    for row in spec["training_state"]["history"]:
        row.pop("seconds")
    files["training/lens_finder.files/artifact=checkpoint/best.json"] = spec
    return {"files": files, "row": lake.read_table(*LENS_FINDER.key).to_pylist()}


def _run_files(lake: Lake) -> list[str]:
    selector = pafs.FileSelector("/".join((lake.root, *RUNS)), recursive=True, allow_not_found=True)
    return sorted(i.path.rsplit("/", 1)[1] for i in lake.fs.get_file_info(selector) if i.type == pafs.FileType.File)


def _failure(result) -> str:
    (failure,) = events(result, "STEP_FAILURE")
    return failure.event_specific_data.error.to_string()


def _logs(instance, result) -> list[str]:
    return [e.user_message for e in instance.all_logs(result.run_id)]


pytestmark = [pytest.mark.s3]


# ------------------------------------------------------------------------------ settings


def test_a_launch_prefix_needs_the_bucket_and_a_well_formed_command():
    with pytest.raises(InputError, match=r"DHS_LAUNCH_PREFIX='ssh gpu01' needs DHS_PIPES_BUCKET"):
        validate({"DHS_LAUNCH_PREFIX": "ssh gpu01"})
    validate({"DHS_LAUNCH_PREFIX": "ssh gpu01", "DHS_PIPES_BUCKET": "pipes"})
    with pytest.raises(InputError, match=r"DHS_LAUNCH_PREFIX=.*not a command line"):
        validate({"DHS_LAUNCH_PREFIX": "ssh 'gpu01", "DHS_PIPES_BUCKET": "pipes"})
    with pytest.raises(InputError, match=r"DHS_LAUNCH_TIMEOUT_S='2': expected at least 5 seconds"):
        validate({"DHS_LAUNCH_TIMEOUT_S": "2"})
    with pytest.raises(InputError, match=r"DHS_LAUNCH_PYTHON='/opt/my env/bin/python': expected a path without"):
        validate({"DHS_LAUNCH_PYTHON": "/opt/my env/bin/python"})
    with pytest.raises(InputError, match="needs DHS_PIPES_BUCKET"):
        PipesLaunchClient(launch_prefix="srun --gres=gpu:1 --")


def test_a_word_a_remote_shell_would_change_is_refused():
    client = PipesLaunchClient(launch_prefix="ssh gpu01", bucket="pipes", python="/opt/my env/bin/python")
    with pytest.raises(InputError, match="a remote shell would change"):
        client._argv([sys.executable, "-m", "lens_assets.pipes.search_sweep"], {})
    argv = PipesLaunchClient(launch_prefix="ssh gpu01", bucket="b", s3_endpoint="http://10.0.0.1:9000")._argv(
        ["python", "-m", "m"], {"--dagster-pipes-context": "eJw+/="}
    )
    assert argv == ["ssh", "gpu01", "python", "-m", "m", "--dagster-pipes-context", "eJw+/=", "--dhs-s3-endpoint"] + [
        "http://10.0.0.1:9000"
    ]
    inline = ["env", "AWS_SECRET_ACCESS_KEY=abc/d", "AWS_SESSION_TOKEN=t", "AWS_PROFILE=dhs", "ssh", "gpu01"]
    assert shown(inline) == "env AWS_SECRET_ACCESS_KEY=REDACTED AWS_SESSION_TOKEN=REDACTED AWS_PROFILE=dhs ssh gpu01"


# ------------------------------------------------------------------------------ the far host


@pytest.mark.slow
def test_the_far_side_has_no_environment_no_tmp_and_no_network_but_the_lake(netns_host, tmp_path):
    marker = Path("/tmp") / f"dhs-orchestrator-{os.getpid()}"
    marker.write_text("the orchestrator's temp folder")
    code = (
        "import json, os, socket, urllib.request\n"
        "def reach(host, port):\n"
        "    try:\n"
        "        socket.create_connection((host, port), timeout=3).close(); return True\n"
        "    except OSError:\n"
        "        return False\n"
        f"print(json.dumps({{'env': sorted(os.environ), 'tmp': os.listdir('/tmp'), "
        f"'s3': reach({netns_host.s3.host!r}, {netns_host.s3.port}), 'loopback_s3': reach('127.0.0.1', "
        f"{netns_host.s3.port}), 'internet': reach('1.1.1.1', 443)}}))"
    )
    try:
        far = subprocess.run(
            [*shlex.split(far_side_prefix(netns_host.netns)), sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    finally:
        marker.unlink()
    seen = json.loads(far.stdout)
    assert set(seen["env"]) <= {"PATH", "HOME", "OMP_NUM_THREADS", *TEST_ENV, "PWD", "SHLVL", "_", "LC_CTYPE"}
    assert not any(k.startswith(("DHS_", "DAGSTER_")) for k in seen["env"])
    assert seen["tmp"] == []  # a /tmp of its own
    assert seen["s3"] and not seen["loopback_s3"] and not seen["internet"]


@dg.asset
def echo(context, pipes_subprocess_client: dg.PipesSubprocessClient):
    command = [sys.executable, "-m", "tests.support.pipes_echo"]
    done = pipes_subprocess_client.run(context=context, command=command, extras={"token": "t0k3n"})
    return done.get_materialize_result()


@pytest.mark.slow
def test_the_far_sides_stdout_and_stderr_arrive_through_the_bucket(netns_host, capsys):
    # the far side's own output goes nowhere (as under sbatch): what arrives came through the bucket
    prefix = far_side_prefix(netns_host.netns) + " sh -c " + shlex.quote('exec "$@" >/dev/null 2>&1') + " sh"
    result = dg.materialize([echo], resources={"pipes_subprocess_client": _launcher(netns_host, prefix)})
    (mat,) = [e.materialization for e in result.get_asset_materialization_events()]
    assert mat.metadata["token"].value == "t0k3n"
    out, err = capsys.readouterr()
    assert "stdout of the far side: t0k3n" in out and "stderr of the far side: t0k3n" in err, (out[-2000:], err[-2000:])


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_trainer_through_the_prefix_publishes_the_bytes_of_a_local_launch(netns_host, tiny_profile):
    lake = _s3_lake(netns_host)
    write_tiny_training_set(lake)
    local = _train(lake, _launcher(netns_host))
    assert local.success, _failure(local)
    expected, local_runs = _published_model(lake), _run_files(lake)
    assert "complete.json" in local_runs and "gates.json" in local_runs  # the local launch's runs: in the lake too

    # the same lake, its model and runs gone: the far host trains from scratch
    for folder in ("training/lens_finder", "/".join(RUNS[:3])):
        lake.fs.delete_dir(f"{lake.root}/{folder}")
    instance = dg.DagsterInstance.ephemeral()
    remote = _train(lake, _launcher(netns_host, far_side_prefix(netns_host.netns)), instance)
    assert remote.success, _failure(remote)
    assert _published_model(lake) == expected
    assert _run_files(lake) == local_runs  # the run folder the far host wrote, through the lake only
    logs = _logs(instance, remote)
    assert any(m.startswith("lens_finder epoch 0: loss") for m in logs), logs  # the trainer's logs, through the bucket
    assert any("training runs in s3://" in m and "trained in /tmp/" in m for m in logs), logs
    (mat,) = [e.materialization for e in remote.get_asset_materialization_events()]
    metadata = {k: getattr(v, "value", v) for k, v in mat.metadata.items()}
    assert metadata["reused"] is False and metadata["val_auroc"] > 0.5  # its metrics, in the Dagster run
    assert metadata["run_dir"].startswith(f"s3://{lake.root}/_inflight/training/lens_finder_runs.files/runs/")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_search_worker_through_the_prefix_publishes_the_rows_of_the_local_launch(netns_host, tmp_path):
    with CutoutServer(size=101, lifetime_s=900, host=netns_host.netns.root_ip) as server:
        rows = {}
        for launch in ("local", "pipes"):
            inputs = search_lake(tmp_path / launch)[0]
            server.script(*_target(inputs, 4), [404])  # a target the service cannot deliver
            lake = _s3_lake(netns_host, name="search")
            pafs.copy_files(inputs.root, lake.root, source_filesystem=inputs.fs, destination_filesystem=lake.fs)
            res = LakeResource(uri=lake.uri, s3_endpoint=lake.s3_endpoint)
            resources = {
                "lake": res,
                "io_manager": LakeIOManager(**res.model_dump()),
                "compute": ComputeResource(device="cpu", profile="demo"),
                "survey": SurveyResource(survey=str(tmp_path / "no-mirror")),
                "imaging": ImagingResource(cutout_source=server.base_url),
                "pipes_subprocess_client": _launcher(netns_host, far_side_prefix(netns_host.netns)),
            }
            instance = _instance([SWEEP])
            assert run_assets([TARGETS], resources, instance, partition_key=SWEEP).success
            cfg = {"ops": {"search_scores": {"config": {"keep_threshold": 0.0, "chunk": CHUNK, "launch": launch}}}}
            result = run_assets([SCORES, STAMPS], resources, instance, partition_key=SWEEP, run_config=cfg)
            assert all(e.passed for e in result.get_asset_check_evaluations())
            rows[launch] = _search_tables(lake)
    assert len(rows["local"]) == 2 and rows["pipes"] == rows["local"]
    logs = _logs(instance, result)
    assert any(f"{SWEEP}: chunk 3/3 scored" in m for m in logs), logs  # the worker's progress, through the bucket


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.timeout(900)
def test_the_negatives_job_through_the_prefix_publishes_what_the_local_path_publishes(netns_host, tmp_path):
    local = negatives_lake(tmp_path / "local")
    lake = _s3_lake(netns_host, name="negatives")
    pafs.copy_files(local.root, lake.root, source_filesystem=local.fs, destination_filesystem=lake.fs)
    runs = {}
    for name, target, launch in (
        ("local", local, CatalogLaunchResource(mode="local")),
        (
            "far",
            lake,
            CatalogLaunchResource(
                mode="pipes-s3",
                bucket=fresh_bucket(netns_host.s3, prefix="pipes"),
                s3_endpoint=lake.s3_endpoint,
                launch_prefix=far_side_prefix(netns_host.netns, DHS_SPARK_DRIVER_MEMORY="1g"),
            ),
        ),
    ):
        res = LakeResource(uri=target.uri, s3_endpoint=target.s3_endpoint)
        resources = {
            "lake": res,
            "io_manager": LakeIOManager(**res.model_dump()),
            "compute": ComputeResource(profile="demo"),
            "pyspark": QuietPySparkResource(spark_config=spark_config("local[2]")),
            "catalog_launch": launch,
        }
        instance = dg.DagsterInstance.ephemeral()
        instance.add_dynamic_partitions("sweep_file", NAMES)
        keys = [NEGATIVES.key, SELECTION_FUNNEL.key]
        runs[name] = run_assets(keys, resources, instance, partition_range=(NAMES[0], NAMES[-1]))
    assert all(e.passed for e in runs["far"].get_asset_check_evaluations())
    assert published_files(lake) == published_files(local)
    assert lake.read_table(*NEGATIVES.key).num_rows > 0
    assert any(m.startswith("negatives of 2 sweep file(s) on local") for m in _logs(instance, runs["far"]))


def _target(lake: Lake, i: int) -> tuple[float, float]:
    sweep = lake.read_table("survey", "sweeps")
    return sweep.column("ra")[i].as_py(), sweep.column("dec")[i].as_py()


# ------------------------------------------------------------------------------ faults


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_failing_or_silent_launch_fails_in_bounded_time_and_publishes_nothing(
    netns_host,
    tmp_path,
    tiny_profile,
):
    lake = _s3_lake(netns_host, name="faults")
    write_tiny_training_set(lake)
    before = published_files(lake)
    pid_file = tmp_path / "silent.pid"
    silent = f"sh -c 'echo $$ > {pid_file}; exec sleep 600' sh"
    cases = [
        # (prefix, as the failure shows it, launcher options, what the failure names, its bound in seconds)
        (
            "env AWS_SECRET_ACCESS_KEY=s3cr3t-in-the-prefix false",
            "env AWS_SECRET_ACCESS_KEY=REDACTED false",
            {},
            "exited with status 1 before it opened its Pipes session",
            40,
        ),
        (silent, silent, {"timeout_s": 5}, "did not open its Pipes session within 5 s (DHS_LAUNCH_TIMEOUT_S)", 45),
    ]
    for prefix, as_shown, options, named, bound in cases:
        t0 = time.monotonic()
        result = _train(lake, _launcher(netns_host, prefix, **options))
        elapsed = time.monotonic() - t0
        message = _failure(result)
        assert not result.success and named in message and "lens_assets.pipes.train_lens_finder" in message, message
        assert f"DHS_LAUNCH_PREFIX={as_shown!r}" in message and "s3cr3t" not in message, message
        assert elapsed < bound, (prefix, elapsed)
        assert len(events(result, "STEP_FAILURE")) == 1  # not retried: a launch fault is the next run's to fix
        assert published_files(lake) == before and not lake.exists(*LENS_FINDER.key)
    assert not Path(f"/proc/{int(pid_file.read_text())}").exists()  # the silent step was stopped

    missing = PipesLaunchClient(
        launch_prefix="false", bucket="no-such-bucket", s3_endpoint=netns_host.s3.endpoint_url, cwd=str(ROOT)
    )
    result = _train(lake, missing)
    assert "cannot reach the bucket DHS_PIPES_BUCKET='no-such-bucket'" in _failure(result)
    assert published_files(lake) == before

    again = _train(lake, _launcher(netns_host))  # the next run completes
    assert again.success, _failure(again)
    assert lake.exists(*LENS_FINDER.key)
