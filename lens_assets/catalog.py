"""Catalog stage on Spark: negative pools (N1 + N2), known-lens positives, the stratified training catalog.

The selection logic lives once in ``darkhaloscope.catalog`` as vectorised functions over Arrow
batches; these assets apply it on Spark (``DHS_SPARK_MASTER``), one task per sweep file. The
negatives are partitioned like the sweeps; one run may cover many partitions (single-run
backfills): each executor commits its file's partition to the run's staging area, every staged
partition is audited, and they are published together — or, if any blocking audit fails, all are
rejected. Positives are flagged, and the checks re-verify, with the selection the negatives were
built with (recorded in ``selection_funnel``).
"""

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from darkhaloscope.catalog.cuts import NegativeSelectionConfig, funnel_table, funnel_with_selection, recorded_selection
from darkhaloscope.catalog.sampling import N1_FRACTION, NEGATIVES_PER_POSITIVE
from darkhaloscope.catalog.spark import (
    negatives_dataframe,
    negatives_on_spark,
    positives_on_spark,
    training_catalog_on_spark,
)
from darkhaloscope.catalog.spark_conf import S3RetryCount
from darkhaloscope.catalog.verify import (
    ExclusionCheck,
    split_fraction_report,
    strata_coverage,
    verify_cuts_with_duckdb,
    verify_split_disjoint,
)
from lake_platform import audits as au
from lake_platform.lake import STAGING_DIR
from resources import ComputeResource, LakeResource
from resources.compute import CatalogLaunchResource, QuietPySparkResource
from table_registry import NEGATIVES, POSITIVES, SELECTION_FUNNEL, SWEEPS, TRAINING_CATALOG, TRAINING_STRATA
from table_registry import catalog as checks

from .shared.automation import NEW_PARTITION
from .shared.publish import Publish, lake_asset, markdown_table, staged_table
from .survey import known_lenses, sweeps

_DEFAULT = NegativeSelectionConfig()
#: The demo profile samples fewer negatives per positive so that the demo trains in minutes on 2 cores.
DEMO_RATIO = 20


class NegativesConfig(dg.Config):
    """The negative selection's cuts (defaults: ``NegativeSelectionConfig``, Paper IV)."""

    dec_min: float = _DEFAULT.dec_min
    dec_max: float = _DEFAULT.dec_max
    types: list[str] = sorted(_DEFAULT.types)
    min_nobs: int = _DEFAULT.min_nobs
    zmag_max: float = _DEFAULT.zmag_max
    excluded_maskbits: list[int] = sorted(_DEFAULT.excluded_maskbits)
    exclusion_radius_arcsec: float = _DEFAULT.exclusion_radius_arcsec

    def selection(self) -> NegativeSelectionConfig:
        return NegativeSelectionConfig(
            dec_min=self.dec_min,
            dec_max=self.dec_max,
            types=frozenset(self.types),
            min_nobs=self.min_nobs,
            zmag_max=self.zmag_max,
            excluded_maskbits=frozenset(self.excluded_maskbits),
            exclusion_radius_arcsec=self.exclusion_radius_arcsec,
        )


@lake_asset(
    NEGATIVES,
    SELECTION_FUNNEL,
    code_version="3",
    kinds={"spark", "parquet"},
    ins={"known_lenses": dg.AssetIn(known_lenses.key)},
    deps=[sweeps],
    backfill_policy=dg.BackfillPolicy.single_run(),
    pool="spark",
    automation_condition=NEW_PARTITION,
)
def negatives(
    context: dg.AssetExecutionContext,
    config: NegativesConfig,
    pyspark: QuietPySparkResource,
    lake: LakeResource,
    catalog_launch: CatalogLaunchResource,
    known_lenses: pa.Table,
) -> Publish:
    """Cuts: footprint, TYPE, nobs, z mag (non-positive flux rejected), maskbits, known-lens
    exclusion radius. One Spark task per sweep file of the run's partitions, on the local Spark
    session or in a job launched through Dagster Pipes (``catalog_launch``)."""
    store = lake.lake()
    selection, names = config.selection(), list(context.partition_keys)
    neg = [staged_table(context, NEGATIVES, n) for n in names]
    retries = S3RetryCount()
    if catalog_launch.mode == "local":
        retries.include_tasks(pyspark.spark_session)
        funnel = negatives_on_spark(
            pyspark.spark_session,
            store.table(*SWEEPS.key),
            known_lenses,
            neg[0].area.table(*NEGATIVES.key),
            selection,
            names=names,
        )
    else:
        funnel = catalog_launch.run_negatives(
            context, lake.uri, lake.s3_endpoint, f"{STAGING_DIR}/{neg[0].owner}", names, selection.to_dict()
        )
    fun = [staged_table(context, SELECTION_FUNNEL, n) for n in names]
    for staged, name in zip(fun, names):
        staged.write(funnel_with_selection({name: funnel[name]}, selection))
    exclusion = ExclusionCheck(known_lenses, selection.exclusion_radius_arcsec)
    outcomes = au.combine(
        [o for s in neg for o in _negatives_audits(s, exclusion, selection)],
        [s.label for s in neg for _ in range(2)],
    )
    table = pa.concat_tables([s.read(columns=["pool", "confuser_category"]) for s in neg])
    run_funnel = {k: sum(funnel[n][k] for n in names) for k in funnel[names[0]]}
    md = {
        "pools": _counts(table, "pool"),
        "confuser_categories": _counts(table, "confuser_category"),
        "s3_retries": retries.count(),
        # the run's files summed: Dagster copies the run's metadata onto every file's materialization,
        # so one row per file and cut would grow the event log as the square of the run's files;
        # each file's funnel is in selection_funnel
        "funnel": dg.MetadataValue.md(markdown_table(funnel_table({"run": run_funnel}).drop_columns(["sweep_file"]))),
    }
    return Publish({NEGATIVES: neg, SELECTION_FUNNEL: fun}, audits={NEGATIVES: outcomes}, metadata={NEGATIVES: md})


