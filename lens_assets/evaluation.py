"""Evaluation stage: scores (per sweep file and per injection batch, like their inputs), thresholds
from held-out negatives, the selection function
C(θ_E, z_l), real-lens recall, and the static HTML evaluation report."""

import itertools
import json
import shutil
import tempfile
from contextlib import contextmanager

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import dagster as dg

from darkhaloscope.evaluation import (
    build_report,
    example_ids,
    fpr_by_confuser,
    marginal_completeness,
    real_lens_recall as recall_table,
    selection_function as selection_table,
    thresholds_from_negatives,
    usable_thresholds,
)
from darkhaloscope.evaluation.plots import marginal_png, mosaic_png, reliability_png, roc_inputs, roc_png, selection_heatmap_png
from darkhaloscope.lake import Lake
from darkhaloscope.stamps import from_tensor_column
from darkhaloscope.training.checkpoint import load_checkpoint
from darkhaloscope.evaluation.comparison import MEMBER_SCORE_PREFIX, model_comparison
from darkhaloscope.training.inference import score_with_members
from resources import ComputeResource, LakeResource

from .common import OWNERS, table_result
from .imaging import GROUP as IMAGING, cutouts, load_stamps
from .injection import GROUP as INJECTION, injection_bank
from .partitions import injection_batches, sweep_partitions
from .training import GROUP as TRAINING, lens_finder

GROUP = "evaluation"
CUTOUT_META = ["object_id", "label", "split", "pool", "confuser_category", "tier", "name", "in_training_catalog", "psfsize_r", "psfdepth_r"]
INJECTION_META = [
    "injection_id", "theta_e_arcsec", "z_l", "z_s", "sigma_v_kms", "success", "failure_reason", "psf_fwhm_r",
    "psfdepth_r", "src_mag_r", "lensed_mag_r", "arc_snr", "magnification", "host_object_id",
]
#: Scoring batch per device: on a CPU large batches of 101-px activations are memory-bound (see
#: benchmarks/bench_scoring.py); a GPU wants large batches.
SCORE_BATCH = {"cpu": 16, "cuda": 512}


def checkpoint_dir(store: Lake) -> tuple[str, bool]:
    """Local folder of the lens finder's checkpoint (downloaded to a temp folder from S3)."""
    path = store.partition_path(TRAINING, "lens_finder", {"artifact": "checkpoint"})
    if not store.is_s3:
        return path, False
    local = tempfile.mkdtemp(prefix="dhs_ckpt_")
    pafs.copy_files(path, local, source_filesystem=store.fs, destination_filesystem=pafs.LocalFileSystem())
    return local, True


@contextmanager
def lens_finder_model(store: Lake, device: str):
    """(model, checkpoint spec) of the published lens finder on ``device``; a temporary download
    from an S3 lake is removed afterwards."""
    folder, temporary = checkpoint_dir(store)
    try:
        yield load_checkpoint(folder, "best", device=device)
    finally:
        if temporary:
            shutil.rmtree(folder, ignore_errors=True)


def _score_batches(store: Lake, group: str, table: str, partition: dict, meta: list[str], image_column: str, kind: str, model, spec, device):
    """Scored record batches of one input partition (stamps streamed 256 at a time)."""
    batch_size = SCORE_BATCH.get(device, 16)
    for batch in store.iter_batches(group, table, columns=meta + [image_column], batch_size=256, partition=partition):
        if batch.num_rows == 0:
            continue
        images = from_tensor_column(batch.column(image_column), name=image_column)
        scores, valid, reason, members = score_with_members(model, spec, images, device=device, batch_size=batch_size)
        if kind == "injection":
            # a failed render holds the bare host: it is no lens, so it is never scored as one
            failed = ~batch.column("success").to_numpy(zero_copy_only=False).astype(bool)
            valid = valid & ~failed
            reason = np.where(failed, "injection_failed", np.asarray(reason, dtype=object))
        cols = {name: batch.column(name) for name in meta}
        cols["kind"] = pa.array([kind] * batch.num_rows)
        cols["score"] = pa.array(np.where(valid, scores, np.nan), pa.float64(), mask=~valid)
        for name, member in members.items():  # a stacked ensemble's members, compared in the report
            cols[MEMBER_SCORE_PREFIX + name] = pa.array(np.where(valid, member, np.nan), pa.float64(), mask=~valid)
        cols["valid"] = pa.array(valid)
        cols["invalid_reason"] = pa.array(np.asarray(reason, dtype=object).astype(str))
        yield pa.RecordBatch.from_pydict(cols)


