"""Imaging stage: 101×101 g,r,z cutouts of every catalog target (one partition per sweep file)
and the cutout validation with its shortcut scan.

``cutouts`` is a large tensor table: its stamps stream from the imaging source into the staged
partition through the lake resource (never whole in memory), are audited there and published by
the lake IO manager; downstream assets read it as a lazy dataset.
"""

import itertools
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import dagster as dg

from darkhaloscope import audits as au
from darkhaloscope.contracts import CUTOUT_VALIDATION, CUTOUTS
from darkhaloscope.errors import InputError
from darkhaloscope.imaging.cutout_table import STAMP_COLUMNS, InflightFetches, cutout_batches, cutout_targets, reusable_cutouts
from darkhaloscope.imaging.quality import quality_summary
from darkhaloscope.imaging.shortcuts import RED_BOUND, core_shortcut_failed
from darkhaloscope.imaging.validation import NEGATIVES_VALID_MIN, quality_fractions, shortcut_scan, worst_core_feature
from darkhaloscope.survey.sweeps import SWEEP_DIM
from resources import LakeResource, SurveyResource
from resources.imaging import ImagingResource

from .catalog import CAT, NEG, POS
from .common import OWNERS, as_metadata, check_specs, fail_fast_on_bad_input, gate
from .partitions import sweep_partitions
from .survey import sweeps

GROUP = "imaging"
CUTOUTS_KEY, VALIDATION_KEY = (GROUP, "cutouts"), (GROUP, "cutout_validation")
VALIDATION_AUDITS = (au.CUTOUT_VALIDATION_CONTRACT, au.POSITIVES_ALL_VALID, au.NEGATIVES_MOSTLY_VALID, au.NO_CORE_BRIGHTNESS_SHORTCUT)


@dg.asset(
    key=list(CUTOUTS_KEY), group_name=GROUP, partitions_def=sweep_partitions, kinds={"parquet"}, owners=OWNERS, code_version="3",
    ins={"negatives": dg.AssetIn(list(NEG)), "positives": dg.AssetIn(list(POS)), "training_catalog": dg.AssetIn(list(CAT))},
    # the mock sky is drawn from every sweeps partition (a stamp near a file's edge sees its neighbours)
    deps=[dg.AssetDep(sweeps, partition_mapping=dg.AllPartitionMapping())],
    check_specs=check_specs(CUTOUTS_KEY, (au.CUTOUTS_CONTRACT,)),
)
def cutouts(context: dg.AssetExecutionContext, lake: LakeResource, survey: SurveyResource, imaging: ImagingResource,
            negatives: pa.Table, positives: pa.Table, training_catalog: pa.Table):
    """101×101 g,r,z cutouts (nanomaggies; invvar; maskbits where the source has them) of every
    negative and positive of one sweep file, as Arrow fixed-shape tensors, with the target's id,
    label, tier, split, pool, conditions and per-cutout quality metrics; streamed through the lake
    resource into the staged partition. From a cutout service each fetched chunk is kept in flight
    (``_inflight/``) so a rerun fetches only what is missing."""
    store, name = lake.lake(), context.partition_key
    staged = lake.stage(context).table(*CUTOUTS_KEY, {SWEEP_DIM: name})
    with fail_fast_on_bad_input():
        targets = cutout_targets(negatives, positives, training_catalog.column("object_id"), name)
        if targets.num_rows == 0:
            raise InputError(f"sweep file {name} has no catalog targets to cut")
        source = imaging.source(survey, store)
        inflight = InflightFetches(store, name) if source.checkpoint_chunks else None
        schema = _stage_cutouts(staged, targets, source, inflight, store)
    q = staged.read(columns=[c for c in schema.names if c not in STAMP_COLUMNS])
    outcomes = [au.contract_audit(au.CUTOUTS_CONTRACT, staged.dataset(), CUTOUTS)]
    md = as_metadata({"quality": quality_summary(q), "source": type(source).__name__})
    yield from gate(context, {CUTOUTS_KEY: ([staged], outcomes)}, {CUTOUTS_KEY: md})
    if inflight is not None:
        inflight.clear()


