"""Catalog stage on Spark: negative pools (N1 + N2), known-lens positives, the stratified training catalog.

The selection logic lives once in ``darkhaloscope.catalog`` as vectorised functions over Arrow
batches; these assets apply it on Spark (``DHS_SPARK_MASTER``), one task per sweep file, and commit
the results to the lake, one partition per sweep file for the negatives. Positives are flagged, and
the checks re-verify, with the selection the negatives were built with (recorded with the funnel).
"""


import json

import dagster as dg
import pyarrow.compute as pc
from dagster_pyspark import LazyPySparkResource

from darkhaloscope.catalog.cuts import NEGATIVE_SCHEMA, NegativeSelectionConfig, funnel_table
from darkhaloscope.catalog.spark import negatives_dataframe, negatives_on_spark, positives_on_spark, training_catalog_on_spark
from darkhaloscope.catalog.verify import (
    split_fraction_report,
    strata_coverage,
    verify_cuts_with_duckdb,
    verify_exclusion_with_astropy,
    verify_split_disjoint,
)
from darkhaloscope.contracts import NEGATIVES, POSITIVES, TRAINING_CATALOG
from darkhaloscope.errors import InputError
from darkhaloscope.survey.sweeps import SWEEP_DIM
from resources import ComputeResource, LakeResource

from .common import OWNERS, as_metadata, contract_result, markdown_table, schema_metadata
from .survey import known_lenses, sweeps

GROUP = "catalog"
#: Shared definition of the catalog's Spark assets (one Spark step at a time: pool "spark").
#: Schema-metadata key of ``selection_funnel`` holding the selection config of the run (JSON).
SELECTION_KEY = b"dhs.negative_selection"
SPARK_ASSET = dict(key_prefix=[GROUP], group_name=GROUP, kinds={"spark", "parquet"}, owners=OWNERS, code_version="2", pool="spark")


class NegativesConfig(dg.Config):
    """Paper IV / seed-system defaults for the negative pools (every cut is a field)."""

    dec_min: float = -18.0
    dec_max: float = 32.0
    types: list[str] = ["SER", "DEV", "REX", "EXP"]
    min_nobs: int = 3
    zmag_max: float = 20.0
    excluded_maskbits: list[int] = [1, 5, 6, 7, 11, 12, 13]
    exclusion_radius_arcsec: float = 11.0

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


@dg.asset(deps=[sweeps, known_lenses], **SPARK_ASSET)
def negatives(context: dg.AssetExecutionContext, config: NegativesConfig, pyspark: LazyPySparkResource, lake: LakeResource) -> dg.MaterializeResult:
    """N1 (representative) and N2 (confuser) negative pools in one table with a ``pool`` column,
    one lake partition per sweep file. Cuts: footprint, TYPE, nobs, z mag (non-positive flux
    rejected), maskbits, known-lens exclusion radius; the funnel is stored as ``selection_funnel``."""
    store = lake.lake()
    spark = pyspark.spark_session
    selection = config.selection()
    funnel = negatives_on_spark(spark, store, store.read_table("survey", "known_lenses"), selection)
    for stale in store.partitions(GROUP, "negatives"):
        if stale.get(SWEEP_DIM) not in funnel:
            store.delete_partition(GROUP, "negatives", stale)
    ft = funnel_table(funnel)
    # the selection as run travels with its funnel: the checks re-verify against it, not the defaults
    store.write_table(GROUP, "selection_funnel", ft.replace_schema_metadata({SELECTION_KEY: json.dumps(selection.to_dict())}))
    table = store.read_table(GROUP, "negatives", columns=["pool", "confuser_category"])
    pools = {str(d["values"]): int(d["counts"]) for d in table.column("pool").value_counts().to_pylist()}
    cats = {str(d["values"]): int(d["counts"]) for d in table.column("confuser_category").value_counts().to_pylist()}
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": table.num_rows,
            "dagster/uri": dg.MetadataValue.path(store.full_uri(store.table_path(GROUP, "negatives"))),
            "dagster/column_schema": schema_metadata(NEGATIVE_SCHEMA),
            "pools": dg.MetadataValue.json(pools),
            "confuser_categories": dg.MetadataValue.json(cats),
            "funnel": dg.MetadataValue.md(markdown_table(ft)),
            "spark_master": spark.sparkContext.master,
        }
    )


@dg.asset_check(asset=negatives, blocking=True, description="schema, unique object ids, pools and splits match the contract")
def negatives_contract(lake: LakeResource) -> dg.AssetCheckResult:
    return contract_result(lake.lake(), GROUP, "negatives", NEGATIVES)


def selection_as_run(store) -> NegativeSelectionConfig:
    """The negative selection the last ``negatives`` run used (recorded with its funnel)."""
    meta = store.read_schema(GROUP, "selection_funnel").metadata or {}
    if SELECTION_KEY not in meta:
        raise InputError(f"{store.full_uri(store.table_path(GROUP, 'selection_funnel'))} records no selection: materialize negatives again")
    return NegativeSelectionConfig.from_dict(json.loads(meta[SELECTION_KEY]))


@dg.asset_check(asset=negatives, blocking=True, description="no negative within the exclusion radius of a known lens (independent astropy cross-match)")
def negatives_exclusion(lake: LakeResource) -> dg.AssetCheckResult:
    store = lake.lake()
    neg = store.read_table(GROUP, "negatives", columns=["object_id", "ra", "dec"])
    res = verify_exclusion_with_astropy(neg, store.read_table("survey", "known_lenses"), selection_as_run(store).exclusion_radius_arcsec)
    return dg.AssetCheckResult(passed=res["n_violations"] == 0, metadata=as_metadata(res))


