"""Evaluation stage: scores (per sweep file and per injection batch, like their inputs), thresholds
from held-out negatives, the selection function C(θ_E, z_l) on the injection plan's grid,
real-lens recall, and the static HTML evaluation report.

The score tables are large: they stream from the lens finder into their staged partitions
through the lake resource and are read downstream as lazy datasets. Scoring reads only the
published lens finder, which is published only after its blocking gates passed.
"""

import itertools

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import dagster as dg

from darkhaloscope import audits as au
from darkhaloscope.contracts import (
    EVALUATION_REPORT, FPR_BY_CONFUSER, REAL_LENS_RECALL, SCORES, SELECTION_FUNCTION, SELECTION_MARGINALS, THRESHOLDS,
)
from darkhaloscope.errors import InputError
from darkhaloscope.evaluation import fpr_by_confuser as fpr_table, real_lens_recall as recall_table, thresholds_from_negatives, usable_thresholds
from darkhaloscope.evaluation.products import FIGURES, report_html, selection_products
from darkhaloscope.evaluation.scoring import CUTOUT_META, INJECTION_META, held_out_negatives, injection_rows, published_lens_finder, score_batches
from darkhaloscope.imaging.cutout_table import load_stamps
from darkhaloscope.lensing.bank import plan_grid
from darkhaloscope.search.gallery import GALLERY_FILE, GALLERY_TABLE
from darkhaloscope.search.grades import published_graded_lens_ids
from darkhaloscope.stamps import from_tensor_column
from resources import ComputeResource, LakeResource

from .common import OWNERS, as_metadata, check_specs, fail_fast_on_bad_input, gate
from .imaging import CUTOUTS_KEY
from .injection import BANK_KEY, PLAN_KEY
from .partitions import injection_batches, sweep_partitions
from .training import VISUAL_GRADES

GROUP = "evaluation"
LENS_FINDER = dg.AssetKey(["training", "lens_finder"])
TRAINING_SET = dg.AssetKey(["training", "training_set"])
CUT_SCORES, INJ_SCORES, THR = (GROUP, "cutout_scores"), (GROUP, "injection_scores"), (GROUP, "thresholds")
SEL, MARG, RECALL, FPR, REPORT = (GROUP, "selection_function"), (GROUP, "selection_marginals"), (GROUP, "real_lens_recall"), (GROUP, "fpr_by_confuser"), (GROUP, "evaluation_report")


SCORE_ASSET = dict(group_name=GROUP, kinds={"pytorch", "parquet"}, owners=OWNERS, code_version="3", pool="gpu", deps=[LENS_FINDER])


@dg.asset(key=list(CUT_SCORES), partitions_def=sweep_partitions, ins={"cutouts": dg.AssetIn(list(CUTOUTS_KEY))},
          check_specs=check_specs(CUT_SCORES, (au.CUTOUT_SCORES_CONTRACT,)), **SCORE_ASSET)
def cutout_scores(context: dg.AssetExecutionContext, lake: LakeResource, compute: ComputeResource, cutouts: ds.Dataset):
    """Lens-finder scores of one sweep file's cutouts (its whole negative pool, its positives, every
    split), streamed in batches with the checkpoint's saved preprocessing spec; rows that could not
    be scored are kept with ``valid = false`` and a reason, never scored as zero."""
    device = compute.torch_device()
    with fail_fast_on_bad_input(), published_lens_finder(lake.lake(), device) as (model, spec):
        staged = lake.stage(context).table(*CUT_SCORES, {"sweep_file": context.partition_key})
        _write_scores(staged, score_batches(cutouts, CUTOUT_META, "image", "cutout", model, spec, device))
    yield from gate(context, {CUT_SCORES: ([staged], _score_audits(au.CUTOUT_SCORES_CONTRACT, staged))}, {CUT_SCORES: _score_metadata(staged, spec, device)})


@dg.asset(key=list(INJ_SCORES), partitions_def=injection_batches, ins={"injection_bank": dg.AssetIn(list(BANK_KEY))},
          check_specs=check_specs(INJ_SCORES, (au.INJECTION_SCORES_CONTRACT,)), **SCORE_ASSET)
