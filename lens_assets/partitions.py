"""Partitions (one per sweep file, one per injection batch) and how they are registered.

Partitions are registered outside the assets, by the same functions from a sensor (under the
daemon, ``make ui``) and from ``dhs`` (which runs without one): ``sweep_file_sensor`` follows the
survey's sweep files (new files added, vanished ones removed), ``injection_batch_sensor`` follows
the published ``injection_plan`` (its batches).
"""

from __future__ import annotations

from dataclasses import dataclass

import dagster as dg

from darkhaloscope.errors import InputError
from darkhaloscope.lake import Lake
from darkhaloscope.lensing.bank import batch_keys
from resources.lake import LakeResource
from resources.survey import SurveyResource

#: One partition per survey sweep file.
sweep_partitions = dg.DynamicPartitionsDefinition(name="sweep_file")
#: One partition per injection batch (a few thousand injections of the injection plan).
injection_batches = dg.DynamicPartitionsDefinition(name="injection_batch")
INJECTION_PLAN_KEY = dg.AssetKey(["injection", "injection_plan"])


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


def partition_change(instance: dg.DagsterInstance, pdef: dg.DynamicPartitionsDefinition, wanted: list[str]) -> PartitionChange:
    existing = set(instance.get_dynamic_partitions(pdef.name))
    return PartitionChange(pdef.name, sorted(set(wanted) - existing), sorted(existing - set(wanted)))


def sweep_file_change(instance: dg.DagsterInstance, survey: SurveyResource) -> PartitionChange:
    """The survey's sweep files against the registered ``sweep_file`` partitions."""
    return partition_change(instance, sweep_partitions, survey.sweep_files())


def injection_batch_change(instance: dg.DagsterInstance, lake: Lake) -> PartitionChange:
    """The published injection plan's batches against the registered ``injection_batch``
    partitions (none while no plan is published)."""
    try:
        plan = lake.read_table(*INJECTION_PLAN_KEY.path, columns=["batch"])
    except InputError:
        return partition_change(instance, injection_batches, [])
    return partition_change(instance, injection_batches, batch_keys(plan))


@dg.sensor(minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Registers one sweep_file partition per survey sweep file; removes those of vanished files.")
def sweep_file_sensor(context: dg.SensorEvaluationContext, survey: SurveyResource) -> dg.SensorResult:
    change = sweep_file_change(context.instance, survey)
    return dg.SensorResult(dynamic_partitions_requests=change.requests(), skip_reason=None if change.requests() else "sweep files unchanged")


@dg.sensor(minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Registers one injection_batch partition per batch of the published injection_plan.")
def injection_batch_sensor(context: dg.SensorEvaluationContext, lake: LakeResource) -> dg.SensorResult:
    change = injection_batch_change(context.instance, lake.lake())
    return dg.SensorResult(dynamic_partitions_requests=change.requests(), skip_reason=None if change.requests() else "injection batches unchanged")


partition_defs = dg.Definitions(sensors=[sweep_file_sensor, injection_batch_sensor])