def _commit_scores(store: Lake, table: str, partition: dict, batches, spec, device: str) -> dg.MaterializeResult:
    """Commit one partition of scores and describe it (rows, unscorable rows, checkpoint, device)."""
    first = next(batches, None)
    if first is None:
        raise dg.Failure(description=f"no stamps to score in partition {partition} of {table}'s input", allow_retries=False)
    info = store.write_table(GROUP, table, itertools.chain([first], batches), schema=first.schema, partition=partition)
    part = store.read_table(GROUP, table, partition=partition, columns=["kind", "valid"])
    n_invalid = int((~part.column("valid").to_numpy(zero_copy_only=False)).sum())
    return table_result(store, info.uri, first.schema, info.rows, {
        "rows_by_kind": dg.MetadataValue.json({str(d["values"]): int(d["counts"]) for d in part.column("kind").value_counts().to_pylist()}),
        "n_unscorable": n_invalid, "checkpoint_version": spec.data_version, "device": device,
        "dagster/partition_row_count": dg.MetadataValue.int(info.rows)})


@dg.asset(key_prefix=[GROUP], group_name=GROUP, partitions_def=sweep_partitions, deps=[lens_finder, cutouts], kinds={"pytorch", "parquet"}, owners=OWNERS, code_version="2")
def cutout_scores(context: dg.AssetExecutionContext, lake: LakeResource, compute: ComputeResource) -> dg.MaterializeResult:
    """Lens-finder scores of one sweep file's cutouts (its whole negative pool, its positives, every
    split), streamed in batches with the checkpoint's saved preprocessing spec; rows that could not
    be scored are kept with ``valid = false`` and a reason, never scored as zero."""
    store = lake.lake()
    device = compute.torch_device()
    partition = {"sweep_file": context.partition_key}
    with lens_finder_model(store, device) as (model, spec):
        batches = _score_batches(store, IMAGING, "cutouts", partition, CUTOUT_META, "image", "cutout", model, spec, device)
        return _commit_scores(store, "cutout_scores", partition, batches, spec, device)


@dg.asset(key_prefix=[GROUP], group_name=GROUP, partitions_def=injection_batches, deps=[lens_finder, injection_bank], kinds={"pytorch", "parquet"}, owners=OWNERS, code_version="2")
def injection_scores(context: dg.AssetExecutionContext, lake: LakeResource, compute: ComputeResource) -> dg.MaterializeResult:
    """Lens-finder scores of one injection batch: every injection (``kind = injection``; a failed
    render is unscorable) and its paired control, the same host without the arc (``kind = control``)."""
    store = lake.lake()
    device = compute.torch_device()
    partition = {"injection_batch": context.partition_key}
    with lens_finder_model(store, device) as (model, spec):
        batches = itertools.chain(*(
            _score_batches(store, INJECTION, "injection_bank", partition, INJECTION_META, column, kind, model, spec, device)
            for column, kind in (("image", "injection"), ("control", "control"))
        ))
        return _commit_scores(store, "injection_scores", partition, batches, spec, device)


def _cutout_scores(store: Lake) -> pa.Table:
    return store.read_table(GROUP, "cutout_scores")