def _negatives_audits(
    staged, exclusion_check: ExclusionCheck, selection: NegativeSelectionConfig
) -> list[au.AuditOutcome]:
    table = staged.read()
    exclusion = exclusion_check(table)
    cuts = verify_cuts_with_duckdb(table, selection)
    return [
        au.count_audit(
            checks.NEGATIVES_EXCLUSION,
            exclusion["n_violations"],
            f"negatives of {staged.label} within the exclusion radius of a known lens",
            exclusion,
        ),
        au.count_audit(
            checks.NEGATIVES_PASS_CUTS,
            cuts["n_violating"],
            f"negatives of {staged.label} fail a cut",
            {k: int(v) for k, v in cuts.items()},
        ),
    ]


def _counts(table: pa.Table, column: str) -> dict:
    return {str(d["values"]): int(d["counts"]) for d in table.column(column).value_counts().to_pylist()}


@lake_asset(
    POSITIVES,
    code_version="3",
    kinds={"spark", "parquet"},
    pool="spark",
    deps=[sweeps],
    ins={"known_lenses": dg.AssetIn(known_lenses.key), "selection_funnel": dg.AssetIn(list(SELECTION_FUNNEL.key))},
)
def positives(
    context: dg.AssetExecutionContext,
    pyspark: QuietPySparkResource,
    lake: LakeResource,
    known_lenses: pa.Table,
    selection_funnel: pa.Table,
) -> Publish:
    """Known galaxy-scale lenses cross-matched (broadcast, on Spark) to their nearest sweep source
    within 1.5″, with tier A (confident) / B (probable), the negatives' photometry, conditions,
    strata and split; positives outside the negatives' footprint or failing their cuts are kept
    and flagged."""
    table, summary = positives_on_spark(
        pyspark.spark_session, lake.lake().table(*SWEEPS.key), known_lenses, config=recorded_selection(selection_funnel)
    )
    return Publish({POSITIVES: table}, metadata={POSITIVES: {"summary": summary}})


class TrainingCatalogConfig(dg.Config):
    """Negatives per positive (Paper IV: ~100) and the N1 share of each stratum's negatives."""

    negatives_per_positive: int = NEGATIVES_PER_POSITIVE
    n1_fraction: float = N1_FRACTION


@lake_asset(
    TRAINING_CATALOG,
    TRAINING_STRATA,
    code_version="3",
    kinds={"spark", "parquet"},
    pool="spark",
    ins={"positives": dg.AssetIn(list(POSITIVES.key)), "negatives": dg.AssetIn(list(NEGATIVES.key))},
)
def training_catalog(
    context: dg.AssetExecutionContext,
    config: TrainingCatalogConfig,
    pyspark: QuietPySparkResource,
    lake: LakeResource,
    compute: ComputeResource,
    positives: pa.Table,
    negatives: ds.Dataset,
) -> Publish:
    """Positives plus negatives sampled per stratum of the positives at the configured ratio and
    N1:N2 mix, deterministic by hash order (the negatives read on Spark, one task per partition)."""
    ratio = (
        config.negatives_per_positive if compute.profile == "full" else min(config.negatives_per_positive, DEMO_RATIO)
    )
    names = sorted(
        set(negatives.to_table(columns=[NEGATIVES.partitioned_by]).column(NEGATIVES.partitioned_by).to_pylist())
    )
    spark = pyspark.spark_session
    catalog, strata = training_catalog_on_spark(
        spark,
        negatives_dataframe(spark, lake.lake().table(*NEGATIVES.key), names),
        positives,
        ratio=ratio,
        n1_fraction=config.n1_fraction,
    )
    outcomes = _training_catalog_audits(catalog, positives, negatives.to_table(columns=["ra", "dec", "split"]))
    labels = catalog.column("label").to_numpy()
    md = {
        "n_positives": int((labels == 1).sum()),
        "n_negatives": int((labels == 0).sum()),
        "negatives_per_positive": ratio,
        "strata": dg.MetadataValue.md(markdown_table(strata)),
    }
    return Publish(
        {TRAINING_CATALOG: catalog, TRAINING_STRATA: strata},
        audits={TRAINING_CATALOG: outcomes},
        metadata={TRAINING_CATALOG: md},
    )


def _training_catalog_audits(catalog: pa.Table, positives: pa.Table, negatives: pa.Table) -> list[au.AuditOutcome]:
    cols = ["ra", "dec", "split"]
    disjoint = verify_split_disjoint(negatives, positives.select(cols), catalog.select(cols))
    return [
        au.count_audit(
            checks.SPLITS_DISJOINT, disjoint["n_mixed_pixels"], "HEALPix pixels hold objects of two splits", disjoint
        ),
        au.report_audit(checks.SPLIT_FRACTIONS, split_fraction_report(negatives)),
        au.report_audit(
            checks.STRATA_HAVE_NEGATIVES,
            strata_coverage(positives, catalog.filter(pc.equal(catalog.column("label"), 0))),
        ),
    ]


catalog_defs = dg.Definitions(assets=[negatives, positives, training_catalog])
