"""Partitions: one per sweep file (survey fan-out) and one per injection batch."""

import dagster as dg

#: One partition per survey sweep file, registered by the ``sweep_files`` asset.
sweep_partitions = dg.DynamicPartitionsDefinition(name="sweep_file")
#: One partition per injection batch (a few thousand injections), registered by ``injection_plan``.
injection_batches = dg.DynamicPartitionsDefinition(name="injection_batch")