def _injection_rows(store: Lake, kind: str) -> pa.Table:
    """Injection scores of one kind ('injection' or 'control') over every batch."""
    return store.read_table(GROUP, "injection_scores", filter=pc.field("kind") == kind)


def held_out_negatives(store: Lake) -> pa.Table:
    """Scores of negatives the lens finder never saw: the test split, and every pool negative that
    is not in the training catalog. Val negatives of the catalog chose the best epoch and ran the
    gates, so they are not held out."""
    s = _cutout_scores(store)
    unseen = pc.or_(pc.equal(s.column("split"), "test"), pc.invert(pc.fill_null(s.column("in_training_catalog"), False)))
    return s.filter(pc.and_(pc.equal(s.column("label"), 0), unseen))


@dg.asset(key_prefix=[GROUP], group_name=GROUP, deps=[cutout_scores], kinds={"parquet"}, owners=OWNERS, code_version="1")
def thresholds(context: dg.AssetExecutionContext, lake: LakeResource) -> dg.MaterializeResult:
    """Score thresholds from held-out negatives at target false-positive rates (1e-2, 1e-3, 1e-4)
    and at Paper IV's top-0.01-percentile cut, each with its number of valid negatives and a
    bootstrap 68% interval; targets the sample cannot resolve are flagged, not invented."""
    store = lake.lake()
    table = thresholds_from_negatives(held_out_negatives(store), fixed_scores=(0.5,))
    info = store.write_table(GROUP, "thresholds", table)
    return table_result(store, info.uri, table.schema, table.num_rows, {"usable": dg.MetadataValue.json([n for n, _ in usable_thresholds(table)])})


THETA_E_CENTRES = [0.5 + 0.25 * i for i in range(11)]
Z_L_CENTRES = [round(0.1 + 0.1 * i, 1) for i in range(9)]
MARGINALS = {
    "psf_fwhm_r": ("PSF FWHM r [arcsec]", [0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.2]),
    "depth_mag_r": ("5σ depth r [AB]", [22.5, 23.0, 23.5, 24.0, 24.5, 25.0]),
    "source_mag_r": ("source r (unlensed) [AB]", [22.0, 23.0, 24.0, 25.0, 26.0]),
    "lensed_mag_r": ("lensed r [AB]", [18.0, 20.0, 21.0, 22.0, 23.0, 24.0, 26.0]),
    "arc_snr": ("arc S/N (r)", [0.0, 2.0, 5.0, 10.0, 20.0, 50.0, 1e6]),
}


def _injections(store: Lake) -> pa.Table:
    inj = _injection_rows(store, "injection")
    return inj.append_column("source_mag_r", inj.column("src_mag_r"))


@dg.asset(key_prefix=[GROUP], group_name=GROUP, deps=[thresholds, injection_scores], kinds={"parquet"}, owners=OWNERS, code_version="1")
def selection_function(context: dg.AssetExecutionContext, lake: LakeResource) -> dg.MaterializeResult:
    """C(θ_E, z_l) for each threshold: n_injected, n_failed (excluded from the denominator and
    counted), n_detected, completeness with Jeffreys 68%/95% intervals, cells below the minimum
    count flagged; marginal completeness against PSF FWHM, depth, source and lensed magnitude and
    arc S/N; heatmaps and marginal curves attached as images and stored as PNG in the lake."""
    store = lake.lake()
    thr = store.read_table(GROUP, "thresholds")
    inj = _injections(store)
    sel = selection_table(inj, thr, theta_e_centres=THETA_E_CENTRES, z_l_centres=Z_L_CENTRES)
    sel = sel.append_column("theta_e_arcsec", sel.column("theta_e_centre")).append_column("z_l", sel.column("z_l_centre"))
    md = {}
    for name, _ in usable_thresholds(thr):
        png = selection_heatmap_png(sel, name)
        uri = store.write_bytes(GROUP, "selection_function", f"heatmap_{_safe(name)}.png", png, partition={"artifact": "figures"})
        md[f"heatmap {name}"] = dg.MetadataValue.md(f"![C(θE, zl) at {name}](data:image/png;base64,{_b64(png)})")
        md[f"heatmap {name} uri"] = dg.MetadataValue.path(uri)
    marg_tables = []
    for by, (label, edges) in MARGINALS.items():
        m = marginal_completeness(inj, thr, by, edges)
        png = marginal_png(m, label)
        store.write_bytes(GROUP, "selection_function", f"marginal_{by}.png", png, partition={"artifact": "figures"})
        md[f"marginal {by}"] = dg.MetadataValue.md(f"![{label}](data:image/png;base64,{_b64(png)})")
        marg_tables.append(m)
    store.write_table(GROUP, "selection_marginals", pa.concat_tables(marg_tables, promote_options="permissive"))
    # the main table is committed last: its presence means every figure and marginal exists
    info = store.write_table(GROUP, "selection_function", sel)
    nonempty = int(pc.sum(pc.greater(sel.column("n_valid"), 0)).as_py() or 0)
    return table_result(store, info.uri, sel.schema, sel.num_rows, {**md, "nonempty_cells": nonempty})


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


