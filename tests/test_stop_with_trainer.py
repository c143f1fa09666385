"""A stop that stops, with the real trainer running (issue 52): the lens finder's step, run as
``dhs materialize`` runs it (tests/support/stop_trainer.py), in a process group of its own as
``timeout`` and Slurm see it; the group gets SIGTERM once the trainer's process exists.

* SIGTERM: the command ends within the grace, says ``stopped by SIGTERM`` once, leaves no
  trainer, launches no second one (the step's ``RetryPolicy(max_retries=2)`` is not applied to a
  stopped step) and publishes nothing.
* Terminated as the UI and the daemon terminate a run (SIGINT to the run worker's process, no
  ``dhs`` in it): the same, the run failed as interrupted.
* Slurm's TERM then KILL: the group gets SIGKILL 0.3 s after SIGTERM, while the command is still
  stopping (its stop takes longer: the step's failure is recorded, the launch's processes are
  ended); the lake's published files are as they were (write–audit–publish) and a later run
  publishes the lens finder.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dhs.stop import descendants
from lake_platform.lake import Lake
from tests.support.stop_trainer import ROOT, TRAINER
from tests.support.tiny_finder import write_tiny_training_set
from tests.support.wap import published_files

pytestmark = pytest.mark.timeout(400)  # ≈ 10 s and 30 s on two shared cores
GRACE_S = 20.0
LONG = 500  # epochs: a run the stop interrupts


def _start(lake: Lake, tmp_path: Path, epochs: int, *extra: str) -> subprocess.Popen:
    env = {
        **os.environ,
        "DAGSTER_HOME": str(tmp_path / "home"),
        "DHS_STOP_GRACE_S": str(GRACE_S),
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(ROOT),
    }
    (tmp_path / "home").mkdir(exist_ok=True)
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.stop_trainer", lake.uri, str(epochs), *extra],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as `timeout` and Slurm signal it
    )


def _trainers(pid: int) -> set[int]:
    """The trainer processes among ``pid``'s descendants."""
    found = set()
    for child in descendants(pid):
        try:
            with open(f"/proc/{child}/cmdline", "rb") as f:
                if TRAINER.encode() in f.read():
                    found.add(child)
        except OSError:  # it ended while we looked
            pass
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _training(lake: Lake) -> bool:
    """Whether the trainer has started a run (its folder in the lake's in-flight area)."""
    runs = Path(lake.inflight().files_path("training", "lens_finder_runs")) / "runs"
    return runs.is_dir() and any(runs.iterdir())


def _stop(
    proc: subprocess.Popen, lake: Lake, kill_after_s: float | None, stop=lambda pid: os.killpg(pid, signal.SIGTERM)
) -> tuple[float, set[int], str]:
    """Wait for the trainer's process and its run, ``stop`` it (SIGTERM to the group; then SIGKILL
    after ``kill_after_s``); the seconds from the stop to the command's end, every trainer seen
    until then, its stderr."""
    deadline = time.monotonic() + 240
    seen: set[int] = set()
    while not (seen and _training(lake)):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else "slow"
        seen |= _trainers(proc.pid)
        time.sleep(0.1)
    t0 = time.monotonic()
    stop(proc.pid)
    killed = False
    while proc.poll() is None and time.monotonic() - t0 < GRACE_S + 30:
        seen |= _trainers(proc.pid)  # a retried step would launch a new trainer here
        if kill_after_s is not None and not killed and time.monotonic() - t0 >= kill_after_s:
            os.killpg(proc.pid, signal.SIGKILL)
            killed = True
        time.sleep(0.05)
    seconds = time.monotonic() - t0
    _, err = proc.communicate(timeout=30)
    time.sleep(0.5)
    return seconds, seen, err


def test_sigterm_with_the_trainer_running_stops_it_and_publishes_nothing(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    write_tiny_training_set(lake)
    before = published_files(lake)
    proc = _start(lake, tmp_path, LONG)
    seconds, trainers, err = _stop(proc, lake, kill_after_s=None)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert seconds < GRACE_S + 10, err
    lines = err.strip().splitlines()
    assert lines[-1] == "stopped by SIGTERM" and sum("stopped by" in line for line in lines) == 1, err
    assert "Stack Trace" not in err and "Traceback" not in err, err  # the step's failure stays in the event log
    assert len(trainers) == 1, f"trainers launched: {sorted(trainers)}"  # no retry of the stopped step
    assert not any(_alive(p) for p in trainers)
    assert published_files(lake) == before and not lake.exists("training", "lens_finder")


def test_term_then_kill_keeps_the_lake_and_a_later_run_publishes(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    write_tiny_training_set(lake)
    before = published_files(lake)
    proc = _start(lake, tmp_path, LONG)
    _, trainers, err = _stop(proc, lake, kill_after_s=0.3)
    assert proc.returncode == -signal.SIGKILL, err
    assert len(trainers) == 1 and not any(_alive(p) for p in trainers)
    assert published_files(lake) == before and not lake.exists("training", "lens_finder")

    later = _start(lake, tmp_path, 1)
    _, err = later.communicate(timeout=600)
    assert later.returncode == 0, err
    assert lake.read_table("training", "lens_finder").num_rows == 1
    after = published_files(lake)
    assert {k: v for k, v in after.items() if k in before} == before  # the training set untouched


def test_a_run_worker_terminated_as_the_daemon_does_stops_the_trainer_and_publishes_nothing(tmp_path):
    """The UI's and the daemon's termination (``DefaultRunLauncher.terminate``: the code server
    sets the run's termination event and the run worker's termination thread sends its own
    process SIGINT, ``dagster._utils.send_interrupt``): Dagster's handlers alone, no ``dhs``
    watchdog, stop the trainer's process group within the grace, without a retry."""
    lake = Lake(str(tmp_path / "lake"))
    write_tiny_training_set(lake)
    before = published_files(lake)
    proc = _start(lake, tmp_path, LONG, "--worker")
    seconds, trainers, err = _stop(proc, lake, kill_after_s=None, stop=lambda pid: os.kill(pid, signal.SIGINT))
    assert proc.returncode == 1, err  # the run failed: interrupted
    assert seconds < GRACE_S + 10, err
    assert len(trainers) == 1, f"trainers launched: {sorted(trainers)}"  # no retry of the stopped step
    assert not any(_alive(p) for p in trainers)
    assert published_files(lake) == before and not lake.exists("training", "lens_finder")
