"""Lake storage resource: a local folder or s3://bucket/prefix (DHS_LAKE, DHS_S3_ENDPOINT).

Besides the :class:`~lake_platform.lake.Lake` itself, it opens each run's staging area
(:meth:`LakeResource.stage`): the first step of a run that stages anything first sweeps what dead
runs and writers left in ``_staging`` (and rejected data past its retention), then records the
run as the owner of ``_staging/<run id>``.
"""

from __future__ import annotations

import time

import dagster as dg

from darkhaloscope.errors import PERMANENT_ERRORS
from lake_platform.lake import Lake
from lake_platform.staging import Stage, StageOwner, owner_process_alive, sweep_orphans

from . import storage
from .settings import default

#: Run states in which a run still owns its staging area.
LIVE_RUN_STATUSES = (
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
)


def run_alive(instance: dg.DagsterInstance):
    """Liveness of a staging owner: by its run's status when this instance knows the run (a run
    killed without a chance to report is marked failed by ``lens_assets.ops.reap_dead_runs``),
    else by its process on this host."""

    def alive(owner: StageOwner) -> bool:
        run = instance.get_run_by_id(owner.run_id)
        if run is None:
            return owner_process_alive(owner)
        return run.status in LIVE_RUN_STATUSES

    return alive


class LakeResource(dg.ConfigurableResource):
    """Where every table lives. ``uri`` is a local folder or ``s3://bucket/prefix``;
    ``s3_endpoint`` overrides the S3 endpoint for any S3-compatible server; rejected data is kept
    ``rejected_keep_days`` days."""

    uri: str = default("DHS_LAKE")
    s3_endpoint: str | None = None
    s3_region: str = "us-east-1"
    s3_max_attempts: int = 5
    rejected_keep_days: float = float(default("DHS_REJECTED_KEEP_DAYS"))

    def lake(self) -> Lake:
        """The lake (:func:`resources.storage.open_lake`)."""
        return storage.open_lake(
            self.uri, s3_endpoint=self.s3_endpoint, s3_region=self.s3_region, s3_max_attempts=self.s3_max_attempts
        )

    def stage(self, context: dg.AssetExecutionContext) -> Stage:
        """The run's staging area, opened (and orphans swept) on first use in the run; a lake that
        cannot be used (permanent storage errors) fails the step once, without retries."""
        try:
            return self._open_stage(context)
        except PERMANENT_ERRORS as exc:
            raise dg.Failure(description=f"{type(exc).__name__}: {exc}", allow_retries=False) from exc

    def _open_stage(self, context: dg.AssetExecutionContext) -> Stage:
        lake = self.lake()
        run_id = context.run.run_id
        stage = Stage(lake, run_id)
        if stage.is_open():
            return stage
        record = context.instance.get_run_record_by_id(run_id)
        started = (record.start_time if record and record.start_time else None) or time.time()
        report = sweep_orphans(
            lake, before=started, run_alive=run_alive(context.instance), rejected_keep_days=self.rejected_keep_days
        )
        if report.removed:
            context.log.info(f"swept {len(report.removed)} orphaned staging/rejected entries: {report.removed[:10]}")
        return stage.open(StageOwner.current(run_id, started_at=started))