def injection_scores(context: dg.AssetExecutionContext, lake: LakeResource, compute: ComputeResource, injection_bank: ds.Dataset):
    """Lens-finder scores of one injection batch: every injection (``kind = injection``; a failed
    render is unscorable) and its paired control, the same host without the arc (``kind = control``)."""
    device = compute.torch_device()
    with fail_fast_on_bad_input(), published_lens_finder(lake.lake(), device) as (model, spec):
        staged = lake.stage(context).table(*INJ_SCORES, {"injection_batch": context.partition_key})
        _write_scores(staged, itertools.chain(*(score_batches(injection_bank, INJECTION_META, column, kind, model, spec, device)
                                                for column, kind in (("image", "injection"), ("control", "control")))))
    yield from gate(context, {INJ_SCORES: ([staged], _score_audits(au.INJECTION_SCORES_CONTRACT, staged))}, {INJ_SCORES: _score_metadata(staged, spec, device)})


def _write_scores(staged, batches) -> None:
    first = next(batches, None)
    if first is None:
        raise InputError(f"no stamps to score for {staged.label}")
    staged.write(itertools.chain([first], batches), schema=first.schema)


def _score_audits(audit: au.Audit, staged) -> list[au.AuditOutcome]:
    contract = au.contract_audit(audit, staged.dataset(), SCORES)
    return [contract if not contract.passed else au.scores_audit(audit, staged.dataset())]


def _score_metadata(staged, spec, device: str) -> dict:
    part = staged.read(columns=["kind", "valid"])
    kinds = {str(d["values"]): int(d["counts"]) for d in part.column("kind").value_counts().to_pylist()}
    n_invalid = int((~part.column("valid").to_numpy(zero_copy_only=False)).sum())
    return as_metadata({"rows_by_kind": kinds, "n_unscorable": n_invalid, "checkpoint_version": spec.data_version, "device": device})


@dg.asset(key=list(THR), group_name=GROUP, kinds={"parquet"}, owners=OWNERS, code_version="3", deps=[VISUAL_GRADES],
          ins={"cutout_scores": dg.AssetIn(list(CUT_SCORES))}, check_specs=check_specs(THR, (au.THRESHOLDS_CONTRACT,)))
def thresholds(context: dg.AssetExecutionContext, lake: LakeResource, cutout_scores: ds.Dataset):
    """Score thresholds from held-out negatives (less those visually graded as lenses) at target
    false-positive rates (1e-2, 1e-3, 1e-4) and at Paper IV's top-0.01-percentile cut, each with
    its number of valid negatives and a bootstrap 68% interval; targets the sample cannot resolve
    are flagged, not invented."""
    lenses = published_graded_lens_ids(lake.lake())
    table = thresholds_from_negatives(held_out_negatives(cutout_scores.to_table(), lenses), fixed_scores=(0.5,))
    staged = lake.stage(context).table(*THR)
    staged.write(table)
    md = as_metadata({"usable": [n for n, _ in usable_thresholds(table)], "negatives_graded_lenses_excluded": int(lenses.size)})
    yield from gate(context, {THR: ([staged], [au.contract_audit(au.THRESHOLDS_CONTRACT, staged.read(), THRESHOLDS)])}, {THR: md})