@dg.asset_check(asset=negatives, blocking=True, description="every negative passes every cut, re-verified with DuckDB SQL over the output")
def negatives_pass_cuts(lake: LakeResource) -> dg.AssetCheckResult:
    store = lake.lake()
    res = verify_cuts_with_duckdb(store.read_table(GROUP, "negatives"), selection_as_run(store))
    return dg.AssetCheckResult(passed=res["n_violating"] == 0, metadata={k: int(v) for k, v in res.items()})


@dg.asset(deps=[sweeps, known_lenses, negatives], **SPARK_ASSET)
def positives(context: dg.AssetExecutionContext, pyspark: LazyPySparkResource, lake: LakeResource) -> dg.MaterializeResult:
    """Known galaxy-scale lenses cross-matched (broadcast, on Spark) to their nearest sweep source
    within 1.5″, with tier A (confident) / B (probable), the negatives' photometry, conditions,
    strata and split; positives outside the negatives' footprint or failing their cuts are kept
    and flagged."""
    store = lake.lake()
    spark = pyspark.spark_session
    table, summary = positives_on_spark(spark, store, store.read_table("survey", "known_lenses"), config=selection_as_run(store))
    info = store.write_table(GROUP, "positives", table)
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": table.num_rows,
            "dagster/uri": dg.MetadataValue.path(info.uri),
            "dagster/column_schema": schema_metadata(table.schema),
            "summary": dg.MetadataValue.json(summary),
        }
    )


@dg.asset_check(asset=positives, blocking=True, description="schema, unique lens names, tiers, separations within the match radius")
def positives_contract(lake: LakeResource) -> dg.AssetCheckResult:
    return contract_result(lake.lake(), GROUP, "positives", POSITIVES)


class TrainingCatalogConfig(dg.Config):
    """Negatives per positive (Paper IV: ~100) and the N1 share of each stratum's negatives."""

    negatives_per_positive: int = 100
    n1_fraction: float = 0.85


@dg.asset(deps=[negatives, positives], **SPARK_ASSET)
def training_catalog(
    context: dg.AssetExecutionContext, config: TrainingCatalogConfig, pyspark: LazyPySparkResource, lake: LakeResource, compute: ComputeResource
) -> dg.MaterializeResult:
    """Positives plus negatives sampled per (nobs_z_bin, type_bin) stratum of the positives at the
    configured ratio and N1:N2 mix, deterministic by hash order; per-stratum targets and actuals
    are stored as ``training_strata``."""
    store = lake.lake()
    spark = pyspark.spark_session
    ratio = config.negatives_per_positive if compute.profile == "full" else min(config.negatives_per_positive, DEMO_RATIO)
    catalog, strata = training_catalog_on_spark(spark, negatives_dataframe(spark, store), store.read_table(GROUP, "positives"), ratio=ratio, n1_fraction=config.n1_fraction)
    info = store.write_table(GROUP, "training_catalog", catalog)
    store.write_table(GROUP, "training_strata", strata)
    labels = catalog.column("label").to_numpy()
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": catalog.num_rows,
            "dagster/uri": dg.MetadataValue.path(info.uri),
            "dagster/column_schema": schema_metadata(catalog.schema),
            "n_positives": int((labels == 1).sum()),
            "n_negatives": int((labels == 0).sum()),
            "negatives_per_positive": ratio,
            "strata": dg.MetadataValue.md(markdown_table(strata)),
        }
    )


#: The demo profile samples fewer negatives per positive so that the demo trains in minutes on 2 cores.
DEMO_RATIO = 20


@dg.asset_check(asset=training_catalog, blocking=True, description="schema, unique object ids, labels and splits")
def training_catalog_contract(lake: LakeResource) -> dg.AssetCheckResult:
    return contract_result(lake.lake(), GROUP, "training_catalog", TRAINING_CATALOG)


@dg.asset_check(asset=training_catalog, blocking=True, description="no HEALPix pixel in two splits (pixels recomputed from ra/dec) across negatives, positives and the catalog")
def splits_disjoint(lake: LakeResource) -> dg.AssetCheckResult:
    store = lake.lake()
    cols = ["ra", "dec", "split"]
    res = verify_split_disjoint(
        store.read_table(GROUP, "negatives", columns=cols),
        store.read_table(GROUP, "positives", columns=cols),
        store.read_table(GROUP, "training_catalog", columns=cols),
    )
    return dg.AssetCheckResult(passed=res["n_mixed_pixels"] == 0, metadata=as_metadata(res))


@dg.asset_check(asset=training_catalog, blocking=False, description="split fractions of the negative pool within tolerance of 70/15/15 (warning: small areas are lumpy)")
def split_fractions(lake: LakeResource) -> dg.AssetCheckResult:
    res = split_fraction_report(lake.lake().read_table(GROUP, "negatives", columns=["split"]))
    return dg.AssetCheckResult(passed=res["ok"], severity=dg.AssetCheckSeverity.WARN, metadata=as_metadata(res))


@dg.asset_check(asset=training_catalog, blocking=True, description="every stratum of the positives has negatives")
def strata_have_negatives(lake: LakeResource) -> dg.AssetCheckResult:
    store = lake.lake()
    res = strata_coverage(store.read_table(GROUP, "positives"), store.read_table(GROUP, "training_catalog", filter=pc.field("label") == 0))
    return dg.AssetCheckResult(passed=res["ok"], metadata=as_metadata(res))


catalog_defs = dg.Definitions(
    assets=[negatives, positives, training_catalog],
    asset_checks=[
        negatives_contract,
        negatives_exclusion,
        negatives_pass_cuts,
        positives_contract,
        training_catalog_contract,
        splits_disjoint,
        split_fractions,
        strata_have_negatives,
    ],
)
