"""Imaging stage: 101×101 g,r,z cutouts of every catalog target (one partition per sweep file)
and the cutout validation with its shortcut scan.

``cutouts`` is a large tensor table: its stamps stream from the imaging source into the staged
partition (never whole in memory), are audited there and published by the lake IO manager;
downstream assets read it as a lazy dataset.
"""

import itertools
import json

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from darkhaloscope.errors import InputError
from darkhaloscope.imaging.cutout_table import (
    STAMP_COLUMNS,
    InflightFetches,
    cutout_batches,
    cutout_targets,
    reusable_cutouts,
)
from darkhaloscope.imaging.quality import quality_summary
from darkhaloscope.imaging.shortcuts import RED_BOUND, core_shortcut_failed
from darkhaloscope.imaging.validation import NEGATIVES_VALID_MIN, quality_fractions, shortcut_scan, worst_core_feature
from lake_platform import audits as au
from resources import LakeResource, SurveyResource
from resources.imaging import ImagingResource
from table_registry import CUTOUT_VALIDATION, CUTOUTS, NEGATIVES, POSITIVES, TRAINING_CATALOG
from table_registry import imaging as checks

from .shared.partitions import per_file_backfill
from .shared.publish import Publish, lake_asset, per_partition, staged_table
from .survey import sweeps


@lake_asset(
    CUTOUTS,
    code_version="3",
    kinds={"parquet"},
    ins={
        "negatives": dg.AssetIn(list(NEGATIVES.key)),
        "positives": dg.AssetIn(list(POSITIVES.key)),
        "training_catalog": dg.AssetIn(list(TRAINING_CATALOG.key)),
    },
    # the mock sky is drawn from the survey's every sweep file (a stamp near a file's edge sees its neighbours)
    deps=[dg.AssetDep(sweeps, partition_mapping=dg.AllPartitionMapping())],
    backfill_policy=per_file_backfill(),
)
def cutouts(
    context: dg.AssetExecutionContext,
    lake: LakeResource,
    survey: SurveyResource,
    imaging: ImagingResource,
    negatives: pa.Table,
    positives: pa.Table,
    training_catalog: pa.Table,
) -> Publish:
    """101×101 g,r,z cutouts (nanomaggies; invvar; maskbits where the source has them) of every
    negative and positive of a sweep file, as Arrow fixed-shape tensors, with the target's id,
    label, tier, split, pool, conditions and per-cutout quality metrics; streamed into the staged
    partition. From a cutout service each fetched chunk is kept in flight (``_inflight/``) so a
    rerun fetches only what is missing. A run covers one sweep file or several, with the image
    source opened once."""
    store, names = lake.lake(), list(context.partition_keys)
    source = imaging.source(survey)
    training_ids = training_catalog.column("object_id")
    staged, md, inflights = [], {}, []
    for name in names:
        part = staged_table(context, CUTOUTS, name)
        mine = negatives.filter(pc.equal(negatives.column("sweep_file"), name))
        targets = cutout_targets(mine, positives, training_ids, name)
        if targets.num_rows == 0:
            raise InputError(f"sweep file {name} has no catalog targets to cut")
        inflight = InflightFetches(store.inflight(), name) if source.checkpoint_chunks else None
        schema = _stage_cutouts(part, targets, source, inflight, store.table(*CUTOUTS.key))
        q = part.read(columns=[c for c in schema.names if c not in STAMP_COLUMNS])
        md[name] = {"quality": quality_summary(q), "source": type(source).__name__}
        staged.append(part)
        inflights += [inflight] if inflight is not None else []
    return Publish(
        {CUTOUTS: staged},
        metadata={CUTOUTS: per_partition(md)},
        after=(lambda: [i.clear() for i in inflights]) if inflights else None,
    )


def _stage_cutouts(staged, targets: pa.Table, source, inflight: InflightFetches | None, published) -> pa.Schema:
    """Stream the cutouts of ``targets`` into ``staged``; with a cutout service, stamps already
    fetched (the ``published`` partition, in-flight chunks) are reused. Returns the table's schema."""
    reused = None
    if inflight is not None:
        part = staged.partition
        done = [published.read(part)] if published.exists(part) else []
        reused = reusable_cutouts(done + inflight.tables(), targets)
        if reused is not None:
            targets = targets.filter(pc.invert(pc.is_in(targets.column("object_id"), reused.column("object_id"))))
    batches = cutout_batches(targets, source)
    if inflight is not None:
        batches = inflight.recording(batches)
    first = next(batches, None)
    if first is None:  # every target was already fetched
        first, batches, reused = reused.to_batches()[0], iter(reused.to_batches()[1:]), None
    if reused is not None:
        batches = itertools.chain(reused.select(first.schema.names).cast(first.schema).to_batches(), batches)
    staged.write(itertools.chain([first], batches), schema=first.schema)
    return first.schema


@lake_asset(CUTOUT_VALIDATION, code_version="2", kinds={"parquet"}, ins={"cutouts": dg.AssetIn(list(CUTOUTS.key))})
def cutout_validation(context: dg.AssetExecutionContext, lake: LakeResource, cutouts: ds.Dataset) -> Publish:
    """Quality gates (all positives valid; >= 98% of negatives valid) and a shortcut scan: the AUC
    separating training-catalog positives from negatives for ~25 simple image features, with
    bootstrap 68% intervals and red (> 0.70) / yellow (> 0.60) flags."""
    aucs = shortcut_scan(cutouts)
    summary = {**quality_fractions(cutouts), "core_shortcut_red": bool(core_shortcut_failed(aucs))}
    staged = staged_table(context, CUTOUT_VALIDATION)
    staged.write(aucs)
    staged.write_bytes("summary.json", json.dumps(summary, indent=2, sort_keys=True).encode())
    flags = {
        r["feature"]: f"{r['flag']} (AUC {r['auc']:.3f} [{r['auc_lo']:.3f}, {r['auc_hi']:.3f}])"
        for r in aucs.to_pylist()
        if r["flag"] in ("red", "yellow")
    }
    md = {"summary": summary, "flagged_features": flags}
    return Publish(
        {CUTOUT_VALIDATION: staged},
        audits={CUTOUT_VALIDATION: _validation_audits(aucs, summary)},
        metadata={CUTOUT_VALIDATION: md},
    )


def _validation_audits(aucs: pa.Table, summary: dict) -> list[au.AuditOutcome]:
    worst = worst_core_feature(aucs)
    return [
        au.threshold_audit(
            checks.POSITIVES_ALL_VALID,
            summary["positives_valid_fraction"],
            1.0,
            True,
            "fraction of positive cutouts passing the quality gate",
            {"n_positives": summary["n_positives"]},
        ),
        au.threshold_audit(
            checks.NEGATIVES_MOSTLY_VALID,
            summary["negatives_valid_fraction"],
            NEGATIVES_VALID_MIN,
            True,
            "fraction of negative cutouts passing the quality gate",
            {"n_negatives": summary["n_negatives"]},
        ),
        checks.NO_CORE_BRIGHTNESS_SHORTCUT.outcome(
            not core_shortcut_failed(aucs),
            {"worst_core_feature": worst, "red_threshold": RED_BOUND},
            f"core-brightness feature {worst and worst['feature']} separates positives from negatives (AUC lower "
            f"bound > {RED_BOUND})",
        ),
    ]


imaging_defs = dg.Definitions(assets=[cutouts, cutout_validation])