@dg.multi_asset(
    outs={"selection_function": dg.AssetOut(key=list(SEL), kinds={"parquet"}, owners=OWNERS, code_version="4",
                                            description="C(θ_E, z_l) per threshold on the injection plan's grid, with heatmaps"),
          "selection_marginals": dg.AssetOut(key=list(MARG), kinds={"parquet"}, owners=OWNERS, code_version="5",
                                             description="completeness against PSF, depth, source and lensed magnitude, arc S/N")},
    ins={"thresholds": dg.AssetIn(list(THR)), "injection_scores": dg.AssetIn(list(INJ_SCORES)), "injection_plan": dg.AssetIn(list(PLAN_KEY))},
    group_name=GROUP,
    check_specs=check_specs(SEL, (au.SELECTION_FUNCTION_CONTRACT, au.SELECTION_FUNCTION_COVERAGE)) + check_specs(MARG, (au.SELECTION_MARGINALS_CONTRACT,)),
)
def selection_function(context: dg.AssetExecutionContext, lake: LakeResource, thresholds: pa.Table, injection_scores: ds.Dataset, injection_plan: pa.Table):
    """C(θ_E, z_l) for each threshold on the grid the injection plan was built on: n_injected,
    n_failed (excluded from the denominator and counted), n_detected, completeness with Jeffreys
    68%/95% intervals on the injections' effective number (n_effective: a host's injections share
    their outcome), cells below the minimum count flagged; marginal completeness; heatmaps and
    marginal curves stored as PNG beside the table (``artifact=figures``)."""
    with fail_fast_on_bad_input():
        theta_e, z_l = plan_grid(injection_plan)
        sel, marg, figures = selection_products(injection_rows(injection_scores, "injection"), thresholds, theta_e, z_l)
    stage = lake.stage(context)
    staged_sel, staged_marg = stage.table(*SEL), stage.table(*MARG)
    for name, png in figures.items():
        staged_sel.write_bytes(name, png, subfolder=FIGURES)
    staged_sel.write(sel)
    staged_marg.write(marg)
    sel_audits = [au.contract_audit(au.SELECTION_FUNCTION_CONTRACT, staged_sel.read(), SELECTION_FUNCTION), au.nonempty_cells_audit(au.SELECTION_FUNCTION_COVERAGE, sel)]
    marg_audits = [au.contract_audit(au.SELECTION_MARGINALS_CONTRACT, staged_marg.read(), SELECTION_MARGINALS)]
    md = {"nonempty_cells": int(pc.sum(pc.greater(sel.column("n_valid"), 0)).as_py() or 0), "figures": dg.MetadataValue.json(sorted(figures))}
    yield from gate(context, {SEL: ([staged_sel], sel_audits), MARG: ([staged_marg], marg_audits)}, {SEL: md})


@dg.multi_asset(
    outs={"real_lens_recall": dg.AssetOut(key=list(RECALL), kinds={"parquet"}, owners=OWNERS, code_version="3",
                                          description="recall of test-split known lenses by tier and threshold"),
          "fpr_by_confuser": dg.AssetOut(key=list(FPR), kinds={"parquet"}, owners=OWNERS, code_version="3",
                                         description="false-positive rate of held-out negatives by N2 confuser category")},
    ins={"thresholds": dg.AssetIn(list(THR)), "cutout_scores": dg.AssetIn(list(CUT_SCORES)), "training_set": dg.AssetIn(TRAINING_SET)},
    deps=[VISUAL_GRADES], group_name=GROUP,
    check_specs=check_specs(RECALL, (au.REAL_LENS_RECALL_CONTRACT,)) + check_specs(FPR, (au.FPR_BY_CONFUSER_CONTRACT,)),
)
def real_lens_recall(context: dg.AssetExecutionContext, lake: LakeResource, thresholds: pa.Table, cutout_scores: ds.Dataset, training_set: ds.Dataset):
    """Recall of known lenses in the test split by tier at each threshold with Jeffreys intervals
    (fails if any of them was seen in training); false-positive rate by N2 confuser category."""
    scores = cutout_scores.to_table()
    with fail_fast_on_bad_input():
        recall = recall_table(scores.filter(pc.equal(scores.column("label"), 1)), thresholds,
                              training_set.to_table(columns=["object_id"]).column("object_id"), split="test")
    fpr = fpr_table(held_out_negatives(scores, published_graded_lens_ids(lake.lake())), thresholds)
    stage = lake.stage(context)
    staged_recall, staged_fpr = stage.table(*RECALL), stage.table(*FPR)
    staged_recall.write(recall)
    staged_fpr.write(fpr)
    yield from gate(context, {RECALL: ([staged_recall], [au.contract_audit(au.REAL_LENS_RECALL_CONTRACT, staged_recall.read(), REAL_LENS_RECALL)]),
                              FPR: ([staged_fpr], [au.contract_audit(au.FPR_BY_CONFUSER_CONTRACT, staged_fpr.read(), FPR_BY_CONFUSER)])})


