"""Partitions (one per sweep file, one per injection batch) and how they are registered.

Partitions are registered outside the assets, by the same functions from a sensor (under the
daemon, ``make ui``) and from ``dhs`` (which runs without one): the survey stage's
``sweep_file_sensor`` follows the survey's sweep files (new files added, vanished ones removed),
the injection stage's ``injection_batch_sensor`` follows the published ``injection_plan`` (its
batches).
"""

from __future__ import annotations

from dataclasses import dataclass

import dagster as dg

from darkhaloscope.errors import InputError
from darkhaloscope.lensing.bank import batch_keys
from darkhaloscope.survey.sweeps import SWEEP_DIM
from lake_platform.lake import Lake
from resources.settings import setting
from resources.survey import SurveyResource
from table_registry import INJECTION_BATCH_DIM, INJECTION_PLAN

#: One partition per survey sweep file.
sweep_partitions = dg.DynamicPartitionsDefinition(name=SWEEP_DIM)
#: One partition per injection batch (a few thousand injections of the injection plan).
injection_batches = dg.DynamicPartitionsDefinition(name=INJECTION_BATCH_DIM)
_BY_DIMENSION = {SWEEP_DIM: sweep_partitions, INJECTION_BATCH_DIM: injection_batches}


def per_file_backfill() -> dg.BackfillPolicy:
    """Backfill policy of the assets that run per sweep file: runs of ``DHS_PARTITIONS_PER_RUN``
    sweep files each, one process, Spark session and model load per run rather than per file
    (BENCHMARKS.md, *Orchestration overhead per partition*). Read when the definitions load."""
    return dg.BackfillPolicy.multi_run(max_partitions_per_run=int(setting("DHS_PARTITIONS_PER_RUN")))


def partitions_def(dimension: str | None) -> dg.DynamicPartitionsDefinition | None:
    """The partitions definition of a registry table's partition dimension (None: unpartitioned)."""
    return None if dimension is None else _BY_DIMENSION[dimension]


@dataclass(frozen=True)
class PartitionChange:
    """Keys to add and to remove so that a dynamic partitions definition holds exactly ``wanted``."""

    name: str
    add: list[str]
    remove: list[str]

    def requests(self) -> list:
        pdef = dg.DynamicPartitionsDefinition(name=self.name)
        out = []
        if self.add:
            out.append(pdef.build_add_request(self.add))
        if self.remove:
            out.append(pdef.build_delete_request(self.remove))
        return out

    def apply(self, instance: dg.DagsterInstance) -> "PartitionChange":
        if self.add:
            instance.add_dynamic_partitions(self.name, self.add)
        for key in self.remove:
            instance.delete_dynamic_partition(self.name, key)
        return self

    def summary(self) -> str:
        return f"{self.name}: +{len(self.add)} -{len(self.remove)}"


def partition_change(
    instance: dg.DagsterInstance, pdef: dg.DynamicPartitionsDefinition, wanted: list[str]
) -> PartitionChange:
    existing = set(instance.get_dynamic_partitions(pdef.name))
    return PartitionChange(pdef.name, sorted(set(wanted) - existing), sorted(existing - set(wanted)))


def sweep_file_change(instance: dg.DagsterInstance, survey: SurveyResource) -> PartitionChange:
    """The survey's sweep files against the registered ``sweep_file`` partitions."""
    return partition_change(instance, sweep_partitions, survey.sweep_files())


def injection_batch_change(instance: dg.DagsterInstance, lake: Lake) -> PartitionChange:
    """The published injection plan's batches against the registered ``injection_batch``
    partitions (none while no plan is published)."""
    try:
        plan = lake.read_table(*INJECTION_PLAN.key, columns=["batch"])
    except InputError:
        return partition_change(instance, injection_batches, [])
    return partition_change(instance, injection_batches, batch_keys(plan))