def _b64(png: bytes) -> str:
    import base64

    return base64.b64encode(png).decode()


@dg.asset_check(asset=selection_function, blocking=False, description="cells with at least one valid injection cover the grid (warning when a cell is empty)")
def selection_function_coverage(lake: LakeResource) -> dg.AssetCheckResult:
    sel = lake.lake().read_table(GROUP, "selection_function", columns=["threshold_name", "n_valid", "sufficient"])
    first = sel.column("threshold_name")[0].as_py() if sel.num_rows else None
    one = sel.filter(pc.equal(sel.column("threshold_name"), first)) if first else sel
    n = one.column("n_valid").to_numpy()
    return dg.AssetCheckResult(
        passed=bool(n.size) and bool((n > 0).all()),
        severity=dg.AssetCheckSeverity.WARN,
        metadata={"cells": int(n.size), "nonempty": int((n > 0).sum()), "sufficient": int(pc.sum(one.column("sufficient")).as_py() or 0)},
    )


@dg.asset(key_prefix=[GROUP], group_name=GROUP, deps=[thresholds], kinds={"parquet"}, owners=OWNERS, code_version="1")
def real_lens_recall(context: dg.AssetExecutionContext, lake: LakeResource) -> dg.MaterializeResult:
    """Recall of known lenses in the test split by tier at each threshold with Jeffreys intervals
    (fails if any of them was seen in training); false-positive rate by N2 confuser category."""
    store = lake.lake()
    thr = store.read_table(GROUP, "thresholds")
    s = _cutout_scores(store)
    real = s.filter(pc.equal(s.column("label"), 1))
    trained = store.read_table(TRAINING, "training_set", columns=["object_id"]).column("object_id")
    table = recall_table(real, thr, trained, split="test")
    fpr = fpr_by_confuser(held_out_negatives(store), thr)
    store.write_table(GROUP, "fpr_by_confuser", fpr)
    info = store.write_table(GROUP, "real_lens_recall", table)
    return table_result(store, info.uri, table.schema, table.num_rows, {"fpr_by_confuser_rows": fpr.num_rows})