@dg.asset(
    key=list(REPORT), group_name=GROUP, kinds={"html"}, owners=OWNERS, code_version="4",
    ins={"thresholds": dg.AssetIn(list(THR)), "selection_function": dg.AssetIn(list(SEL)), "selection_marginals": dg.AssetIn(list(MARG)),
         "real_lens_recall": dg.AssetIn(list(RECALL)), "fpr_by_confuser": dg.AssetIn(list(FPR)), "cutout_scores": dg.AssetIn(list(CUT_SCORES)),
         "injection_scores": dg.AssetIn(list(INJ_SCORES)), "injection_bank": dg.AssetIn(list(BANK_KEY)), "cutouts": dg.AssetIn(list(CUTOUTS_KEY)),
         "lens_finder": dg.AssetIn(LENS_FINDER)},
    deps=[VISUAL_GRADES], check_specs=check_specs(REPORT, (au.EVALUATION_REPORT_CONTRACT,)),
)
def evaluation_report(context: dg.AssetExecutionContext, lake: LakeResource, thresholds: pa.Table, selection_function: pa.Table,
                      selection_marginals: pa.Table, real_lens_recall: pa.Table, fpr_by_confuser: pa.Table, cutout_scores: ds.Dataset,
                      injection_scores: ds.Dataset, injection_bank: ds.Dataset, cutouts: ds.Dataset, lens_finder: pa.Table):
    """One static HTML page beside its index row: ROC curves and their areas with bootstrap
    intervals, the selection function and its marginals, the recall table, the lens finder's
    gates, mosaics of example cutouts and a link to the search's candidate gallery."""
    store = lake.lake()
    cut = cutout_scores.to_table()
    real_test = cut.filter(pc.and_(pc.equal(cut.column("label"), 1), pc.equal(cut.column("split"), "test")))
    html = report_html(
        thresholds=thresholds, selection=selection_function, marginals=selection_marginals,
        figure=lambda name: store.read_bytes(*SEL, name, partition=FIGURES), recall=real_lens_recall, fpr=fpr_by_confuser,
        injections=injection_rows(injection_scores, "injection"), controls=injection_rows(injection_scores, "control"),
        held_out=held_out_negatives(cut, published_graded_lens_ids(store)), real_test=real_test, cutout_stamps=lambda ids: load_stamps(cutouts, ids)[0][0],
        injection_stamps=lambda ids: _injection_images(injection_bank, ids), lens_finder_row=lens_finder.to_pylist()[0], lake_uri=store.uri,
        gallery_uri=store.full_uri(f"{store.table_path(*GALLERY_TABLE)}/{GALLERY_FILE}"),
    ).encode("utf-8")
    staged = lake.stage(context).table(*REPORT)
    staged.write_bytes("report.html", html)
    uri = store.full_uri(f"{staged.published_folder}/report.html")
    staged.write(pa.table({"uri": [uri], "bytes": [len(html)], "figures": [html.count(b"<img")]}))
    md = {"figures": html.count(b"<img"), "report": dg.MetadataValue.url(f"file://{uri}") if not store.is_s3 else uri}
    yield from gate(context, {REPORT: ([staged], [au.contract_audit(au.EVALUATION_REPORT_CONTRACT, staged.read(), EVALUATION_REPORT)])}, {REPORT: md})


def _injection_images(bank: ds.Dataset, injection_ids) -> dict:
    if not injection_ids:
        return {}
    tbl = bank.to_table(columns=["injection_id", "image"], filter=pc.field("injection_id").isin(pa.array(list(injection_ids), pa.int64())))
    return dict(zip(tbl.column("injection_id").to_pylist(), from_tensor_column(tbl.column("image"))))


evaluation_defs = dg.Definitions(assets=[cutout_scores, injection_scores, thresholds, selection_function, real_lens_recall, evaluation_report])
