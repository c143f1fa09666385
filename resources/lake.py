"""Lake storage resource: a local folder or s3://bucket/prefix (DHS_LAKE, DHS_S3_ENDPOINT).

Besides the :class:`~lake_platform.lake.Lake` itself, it opens each run's staging area
(:meth:`LakeResource.stage`): the first step of a run that stages anything first sweeps what dead
runs and writers left in ``_staging`` (and rejected data past its retention), then records the
run as the owner of ``_staging/<run id>``.
"""

from __future__ import annotations

import os
import time

import dagster as dg

from darkhaloscope.errors import PERMANENT_ERRORS
from lake_platform.lake import Lake
from lake_platform.staging import Stage, StageOwner, owner_process_alive, sweep_orphans
from table_registry.tables import contract_of

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
    ``s3_endpoint`` overrides the S3 endpoint for any S3-compatible server."""

    uri: str = "./lakehouse"
    s3_endpoint: str | None = None
    s3_region: str = "us-east-1"
    s3_max_attempts: int = 5

    def lake(self) -> Lake:
        lake = Lake(
            self.uri,
            s3_endpoint=self.s3_endpoint,
            s3_region=self.s3_region,
            s3_max_attempts=self.s3_max_attempts,
            contracts=contract_of,
        )
        log = os.environ.get("DHS_LAKE_READ_LOG")
        if log:
            lake.__class__ = ReadRecordingLake
            lake.read_log = log
        return lake

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
        report = sweep_orphans(lake, before=started, run_alive=run_alive(context.instance))
        if report.removed:
            context.log.info(f"swept {len(report.removed)} orphaned staging/rejected entries: {report.removed[:10]}")
        return stage.open(StageOwner.current(run_id, started_at=started))


class ReadRecordingLake(Lake):
    """A lake that appends one JSON line per table read inside an asset step to the file named by
    ``DHS_LAKE_READ_LOG`` ({"reader": [asset keys of the step], "table": "group/table"}): the
    end-to-end test checks that every table an asset reads is one of its upstream assets."""

    read_log: str

    def _record(self, group: str, asset: str) -> None:
        import json

        try:
            context = dg.AssetExecutionContext.get()
        except Exception:  # not inside an asset step (a sensor, the CLI, a Spark executor): nothing to check
            return
        keys = sorted(k.to_user_string() for k in context.assets_def.keys)
        with open(self.read_log, "a") as f:
            f.write(json.dumps({"reader": keys, "table": f"{group}/{asset}"}) + "\n")

    def read_table(self, group, asset, *args, **kwargs):
        self._record(group, asset)
        return super().read_table(group, asset, *args, **kwargs)

    def dataset(self, group, asset, *args, **kwargs):
        self._record(group, asset)
        return super().dataset(group, asset, *args, **kwargs)

    def iter_batches(self, group, asset, *args, **kwargs):
        self._record(group, asset)
        return super().iter_batches(group, asset, *args, **kwargs)

    def read_schema(self, group, asset, *args, **kwargs):
        self._record(group, asset)
        return super().read_schema(group, asset, *args, **kwargs)

    def read_bytes(self, group, asset, *args, **kwargs):
        self._record(group, asset)
        return super().read_bytes(group, asset, *args, **kwargs)

    def partitions(self, group, asset):
        self._record(group, asset)
        return super().partitions(group, asset)

    def part_uris(self, group, asset):
        self._record(group, asset)
        return super().part_uris(group, asset)

    def exists(self, group, asset, partition=None):
        self._record(group, asset)
        return super().exists(group, asset, partition)
