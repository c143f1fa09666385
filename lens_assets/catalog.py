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

from darkhaloscope import audits as au
from darkhaloscope.catalog.cuts import NegativeSelectionConfig, funnel_with_selection, recorded_selection
from darkhaloscope.catalog.sampling import N1_FRACTION, NEGATIVES_PER_POSITIVE
from darkhaloscope.catalog.spark import negatives_dataframe, negatives_on_spark, positives_on_spark, training_catalog_on_spark
from darkhaloscope.catalog.verify import split_fraction_report, strata_coverage, verify_cuts_with_duckdb, verify_exclusion_with_astropy, verify_split_disjoint
from darkhaloscope.contracts import NEGATIVES, POSITIVES, SELECTION_FUNNEL, TRAINING_CATALOG, TRAINING_STRATA
from darkhaloscope.lake import STAGING_DIR
from darkhaloscope.survey.sweeps import SWEEP_DIM
from resources import ComputeResource, LakeResource
from resources.compute import CatalogLaunchResource, QuietPySparkResource

from .common import OWNERS, as_metadata, check_specs, fail_fast_on_bad_input, gate, markdown_table
from .partitions import sweep_partitions
from .survey import known_lenses, sweeps

GROUP = "catalog"
NEG, FUNNEL, POS, CAT, STRATA = (GROUP, "negatives"), (GROUP, "selection_funnel"), (GROUP, "positives"), (GROUP, "training_catalog"), (GROUP, "training_strata")
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
            dec_min=self.dec_min, dec_max=self.dec_max, types=frozenset(self.types), min_nobs=self.min_nobs, zmag_max=self.zmag_max,
            excluded_maskbits=frozenset(self.excluded_maskbits), exclusion_radius_arcsec=self.exclusion_radius_arcsec,
        )


@dg.multi_asset(
    outs={"negatives": dg.AssetOut(key=list(NEG), kinds={"spark", "parquet"}, owners=OWNERS, code_version="3",
                                   description="N1 (representative) and N2 (confuser) negative pools, one partition per sweep file"),
          "selection_funnel": dg.AssetOut(key=list(FUNNEL), kinds={"parquet"}, owners=OWNERS, code_version="3",
                                          description="rows removed and remaining per cut step and sweep file, with the selection as run")},
    ins={"known_lenses": dg.AssetIn(known_lenses.key)},
    deps=[sweeps], group_name=GROUP, partitions_def=sweep_partitions, backfill_policy=dg.BackfillPolicy.single_run(), pool="spark",
    check_specs=check_specs(NEG, (au.NEGATIVES_CONTRACT, au.NEGATIVES_EXCLUSION, au.NEGATIVES_PASS_CUTS)) + check_specs(FUNNEL, (au.SELECTION_FUNNEL_CONTRACT,)),
)
def negatives(context: dg.AssetExecutionContext, config: NegativesConfig, pyspark: QuietPySparkResource, lake: LakeResource,
              catalog_launch: CatalogLaunchResource, known_lenses: pa.Table):
    """Cuts: footprint, TYPE, nobs, z mag (non-positive flux rejected), maskbits, known-lens
    exclusion radius. One Spark task per sweep file of the run's partitions, on the local Spark
    session or in a job launched through Dagster Pipes (``catalog_launch``)."""
    store, stage = lake.lake(), lake.stage(context)
    selection, names = config.selection(), list(context.partition_keys)
    with fail_fast_on_bad_input():
        if catalog_launch.mode == "local":
            funnel = negatives_on_spark(pyspark.spark_session, store, known_lenses, selection, names=names, out=stage.area)
        else:
            funnel = catalog_launch.run_negatives(context, lake.uri, lake.s3_endpoint, f"{STAGING_DIR}/{stage.owner}", names, selection.to_dict())
    neg = [stage.table(*NEG, {SWEEP_DIM: n}) for n in names]
    fun = [stage.table(*FUNNEL, {SWEEP_DIM: n}) for n in names]
    for staged, name in zip(fun, names):
        staged.write(funnel_with_selection({name: funnel[name]}, selection))
    outcomes = au.combine([o for s in neg for o in _negatives_audits(s, known_lenses, selection)], [s.label for s in neg for _ in range(3)])
    table = pa.concat_tables([s.read(columns=["pool", "confuser_category"]) for s in neg])
    md = as_metadata({"pools": _counts(table, "pool"), "confuser_categories": _counts(table, "confuser_category")})
    md["funnel"] = dg.MetadataValue.md(markdown_table(pa.concat_tables([s.read() for s in fun]).drop_columns(["selection"])))
    funnel_audits = au.combine([au.contract_audit(au.SELECTION_FUNNEL_CONTRACT, s.read(), SELECTION_FUNNEL) for s in fun], [s.label for s in fun])
    yield from gate(context, {NEG: (neg, outcomes), FUNNEL: (fun, funnel_audits)}, {NEG: md})


def _negatives_audits(staged, known: pa.Table, selection: NegativeSelectionConfig) -> list[au.AuditOutcome]:
    table = staged.read()
    exclusion = verify_exclusion_with_astropy(table, known, selection.exclusion_radius_arcsec)
    cuts = verify_cuts_with_duckdb(table, selection)
    return [
        au.contract_audit(au.NEGATIVES_CONTRACT, table, NEGATIVES),
        au.count_audit(au.NEGATIVES_EXCLUSION, exclusion["n_violations"], f"negatives of {staged.label} within the exclusion radius of a known lens", exclusion),
        au.count_audit(au.NEGATIVES_PASS_CUTS, cuts["n_violating"], f"negatives of {staged.label} fail a cut", {k: int(v) for k, v in cuts.items()}),
    ]


