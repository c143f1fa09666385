"""Partitions: one per sweep file (survey fan-out) and one per injection batch."""

import dagster as dg

#: One partition per survey sweep file, registered by the ``sweep_files`` asset.
sweep_partitions = dg.DynamicPartitionsDefinition(name="sweep_file")
#: One partition per injection batch (a few thousand injections), registered by ``injection_plan``.
injection_batches = dg.DynamicPartitionsDefinition(name="injection_batch")


def sync_dynamic_partitions(instance: dg.DagsterInstance, partitions_def: dg.DynamicPartitionsDefinition, keys: list[str]) -> list[str]:
    """Make the dynamic partitions exactly ``keys``: add new ones, delete vanished ones; returns the new keys."""
    existing = set(instance.get_dynamic_partitions(partitions_def.name))
    new = [k for k in keys if k not in existing]
    if new:
        instance.add_dynamic_partitions(partitions_def.name, new)
    for gone in sorted(existing - set(keys)):
        instance.delete_dynamic_partition(partitions_def.name, gone)
    return new
