"""``dhs materialize`` / ``dhs demo``: Dagster plans, Dagster executes, the terminal shows progress.

* **Selection**: each argument is an asset name (``negatives``), a key (``catalog/negatives``) or
  any Dagster selection string (``group:catalog``, ``key:"imaging/*"``); upstream assets are
  included (``+`` in Dagster's syntax), external assets (``ops/alerts``) are not materializable.
* **Staleness**: the selected assets run for every partition; an upstream asset partition runs
  when Dagster's stale-status resolver says it is MISSING or STALE (code version or an upstream
  data version changed since its last materialization), or when the lake holds no committed data
  for it (a lake deleted or moved while the instance kept its records: skipping it would leave
  the assets downstream nothing to read).
* **Execution**: each asset (a multi-asset with all its tables) runs through Dagster's in-process
  executor on the implicit asset job, in topological order, its partitions grouped into runs as
  its backfill policy says — one run per partition without one, a range of partitions per run of
  at most ``max_partitions_per_run`` (a multi-run policy: the per-sweep-file assets run
  ``DHS_PARTITIONS_PER_RUN`` files per run) or of all of them (a single-run policy); every run is in the instance
  the UI shows. Dynamic partitions are registered by the same functions as the sensors: sweep
  files before planning, injection batches after ``injection_plan`` is published.
* **Config**: ``config`` gives named assets their run config (``dhs materialize injection_plan
  --config 'injection_plan={"realisation": 1}'``), as the UI's launchpad does; only assets named
  for materialization take it, since an upstream asset that is up to date does not run.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Mapping

import dagster as dg

from darkhaloscope.errors import PERMANENT_ERRORS
from io_managers.parquet import partition_for_key, table_location
from lake_platform.lake import host_tag
from lens_assets.ops import HOST_TAG, reap_dead_runs
from lens_assets.shared.partitions import injection_batch_change, sweep_file_change
from lens_assets.survey import missing_mirror_inputs
from resources.settings import setting
from table_registry import INJECTION_PLAN


def quiet_console() -> dict:
    """Run config that keeps Dagster's console logger at DHS_LOG_LEVEL (default WARNING): the
    terminal shows progress and errors, the event log in the instance keeps everything."""
    return {"loggers": {"console": {"config": {"log_level": setting("DHS_LOG_LEVEL")}}}}


class MaterializeError(RuntimeError):
    """An asset partition failed; the message names the asset, the partition and the error."""


class MaterializeUsageError(MaterializeError):
    """The request itself is wrong (an unknown asset, a bad selection or config): nothing ran."""


@dataclass
class Unit:
    """One step of the plan: an asset (all keys of its definition), its partitions and how many
    partitions one run covers (``per_run``; None: all of them, a single-run backfill policy)."""

    keys: list[dg.AssetKey]
    label: str
    partitions_def: dg.PartitionsDefinition | None
    per_run: int | None

    def runs(self, todo: list[str | None], order: list[str | None]) -> list[list[str | None]]:
        """``todo`` in the runs that cover it: ranges of consecutive partitions of ``order`` (all the
        partitions, in order: a run covers a range, so a gap starts a new run), ``per_run`` at most."""
        runs: list[list[str | None]] = []
        position = {k: i for i, k in enumerate(order)}
        for pk in todo:
            last = runs[-1] if runs else None
            if (
                last is not None
                and (self.per_run is None or len(last) < self.per_run)
                and position[pk] == position[last[-1]] + 1
            ):
                last.append(pk)
            else:
                runs.append([pk])
        return runs


def stale_or_missing(
    instance: dg.DagsterInstance, asset_graph, key: dg.AssetKey, partition_keys: list[str | None]
) -> list[str | None]:
    """The partitions of ``key`` that Dagster's stale-status resolver calls MISSING or STALE."""
    from dagster._core.asset_graph_view.asset_graph_view import AssetGraphView, TemporalContext
    from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus
    from dagster._time import get_current_datetime

    view = AssetGraphView(
        temporal_context=TemporalContext(effective_dt=get_current_datetime(), last_event_id=None),
        instance=instance,
        asset_graph=asset_graph,
    )
    resolver = CachingStaleStatusResolver(instance, asset_graph, view)
    return [pk for pk in partition_keys if resolver.get_status(key, pk) in (StaleStatus.MISSING, StaleStatus.STALE)]


