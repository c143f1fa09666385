"""Runs whose process was killed: marked failed by the next ``dhs`` command or sensor tick.

A run killed with SIGKILL (or whose machine lost power) never reports its end, so Dagster keeps
it STARTED and its concurrency slots (pools ``gpu`` and ``spark``) claimed; the open-source run
launcher has no health check for it. Every run records the process ids that execute it (the run
worker's "Started process for run (pid)" and the executor's "Executing steps in process (pid)"
engine events); :func:`reap_dead_runs` marks a STARTING/STARTED/CANCELING run of this host failed
when none of those processes is alive, and frees its slots. Its staging area then belongs to a dead
run and is swept by the next run (``LakeResource.stage``).
"""

from __future__ import annotations

import dagster as dg
from dagster import DagsterEventType

from darkhaloscope.lake import host_tag
from darkhaloscope.staging import process_alive

#: Run tag naming the host whose process executes the run (set by ``dhs``; runs launched by the
#: local run launcher without it run on this host).
HOST_TAG = "dhs/host"
_ACTIVE = [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]


def run_pids(instance: dg.DagsterInstance, run_id: str) -> list[int]:
    """Process ids recorded in a run's engine events."""
    pids = []
    for entry in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT):
        data = entry.dagster_event.event_specific_data if entry.dagster_event else None
        pid = (getattr(data, "metadata", None) or {}).get("pid")
        if pid is not None:
            pids.append(int(getattr(pid, "value", pid)))
    return sorted(set(pids))


def reap_dead_runs(instance: dg.DagsterInstance) -> list[str]:
    """Mark this host's active runs failed when every process that executed them is gone; returns
    their run ids. Runs with no recorded process yet are left to Dagster's start timeout."""
    here = host_tag()
    reaped = []
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=_ACTIVE)):
        if run.tags.get(HOST_TAG, here) != here:
            continue
        pids = run_pids(instance, run.run_id)
        if not pids or any(process_alive(p) for p in pids):
            continue
        instance.report_run_failed(run, message=f"Marked failed: the process(es) {pids} that executed this run on {here} are gone (killed)")
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        reaped.append(run.run_id)
    return reaped


@dg.sensor(minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Marks runs whose processes were killed as failed and frees their concurrency slots.")
def dead_run_sensor(context: dg.SensorEvaluationContext) -> dg.SkipReason:
    reaped = reap_dead_runs(context.instance)
    for run_id in reaped:
        context.log.warning(f"run {run_id} marked failed: its processes are gone")
    return dg.SkipReason(f"{len(reaped)} dead run(s) marked failed")