def _stage_cutouts(staged, targets: pa.Table, source, inflight: InflightFetches | None, store) -> pa.Schema:
    """Stream the cutouts of ``targets`` into ``staged``; with a cutout service, stamps already
    fetched (published partition, in-flight chunks) are reused. Returns the table's schema."""
    reused = None
    if inflight is not None:
        part = {SWEEP_DIM: staged.partition[SWEEP_DIM]}
        published = [store.read_table(*CUTOUTS_KEY, partition=part)] if store.exists(*CUTOUTS_KEY, part) else []
        reused = reusable_cutouts(published + inflight.tables(), targets)
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


@dg.asset(key=list(VALIDATION_KEY), group_name=GROUP, ins={"cutouts": dg.AssetIn(list(CUTOUTS_KEY))}, kinds={"parquet"},
          owners=OWNERS, code_version="2", check_specs=check_specs(VALIDATION_KEY, VALIDATION_AUDITS))
def cutout_validation(context: dg.AssetExecutionContext, lake: LakeResource, cutouts: ds.Dataset):
    """Quality gates (all positives valid; >= 98% of negatives valid) and a shortcut scan: the AUC
    separating training-catalog positives from negatives for ~25 simple image features, with
    bootstrap 68% intervals and red (> 0.70) / yellow (> 0.60) flags."""
    with fail_fast_on_bad_input():
        aucs = shortcut_scan(cutouts)
    summary = {**quality_fractions(cutouts), "core_shortcut_red": bool(core_shortcut_failed(aucs))}
    staged = lake.stage(context).table(*VALIDATION_KEY)
    staged.write(aucs)
    staged.write_bytes("summary.json", json.dumps(summary, indent=2, sort_keys=True).encode())
    flags = {r["feature"]: f"{r['flag']} (AUC {r['auc']:.3f} [{r['auc_lo']:.3f}, {r['auc_hi']:.3f}])" for r in aucs.to_pylist() if r["flag"] in ("red", "yellow")}
    md = as_metadata({"summary": summary, "flagged_features": flags})
    yield from gate(context, {VALIDATION_KEY: ([staged], _validation_audits(staged.read(), summary))}, {VALIDATION_KEY: md})


def _validation_audits(aucs: pa.Table, summary: dict) -> list[au.AuditOutcome]:
    worst = worst_core_feature(aucs)
    return [
        au.contract_audit(au.CUTOUT_VALIDATION_CONTRACT, aucs, CUTOUT_VALIDATION),
        au.threshold_audit(au.POSITIVES_ALL_VALID, summary["positives_valid_fraction"], 1.0, True, "fraction of positive cutouts passing the quality gate",
                           {"n_positives": summary["n_positives"]}),
        au.threshold_audit(au.NEGATIVES_MOSTLY_VALID, summary["negatives_valid_fraction"], NEGATIVES_VALID_MIN, True,
                           "fraction of negative cutouts passing the quality gate", {"n_negatives": summary["n_negatives"]}),
        au.NO_CORE_BRIGHTNESS_SHORTCUT.outcome(not core_shortcut_failed(aucs), {"worst_core_feature": worst, "red_threshold": RED_BOUND},
                                               f"core-brightness feature {worst and worst['feature']} separates positives from negatives (AUC lower bound > {RED_BOUND})"),
    ]


def cutout_to_file(ra: float, dec: float, size: int, out: str) -> str:
    """``dhs cutout``: one g,r,z cutout from the configured source as FITS (band, y, x) + WCS + invvar, or PNG."""
    from darkhaloscope.imaging.cutout_io import write_cutout_fits, write_cutout_png
    from resources.config import build_resources

    res = build_resources()
    source = res["imaging"].source(res["survey"], res["lake"].lake())
    got = source.cutouts(np.array([ra]), np.array([dec]), size)
    batch, failed = got if isinstance(got, tuple) else (got, np.array([""]))
    if failed[0]:
        raise RuntimeError(f"cutout at ({ra}, {dec}) could not be fetched: {failed[0]}")
    if out.lower().endswith(".png"):
        write_cutout_png(out, batch.image[0])
    else:
        write_cutout_fits(out, batch.image[0], batch.invvar[0], ra, dec, offset_pix=(float(batch.dx[0]), float(batch.dy[0])))
    return out


imaging_defs = dg.Definitions(assets=[cutouts, cutout_validation])
