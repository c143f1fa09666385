"""The lake's IO manager: publishes staged tables, loads published ones (local folder or S3).

Asset keys are ``[group, table]``; a table lives at ``<lake>/<group>/<table>/`` and a partition at
``.../<dim>=<key>/part-0.parquet``.

* **Output** — the publish step of write–audit–publish. An asset hands over the tables it staged
  and audited (:class:`~lake_platform.staging.StagedTable`, one per partition it wrote); this
  moves them onto their published paths (:meth:`StagedTable.publish`) and records URI, row count
  (over a run of many partitions: their number and the least and most rows of one) and, where it
  differs from the columns the definition declares, the published schema. Anything else is
  refused: an unaudited table is never published.
* **Input** — a ``pyarrow.Table`` (tables that fit in memory) or, for an input annotated
  ``pyarrow.dataset.Dataset``, a lazy dataset over the requested partitions (large tensor tables:
  cutouts, injection bank, scores), each with the hive partition column when the files lack it.
  A partitioned step needs every partition it asks for; an unpartitioned one reads every
  partition of its input published so far (one registered but not yet published is named in a
  warning), so a sweep file appearing while it is queued does not fail it.
"""

import dagster as dg
import pyarrow as pa
import pyarrow.dataset as ds

from lake_platform.contracts import Contract
from lake_platform.staging import StagedTable
from resources.lake import LakeResource
from table_registry import by_key


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
        raise dg.DagsterInvariantViolationError(
            f"lake assets need keys [group, table]; got {asset_key.to_user_string()}"
        )
    return path[0], path[1]


def column_schema(contract: Contract | None, schema: pa.Schema | None = None) -> dg.MetadataValue:
    """The ``dagster/column_schema`` of a table: the columns of ``schema`` (a published table's),
    or else every column the contract declares, each with the contract's description and unit (a
    column the contract does not declare shows its type alone)."""
    declared = {c.name: c for c in contract.columns} if contract is not None else {}
    names = schema.names if schema is not None else list(declared)

    def column(name: str) -> dg.TableColumn:
        typ = str(schema.field(name).type) if schema is not None else str(declared[name].type)
        c = declared.get(name)
        text = None if c is None else (f"{c.description} [{c.unit}]" if c.unit else c.description)
        return dg.TableColumn(name, typ, description=text)

    return dg.MetadataValue.table_schema(dg.TableSchema(columns=[column(n) for n in names]))


def _as_declared(schema: pa.Schema, contract: Contract | None) -> bool:
    """The published ``schema`` has exactly the contract's columns, in its order, of its types."""
    return (
        contract is not None
        and schema.names == [c.name for c in contract.columns]
        and all(schema.field(c.name).type == c.type for c in contract.columns)
    )


def _contract(asset_key: dg.AssetKey) -> Contract | None:
    """The registry's contract of a lake asset (None for a table without one, or not in the registry)."""
    try:
        return by_key(*table_location(asset_key)).contract
    except KeyError:
        return None


class LakeIOManager(LakeResource, dg.ConfigurableIOManager):
    """Publishes staged tables on output; loads published tables (or datasets) on input. Its
    settings are the lake resource's (``uri``, ``s3_endpoint``, ...): give it the same values."""

    def handle_output(self, context: dg.OutputContext, obj: list[StagedTable] | None) -> None:
        if obj is None:
            return
        staged = obj if isinstance(obj, list) else [obj]
        if not staged or not all(isinstance(s, StagedTable) for s in staged):
            raise TypeError(
                f"{context.asset_key.to_user_string()}: the lake IO manager publishes staged, audited tables "
                f"(a list of StagedTable), got {type(obj).__name__}"
            )
        self._check_targets(context, staged)
        published = [s.publish() for s in staged]
        lake = self.lake()
        contract = _contract(context.asset_key)
        schema = lake.read_schema(*table_location(context.asset_key), partition=staged[-1].partition)
        md = {
            "dagster/uri": dg.MetadataValue.path(
                published[0].uri if len(published) == 1 else lake.table(*table_location(context.asset_key)).location()
            ),
            "dagster/row_count": dg.MetadataValue.int(sum(p.rows for p in published)),
        }
        # the definition shows the declared columns; repeating them on each partition's
        # materialization would make the largest part of every event in the instance
        if not _as_declared(schema, contract):
            md["dagster/column_schema"] = column_schema(contract, schema)
        if len(published) == 1 and published[0].partition:
            md["dagster/partition_row_count"] = dg.MetadataValue.int(published[0].rows)
        elif len(published) > 1:
            # a run over many partitions records one materialization per partition, each with this
            # metadata: a figure per partition here would grow the event log as the square of the
            # run's partitions (each file's rows are one query of the lake away)
            rows = [p.rows for p in published]
            md["n_partitions"] = dg.MetadataValue.int(len(rows))
            md["partition_rows_min"] = dg.MetadataValue.int(min(rows))
            md["partition_rows_max"] = dg.MetadataValue.int(max(rows))
        context.add_output_metadata(md)

    def _check_targets(self, context: dg.OutputContext, staged: list[StagedTable]) -> None:
        """The staged tables are exactly this output's table and partitions."""
        group, table = table_location(context.asset_key)
        wrong = [s.label for s in staged if (s.group, s.table) != (group, table)]
        if wrong:
            raise dg.DagsterInvariantViolationError(
                f"{context.asset_key.to_user_string()}: staged tables {wrong} belong to another asset"
            )
        if context.has_asset_partitions:
            pdef = context.asset_partitions_def
            expected = sorted(str(partition_for_key(pdef, k)) for k in context.asset_partition_keys)
            got = sorted(str(s.partition) for s in staged)
            if expected != got:
                raise dg.DagsterInvariantViolationError(
                    f"{context.asset_key.to_user_string()}: staged partitions {got} != the run's {expected}"
                )

    def load_input(self, context: dg.InputContext) -> pa.Table | ds.Dataset:
        lake = self.lake()
        group, table = table_location(context.asset_key)
        partitions = None
        if context.has_asset_partitions:
            pdef = context.asset_partitions_def
            partitions = [partition_for_key(pdef, k) for k in context.asset_partition_keys]
            if not _step_is_partitioned(context):
                partitions = _published(context, lake, group, table, partitions)
        dataset = lake.dataset(group, table, partitions=partitions)
        if context.dagster_type.typing_type is ds.Dataset:
            return dataset
        return dataset.to_table()


def _step_is_partitioned(context: dg.InputContext) -> bool:
    try:
        return context.step_context.has_partitions
    except dg.DagsterInvariantViolationError:  # a context built outside a run: read as a partitioned step does
        return True


def _published(context: dg.InputContext, lake, group: str, table: str, wanted: list[dict]) -> list[dict]:
    """The partitions of ``wanted`` published so far: an unpartitioned table reads every partition
    of its partitioned input, and one registered but not yet published (a sweep file that just
    appeared in the survey, its ingest still queued) is left out and named in a warning; Dagster
    marks the table stale once it is published."""
    published = {tuple(sorted(p.items())) for p in lake.partitions(group, table)}
    missing = [p for p in wanted if tuple(sorted(p.items())) not in published]
    if missing:
        names = ", ".join("/".join(p.values()) for p in missing[:5])
        context.log.warning(
            f"{group}/{table}: {len(missing)} of {len(wanted)} partitions are registered but not published yet "
            f"({names}{', ...' if len(missing) > 5 else ''}): read without them"
        )
    return [p for p in wanted if p not in missing]