def _counts(table: pa.Table, column: str) -> dict:
    return {str(d["values"]): int(d["counts"]) for d in table.column(column).value_counts().to_pylist()}


@dg.asset(key=list(POS), group_name=GROUP, kinds={"spark", "parquet"}, owners=OWNERS, code_version="3", pool="spark",
          ins={"known_lenses": dg.AssetIn(known_lenses.key), "selection_funnel": dg.AssetIn(list(FUNNEL))}, deps=[sweeps],
          check_specs=check_specs(POS, (au.POSITIVES_CONTRACT,)))
def positives(context: dg.AssetExecutionContext, pyspark: QuietPySparkResource, lake: LakeResource, known_lenses: pa.Table, selection_funnel: pa.Table):
    """Known galaxy-scale lenses cross-matched (broadcast, on Spark) to their nearest sweep source
    within 1.5″, with tier A (confident) / B (probable), the negatives' photometry, conditions,
    strata and split; positives outside the negatives' footprint or failing their cuts are kept
    and flagged."""
    with fail_fast_on_bad_input():
        table, summary = positives_on_spark(pyspark.spark_session, lake.lake(), known_lenses, config=recorded_selection(selection_funnel))
    staged = lake.stage(context).table(*POS)
    staged.write(table)
    outcomes = [au.contract_audit(au.POSITIVES_CONTRACT, staged.read(), POSITIVES)]
    yield from gate(context, {POS: ([staged], outcomes)}, {POS: as_metadata({"summary": summary})})


class TrainingCatalogConfig(dg.Config):
    """Negatives per positive (Paper IV: ~100) and the N1 share of each stratum's negatives."""

    negatives_per_positive: int = NEGATIVES_PER_POSITIVE
    n1_fraction: float = N1_FRACTION


@dg.multi_asset(
    outs={"training_catalog": dg.AssetOut(key=list(CAT), kinds={"spark", "parquet"}, owners=OWNERS, code_version="3",
                                          description="positives plus negatives sampled per (nobs_z_bin, type_bin) stratum"),
          "training_strata": dg.AssetOut(key=list(STRATA), kinds={"parquet"}, owners=OWNERS, code_version="3",
                                         description="per-stratum targets, availability and actual counts of the training catalog")},
    ins={"positives": dg.AssetIn(list(POS)), "negatives": dg.AssetIn(list(NEG))}, group_name=GROUP, pool="spark",
    check_specs=check_specs(CAT, (au.TRAINING_CATALOG_CONTRACT, au.SPLITS_DISJOINT, au.SPLIT_FRACTIONS, au.STRATA_HAVE_NEGATIVES))
    + check_specs(STRATA, (au.TRAINING_STRATA_CONTRACT,)),
)
def training_catalog(context: dg.AssetExecutionContext, config: TrainingCatalogConfig, pyspark: QuietPySparkResource, lake: LakeResource,
                     compute: ComputeResource, positives: pa.Table, negatives: ds.Dataset):
    """Positives plus negatives sampled per stratum of the positives at the configured ratio and
    N1:N2 mix, deterministic by hash order (the negatives read on Spark, one task per partition)."""
    ratio = config.negatives_per_positive if compute.profile == "full" else min(config.negatives_per_positive, DEMO_RATIO)
    names = sorted(set(negatives.to_table(columns=[SWEEP_DIM]).column(SWEEP_DIM).to_pylist()))
    with fail_fast_on_bad_input():
        spark = pyspark.spark_session
        catalog, strata = training_catalog_on_spark(spark, negatives_dataframe(spark, lake.lake(), names), positives, ratio=ratio, n1_fraction=config.n1_fraction)
    stage = lake.stage(context)
    cat, st = stage.table(*CAT), stage.table(*STRATA)
    cat.write(catalog)
    st.write(strata)
    outcomes = _training_catalog_audits(cat.read(), positives, negatives.to_table(columns=["ra", "dec", "split"]))
    labels = catalog.column("label").to_numpy()
    md = {"n_positives": int((labels == 1).sum()), "n_negatives": int((labels == 0).sum()), "negatives_per_positive": ratio,
          "strata": dg.MetadataValue.md(markdown_table(strata))}
    yield from gate(context, {CAT: ([cat], outcomes), STRATA: ([st], [au.contract_audit(au.TRAINING_STRATA_CONTRACT, st.read(), TRAINING_STRATA)])}, {CAT: md})


def _training_catalog_audits(catalog: pa.Table, positives: pa.Table, negatives: pa.Table) -> list[au.AuditOutcome]:
    cols = ["ra", "dec", "split"]
    disjoint = verify_split_disjoint(negatives, positives.select(cols), catalog.select(cols))
    return [
        au.contract_audit(au.TRAINING_CATALOG_CONTRACT, catalog, TRAINING_CATALOG),
        au.count_audit(au.SPLITS_DISJOINT, disjoint["n_mixed_pixels"], "HEALPix pixels hold objects of two splits", disjoint),
        au.report_audit(au.SPLIT_FRACTIONS, split_fraction_report(negatives)),
        au.report_audit(au.STRATA_HAVE_NEGATIVES, strata_coverage(positives, catalog.filter(pc.equal(catalog.column("label"), 0)))),
    ]


catalog_defs = dg.Definitions(assets=[negatives, positives, training_catalog])
