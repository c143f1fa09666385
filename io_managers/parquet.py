"""Parquet IO manager over the lake (local folder or S3 through pyarrow.fs), partition-aware.

Asset keys are ``[group, table]``; a table lands at ``<lake>/<group>/<table>/`` and a partition at
``.../<dim>=<key>/part-0.parquet``, committed atomically by ``darkhaloscope.lake.Lake``. Outputs are
``pyarrow.Table``s (small and medium tables); heavy stages write through the lake resource
themselves and return ``MaterializeResult`` without a value.
"""


import dagster as dg
import pyarrow as pa

from darkhaloscope.lake import Lake
from resources.lake import LakeResource


def partition_for_key(partitions_def: dg.PartitionsDefinition | None, key) -> dict[str, str] | None:
    """Hive partition dict for a Dagster partition key (``{name: key}``; one entry per dimension)."""
    if key is None:
        return None
    if isinstance(key, dg.MultiPartitionKey):
        return dict(key.keys_by_dimension)
    name = getattr(partitions_def, "name", None) or "partition"
    return {name: str(key)}


def table_location(asset_key: dg.AssetKey) -> tuple[str, str]:
    path = asset_key.path
    if len(path) != 2:
        raise dg.DagsterInvariantViolationError(f"lake assets need keys [group, table]; got {asset_key.to_user_string()}")
    return path[0], path[1]


def table_metadata(lake: Lake, table: pa.Table, uri: str) -> dict:
    """Standard materialization metadata: URI, row count, column schema."""
    return {
        "dagster/uri": dg.MetadataValue.path(uri),
        "dagster/row_count": dg.MetadataValue.int(table.num_rows),
        "dagster/column_schema": dg.MetadataValue.table_schema(
            dg.TableSchema(columns=[dg.TableColumn(f.name, str(f.type)) for f in table.schema])
        ),
    }


class ParquetIOManager(dg.ConfigurableIOManager):
    """Stores ``pyarrow.Table`` outputs as Parquet in the lake and loads them back."""

    lake: dg.ResourceDependency[LakeResource]

    def handle_output(self, context: dg.OutputContext, obj: pa.Table | None) -> None:
        if obj is None:
            return
        if not isinstance(obj, pa.Table):
            raise TypeError(f"{context.asset_key.to_user_string()}: ParquetIOManager stores pyarrow.Table, got {type(obj).__name__}")
        lake = self.lake.lake()
        group, table = table_location(context.asset_key)
        partition = None
        if context.has_asset_partitions:
            keys = context.asset_partition_keys
            if len(keys) != 1:
                raise dg.DagsterInvariantViolationError("ParquetIOManager writes one partition per run")
            partition = partition_for_key(context.asset_partitions_def, keys[0])
        info = lake.write_table(group, table, obj, partition=partition)
        context.add_output_metadata(table_metadata(lake, obj, info.uri))

    def load_input(self, context: dg.InputContext) -> pa.Table:
        lake = self.lake.lake()
        group, table = table_location(context.asset_key)
        if context.has_asset_partitions:
            pdef = context.asset_partitions_def
            parts = [lake.read_table(group, table, partition=partition_for_key(pdef, k)) for k in context.asset_partition_keys]
            return pa.concat_tables(parts) if parts else lake.read_table(group, table)
        return lake.read_table(group, table)