class Materializer:
    """Plans and runs a selection of assets (see the module doc)."""

    def __init__(self, defs: dg.Definitions, instance: dg.DagsterInstance, out=None):
        self.defs = defs
        self.instance = instance
        self.out = out or sys.stdout  # at call time: the stdout of the moment
        self.graph = defs.resolve_asset_graph()
        self.job = defs.resolve_implicit_global_asset_job_def()
        self.resources = defs.resources
        self.sinks = None

    def _say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    # ------------------------------------------------------------ planning
    def selection(self, args: list[str]) -> dg.AssetSelection:
        """Dagster selection of the named assets (names, keys or selection strings)."""
        keys = {k for k in self.graph.get_all_asset_keys() if self.graph.get(k).is_materializable}
        parts = []
        for arg in args:
            by_name = _named(arg, keys)
            if by_name:
                parts.append(dg.AssetSelection.assets(*by_name))
            elif ":" in arg or "*" in arg:
                try:
                    parts.append(dg.AssetSelection.from_string(arg))
                except Exception as exc:  # the parser's own error says what is wrong with the string
                    raise MaterializeUsageError(f"invalid asset selection {arg!r}: {exc}") from exc
            else:
                raise MaterializeUsageError(
                    f"unknown asset {arg!r}; known assets: {', '.join(sorted(k.path[-1] for k in keys))}"
                )
        selected = parts[0]
        for p in parts[1:]:
            selected = selected | p
        return selected

    def plan(self, targets: set[dg.AssetKey], upstream: bool = True) -> list[Unit]:
        """The selected assets and (``upstream``) their upstream, one unit per asset definition, in
        topological order."""
        selected = dg.AssetSelection.assets(*targets)
        wanted = (selected.upstream() if upstream else selected).resolve(self.graph)
        units, seen = [], set()
        for key in self.graph.toposorted_asset_keys:
            if key not in wanted or key in seen or not self.graph.get(key).is_materializable:
                continue
            ad = self.graph.assets_def_for_key(key)
            keys = list(ad.keys_by_output_name.values())  # declaration order: the main table first
            seen.update(keys)
            policy = ad.backfill_policy
            per_run = 1 if policy is None else policy.max_partitions_per_run
            units.append(Unit(keys, "+".join(k.path[-1] for k in keys), ad.partitions_def, per_run))
        return units

    def _partitions(self, unit: Unit) -> list[str | None]:
        if unit.partitions_def is None:
            return [None]
        return list(unit.partitions_def.get_partition_keys(dynamic_partitions_store=self.instance))

    def _todo(self, unit: Unit, targets: set[dg.AssetKey], lake) -> list[str | None]:
        keys = self._partitions(unit)
        if targets & set(unit.keys):
            return keys
        absent = {
            pk
            for k in unit.keys
            for pk in keys
            if not lake.exists(*table_location(k), partition_for_key(unit.partitions_def, pk))
        }
        return sorted(
            absent | {pk for k in unit.keys for pk in stale_or_missing(self.instance, self.graph, k, keys)},
            key=keys.index,
        )

    def op_config(self, config: Mapping[str, dict], targets: set[dg.AssetKey]) -> dict[str, dict]:
        """Run config of the ops of the assets ``config`` names (a name or key, as in the selection,
        to its config); each must be one of ``targets``."""
        ops = {}
        for name, cfg in config.items():
            keys = _named(name, targets)
            if not keys:
                raise MaterializeUsageError(
                    f"config for {name!r}: not among the assets to materialize "
                    f"({', '.join(sorted(k.path[-1] for k in targets))}); name it too"
                )
            if not isinstance(cfg, dict):
                raise MaterializeUsageError(f"config for {name!r} must be a JSON object of its fields, got {cfg!r}")
            ops[self._op_name(keys[0])] = {"config": cfg}
        return ops

    def _op_name(self, key: dg.AssetKey) -> str:
        return self.graph.assets_def_for_key(key).node_def.name

    # ----------------------------------------------------------- execution
    def run(self, args: list[str], config: Mapping[str, dict] | None = None, upstream: bool = True) -> None:
        """Materialize the named assets and (``upstream``) the missing or stale assets they need;
        ``config`` as :meth:`op_config`."""
        for run_id in reap_dead_runs(self.instance):
            self._say(f"run {run_id} was killed: marked failed")
        sweep_file_change(self.instance, self.resources["survey"]).apply(self.instance)
        targets = set(self.selection(args).resolve(self.graph))
        ops = self.op_config(config or {}, targets)
        units = self.plan(targets, upstream)
        lake = self.resources["lake"].lake()
        self._check_mirror(units, lake)
        for i, unit in enumerate(units, start=1):
            label = f"[{i}/{len(units)}] {unit.label}"
            try:
                todo = self._todo(unit, targets, lake)
            except PERMANENT_ERRORS as exc:  # the lake, read to see what is missing
                raise MaterializeError(
                    f"asset {unit.label}: could not tell which partitions are missing: {type(exc).__name__}: {exc}"
                ) from exc
            op_config = ops.get(self._op_name(unit.keys[0]))
            if not todo:
                self._say(f"{label}: up to date, skipped")
            for run in unit.runs(todo, self._partitions(unit)):
                shown = partition_span(run)
                self._execute(unit, run, label + (f" [{shown}]" if shown else ""), op_config)
            if dg.AssetKey(list(INJECTION_PLAN.key)) in unit.keys:
                injection_batch_change(self.instance, lake).apply(self.instance)

    def _check_mirror(self, units: list[Unit], lake) -> None:
        """Before any work: every file of a DR10 mirror that the planned assets read is there, or
        MaterializeError naming each missing one (``lens_assets.survey.missing_mirror_inputs``)."""
        survey, imaging = self.resources.get("survey"), self.resources.get("imaging")
        if survey is None:  # definitions without the survey stage read no mirror
            return
        assets = [k.to_user_string() for u in units for k in u.keys]
        try:
            missing = missing_mirror_inputs(survey, imaging, lake, assets)
        except PERMANENT_ERRORS as exc:
            raise MaterializeError(f"could not check the survey's files: {type(exc).__name__}: {exc}") from exc
        if missing:
            listing = "\n".join(f"  missing: {p}" for p in missing)
            raise MaterializeError(
                f"the survey {survey.root()} lacks {len(missing)} file(s) that this run reads (nothing was run; "
                f"docs/tutorials/first-real-run.md lists them, dhs fetch-list prints a sky box's):\n{listing}"
            )

    def _execute(self, unit: Unit, partition_keys: list[str | None], label: str, op_config: dict | None = None) -> None:
        t0 = time.monotonic()
        self._say(f"{label} ...")
        tags = {HOST_TAG: host_tag()}
        pk = partition_keys[0] if len(partition_keys) == 1 else None
        if len(partition_keys) > 1:
            tags.update(
                {
                    "dagster/asset_partition_range_start": partition_keys[0],
                    "dagster/asset_partition_range_end": partition_keys[-1],
                }
            )
        where = f"asset {unit.label} partition {partition_span(partition_keys) or '-'}"
        # the asset's own run config (op_config's entry), beside the console's
        ops = {"ops": {self._op_name(unit.keys[0]): op_config}} if op_config else {}
        try:
            result = self.job.execute_in_process(
                instance=self.instance,
                asset_selection=unit.keys,
                partition_key=pk,
                tags=tags,
                raise_on_error=False,
                run_config={**quiet_console(), **ops},
            )
        except Exception as exc:  # definition-time errors (bad partition key, resources)
            raise MaterializeError(f"{where} failed: {exc}") from exc
        try:
            self._deliver_alerts(result.run_id)
        except (*PERMANENT_ERRORS, OSError) as exc:  # the lake holding the alert log is unusable too
            failed = f"failed: {failure_message(result)}; " if not result.success else ""
            raise MaterializeError(
                f"{where} {failed}its alerts could not be delivered: {type(exc).__name__}: {exc}"
            ) from exc
        if not result.success:
            raise MaterializeError(f"{where} failed: {failure_message(result)}")
        self._report(result, unit.keys[0], label, time.monotonic() - t0)

    def _report(self, result, main: dg.AssetKey, label: str, seconds: float) -> None:
        """The run's progress line: rows of the main table (over a range of partitions, how many
        and the least and most rows of one), failed WARN checks."""
        md = next(
            (
                e.materialization.metadata
                for e in result.get_asset_materialization_events()
                if e.materialization.asset_key == main
            ),
            {},
        )
        rows = f" rows={md['dagster/row_count'].value}" if "dagster/row_count" in md else ""
        if "n_partitions" in md:
            rows += (
                f" in {md['n_partitions'].value} partitions"
                f" ({md['partition_rows_min'].value}–{md['partition_rows_max'].value} each)"
            )
        warned = [e.check_name for e in result.get_asset_check_evaluations() if not e.passed]
        warn = f" (WARN checks failed: {', '.join(warned)})" if warned else ""
        self._say(f"{label} ok in {seconds:.1f}s{rows}{warn}")

    def _deliver_alerts(self, run_id: str) -> None:
        """Turn the run's failed checks / failure into alerts (no daemon runs under the CLI)."""
        from lens_assets.ops import deliver_run_alerts, report_alerts_table

        if self.sinks is None:
            self.sinks = self.resources["alert_sinks"].build_sinks()
        outcomes = deliver_run_alerts(self.instance, run_id, self.sinks)
        for outcome in outcomes:
            where = ", ".join(outcome.delivered_to) or "the alert log"
            errors = (
                f" (delivery errors: {'; '.join(f'{k}: {v}' for k, v in outcome.errors.items())})"
                if outcome.errors
                else ""
            )
            self._say(f"ALERT {outcome.alert.summary()} -> {where}{errors}")
        report_alerts_table(self.instance, self.resources["lake"].lake(), len(outcomes))


def partition_span(partition_keys: list[str | None]) -> str | None:
    """A run's partitions as shown: the one key, ``first...last`` for a range, None unpartitioned."""
    if len(partition_keys) > 1:
        return f"{partition_keys[0]}...{partition_keys[-1]}"
    return partition_keys[0]


def _named(name: str, keys) -> list[dg.AssetKey]:
    """The asset keys among ``keys`` that ``name`` names: the last part of the key or the whole key."""
    return [k for k in keys if name in (k.path[-1], k.to_user_string())]


def failure_message(result) -> str:
    """The run's step errors (the user error under Dagster's wrapper) and failed blocking checks."""
    msgs = []
    for ev in result.all_events:
        if ev.event_type_value == "STEP_FAILURE":
            err = ev.event_specific_data.error
            # Dagster wraps the user's error (step, input loading, output handling): show the cause
            while err is not None and err.cause is not None and (err.cls_name or "").startswith("DagsterExecution"):
                err = err.cause
            msgs.append(f"{ev.step_key}: {err.cls_name}: {err.message.strip()}" if err else ev.message)
    return "; ".join(msgs) or "run failed"