@dg.asset(key_prefix=[GROUP], group_name=GROUP, deps=[selection_function, real_lens_recall], kinds={"html"}, owners=OWNERS, code_version="1")
def evaluation_report(context: dg.AssetExecutionContext, lake: LakeResource) -> dg.MaterializeResult:
    """One static HTML page in the lake: ROC curves, the selection function and its marginals,
    the recall table, the shortcut-gate results and mosaics of example cutouts."""
    store = lake.lake()
    thr = store.read_table(GROUP, "thresholds")
    inj = _injections(store)
    ctrl = _injection_rows(store, "control")
    cut = _cutout_scores(store)
    neg = held_out_negatives(store)
    real = cut.filter(pc.and_(pc.equal(cut.column("label"), 1), pc.equal(cut.column("split"), "test")))
    curves = {"injections vs paired controls": roc_inputs(inj, ctrl), "held-out negatives vs test-split known lenses": roc_inputs(real, neg)}
    usable = usable_thresholds(thr)
    sel = store.read_table(GROUP, "selection_function")
    heatmaps = {name: store.read_bytes(GROUP, "selection_function", f"heatmap_{_safe(name)}.png", partition={"artifact": "figures"}) for name, _ in usable}
    marg = store.read_table(GROUP, "selection_marginals")
    marginals = {}
    for by, (label, _) in MARGINALS.items():
        marginals[label] = (
            store.read_bytes(GROUP, "selection_function", f"marginal_{by}.png", partition={"artifact": "figures"}),
            marg.filter(pc.equal(marg.column("by"), by)),
        )
    ckpt = store.read_table(TRAINING, "lens_finder").to_pylist()[0]
    metrics = json.loads(ckpt["metrics"])
    gates = json.loads(metrics.get("gates", "[]")) if isinstance(metrics.get("gates"), str) else metrics.get("gates", [])
    gates = [{k: g[k] for k in ("name", "value", "threshold", "passed")} for g in gates if isinstance(g, dict) and g.get("value") is not None]
    calibration = metrics.get("calibration") or None
    mosaics = {}
    if usable:
        name, value = usable[0]
        ex = example_ids(inj, neg, value)
        bank_images = _injection_images(store, ex.get("true positives", []) + ex.get("missed injections", []))
        for caption, ids in ex.items():
            if not ids:
                continue
            if caption == "highest-scoring negatives":
                (stamps,), _ = load_stamps(store, ids)
            else:
                stamps = np.stack([bank_images[i] for i in ids])
            mosaics[f"{caption} ({name})"] = mosaic_png(stamps, [str(i) for i in ids])
    html = build_report(
        roc=roc_png(curves),
        thresholds=thr,
        selection=sel,
        selection_heatmaps=heatmaps,
        marginals=marginals,
        recall=store.read_table(GROUP, "real_lens_recall"),
        fpr_by_confuser=store.read_table(GROUP, "fpr_by_confuser"),
        gates=gates,
        calibration=calibration,
        reliability=reliability_png(calibration) if calibration else None,
        model_choice=metrics.get("ensemble") or None,
        comparison=model_comparison(inj, ctrl, real, neg),
        mosaics=mosaics,
        provenance={"checkpoint": ckpt["checkpoint_uri"], "checkpoint version": ckpt["data_version"], "lake": store.uri},
    )
    uri = store.write_bytes(GROUP, "evaluation_report", "report.html", html.encode("utf-8"))
    index = pa.table({"uri": [uri], "bytes": [len(html.encode("utf-8"))], "figures": [html.count("<img")]})
    store.write_table(GROUP, "evaluation_report", index)
    return dg.MaterializeResult(metadata={"dagster/uri": dg.MetadataValue.path(uri), "figures": html.count("<img"), "report": dg.MetadataValue.url(f"file://{uri}") if not store.is_s3 else uri})


def _injection_images(store: Lake, injection_ids) -> dict:
    if not injection_ids:
        return {}
    ids = pa.array(list(injection_ids), pa.int64())
    tbl = store.read_table(INJECTION, "injection_bank", columns=["injection_id", "image"], filter=pc.field("injection_id").isin(ids))
    imgs = from_tensor_column(tbl.column("image"))
    return dict(zip(tbl.column("injection_id").to_pylist(), imgs))


evaluation_defs = dg.Definitions(
    assets=[cutout_scores, injection_scores, thresholds, selection_function, real_lens_recall, evaluation_report],
    asset_checks=[selection_function_coverage],
)
