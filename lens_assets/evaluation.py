"""Evaluation stage: the cutouts' scores (per sweep file, like their input), thresholds from
held-out negatives, real-lens recall, and the static HTML evaluation report (the selection
function, detection model and populations are the selection stage's, ``lens_assets/selection.py``;
the injections' scores are published with the bank that renders them, ``lens_assets/injection.py``).

The score tables are large: they stream from the lens finder into their staged partitions and
are read downstream as lazy datasets. Scoring reads only the
published lens finder, which is published only after its blocking gates passed.
"""

import json
import posixpath

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from darkhaloscope.evaluation import (
    fpr_by_confuser as fpr_table,
)
from darkhaloscope.evaluation import (
    real_lens_recall as recall_table,
)
from darkhaloscope.evaluation import (
    thresholds_from_negatives,
    usable_thresholds,
)
from darkhaloscope.evaluation.ablation import ABLATION_PAGE
from darkhaloscope.evaluation.injection_scoring import injection_images
from darkhaloscope.evaluation.products import FIGURES, report_html
from darkhaloscope.evaluation.scoring import (
    CUTOUT_META,
    held_out_negatives,
    injection_rows,
    published_lens_finder,
    score_batches,
)
from darkhaloscope.imaging.cutout_table import load_stamps
from darkhaloscope.lensing.bank import table_conditioning
from darkhaloscope.search.gallery import GALLERY_FILE
from darkhaloscope.search.grades import published_graded_lens_ids
from resources import ComputeResource, LakeResource, SurveyResource
from table_registry import (
    CANDIDATE_GALLERY,
    CUTOUT_SCORES,
    CUTOUTS,
    EVALUATION_REPORT,
    FPR_BY_CONFUSER,
    INJECTION_PLAN,
    INJECTION_SCORES,
    LENS_FINDER,
    LENS_FORECAST,
    REAL_LENS_RECALL,
    REALISM_ABLATION,
    REALISM_PROBE,
    SELECTION_CALIBRATION,
    SELECTION_CLOSURE,
    SELECTION_FUNCTION,
    SELECTION_MARGINALS,
    SELECTION_MODEL,
    SELECTION_POPULATIONS,
    THRESHOLDS,
    TRAINING_SET,
    VISUAL_GRADES,
    Table,
)
from table_registry import evaluation as checks

from .closure import hidden_hosts_among, lens_forecast, selection_closure
from .selection import selection_function, selection_model, selection_populations
from .shared.partitions import per_file_backfill
from .shared.publish import (
    GATE_COLUMNS,
    Publish,
    figures_markdown,
    file_link,
    inputs,
    lake_asset,
    rows_table,
    staged_table,
)
from .shared.scores import score_publication, write_scores

#: Fixed score cuts the thresholds table carries beside the false-positive rates.
FIXED_SCORES = (0.5, 0.9)


def _key(table: Table) -> dg.AssetKey:
    return dg.AssetKey(list(table.key))


SCORE_ASSET = dict(code_version="4", kinds={"pytorch", "parquet"}, pool="gpu", deps=[_key(LENS_FINDER)])


@lake_asset(
    CUTOUT_SCORES, ins={"cutouts": dg.AssetIn(list(CUTOUTS.key))}, backfill_policy=per_file_backfill(), **SCORE_ASSET
)
def cutout_scores(
    context: dg.AssetExecutionContext, lake: LakeResource, compute: ComputeResource, cutouts: ds.Dataset
) -> Publish:
    """Lens-finder scores of a sweep file's cutouts (its whole negative pool, its positives, every
    split), streamed in batches with the checkpoint's saved preprocessing spec; rows that could not
    be scored are kept with ``valid = false`` and a reason, never scored as zero. A run covers one
    sweep file or several, with one load of the lens finder."""
    device, names = compute.torch_device(), list(context.partition_keys)
    staged = [staged_table(context, CUTOUT_SCORES, n) for n in names]
    with published_lens_finder(lake.lake().table(*LENS_FINDER.key), device) as (model, spec):
        for name, part in zip(names, staged):
            mine = cutouts if len(names) == 1 else cutouts.filter(ds.field(CUTOUTS.partitioned_by) == name)
            write_scores(part, score_batches(mine, CUTOUT_META, "image", "cutout", model, spec, device))
    return score_publication(CUTOUT_SCORES, checks.CUTOUT_SCORES_CONTRACT, staged, spec, device)


@lake_asset(
    THRESHOLDS,
    code_version="4",
    kinds={"parquet"},
    deps=[_key(VISUAL_GRADES)],
    ins={"cutout_scores": dg.AssetIn(list(CUTOUT_SCORES.key))},
)
def thresholds(
    context: dg.AssetExecutionContext, lake: LakeResource, survey: SurveyResource, cutout_scores: ds.Dataset
) -> Publish:
    """Score thresholds from held-out negatives (less those visually graded as lenses) at target
    false-positive rates (1e-2, 1e-3, 1e-4), at Paper IV's top-0.01-percentile cut and at fixed
    scores (0.5, 0.9), each with its number of valid negatives and a bootstrap 68% interval; targets
    the sample cannot resolve are flagged, not invented. On the mock, ``n_hidden_in_negatives``
    counts the negatives that host a hidden lens (0 by construction: the closure reserve keeps them
    out of the negatives), and a blocking check holds it to 0."""
    lenses = published_graded_lens_ids(lake.lake().table(*VISUAL_GRADES.key))
    negatives = held_out_negatives(cutout_scores.to_table(), lenses)
    # counted once the negatives are chosen: the count never changes which negatives are used
    n_hidden = hidden_hosts_among(survey, negatives.column("object_id"))
    table = thresholds_from_negatives(negatives, fixed_scores=FIXED_SCORES, n_hidden_in_negatives=n_hidden)
    md = {
        "usable": [n for n, _ in usable_thresholds(table)],
        "negatives_graded_lenses_excluded": int(lenses.size),
        "n_hidden_in_negatives": n_hidden,
    }
    audit = checks.THRESHOLDS_NO_HIDDEN_LENS.outcome(
        not n_hidden, {"n_hidden_in_negatives": n_hidden}, f"{n_hidden} threshold negatives host a hidden lens"
    )
    return Publish({THRESHOLDS: table}, audits={THRESHOLDS: [audit]}, metadata={THRESHOLDS: md})


@lake_asset(
    REAL_LENS_RECALL,
    FPR_BY_CONFUSER,
    code_version="3",
    kinds={"parquet"},
    deps=[_key(VISUAL_GRADES)],
    ins=inputs(thresholds=THRESHOLDS, cutout_scores=CUTOUT_SCORES, training_set=TRAINING_SET),
)
def real_lens_recall(
    context: dg.AssetExecutionContext,
    lake: LakeResource,
    thresholds: pa.Table,
    cutout_scores: ds.Dataset,
    training_set: ds.Dataset,
) -> Publish:
    """Recall of known lenses in the test split by tier at each threshold with Jeffreys intervals
    (fails if any of them was seen in training); false-positive rate by N2 confuser category."""
    scores = cutout_scores.to_table()
    recall = recall_table(
        scores.filter(pc.equal(scores.column("label"), 1)),
        thresholds,
        training_set.to_table(columns=["object_id"]).column("object_id"),
        split="test",
    )
    fpr = fpr_table(
        held_out_negatives(scores, published_graded_lens_ids(lake.lake().table(*VISUAL_GRADES.key))), thresholds
    )
    return Publish({REAL_LENS_RECALL: recall, FPR_BY_CONFUSER: fpr})


@lake_asset(
    EVALUATION_REPORT,
    code_version="10",
    kinds={"html"},
    deps=[_key(VISUAL_GRADES)],
    ins=inputs(
        thresholds=THRESHOLDS,
        selection_function=SELECTION_FUNCTION,
        selection_marginals=SELECTION_MARGINALS,
        real_lens_recall=REAL_LENS_RECALL,
        fpr_by_confuser=FPR_BY_CONFUSER,
        cutout_scores=CUTOUT_SCORES,
        injection_scores=INJECTION_SCORES,
        injection_plan=INJECTION_PLAN,
        cutouts=CUTOUTS,
        lens_finder=LENS_FINDER,
        selection_closure=SELECTION_CLOSURE,
        lens_forecast=LENS_FORECAST,
        selection_populations=SELECTION_POPULATIONS,
        selection_model=SELECTION_MODEL,
        selection_calibration=SELECTION_CALIBRATION,
        realism_probe=REALISM_PROBE,
    ),
)
def evaluation_report(
    context: dg.AssetExecutionContext,
    lake: LakeResource,
    thresholds: pa.Table,
    selection_function: pa.Table,
    selection_marginals: pa.Table,
    real_lens_recall: pa.Table,
    fpr_by_confuser: pa.Table,
    cutout_scores: ds.Dataset,
    injection_scores: ds.Dataset,
    injection_plan: pa.Table,
    cutouts: ds.Dataset,
    lens_finder: pa.Table,
    selection_closure: pa.Table,
    lens_forecast: pa.Table,
    selection_populations: pa.Table,
    selection_model: pa.Table,
    selection_calibration: pa.Table,
    realism_probe: pa.Table,
) -> Publish:
    """One static HTML page (in the files folder beside its index row): ROC curves and their areas
    with bootstrap intervals, the selection function and its marginals, the recall table, the lens
    finder's gates, the realism probe, mosaics of example cutouts and a link to the search's candidate gallery."""
    store = lake.lake()
    cut = cutout_scores.to_table()
    real_test = cut.filter(pc.and_(pc.equal(cut.column("label"), 1), pc.equal(cut.column("split"), "test")))
    html = report_html(
        thresholds=thresholds,
        selection=selection_function,
        marginals=selection_marginals,
        figure=lambda name: store.read_bytes(*SELECTION_FUNCTION.key, name, partition=FIGURES),
        recall=real_lens_recall,
        fpr=fpr_by_confuser,
        injections=injection_rows(injection_scores, "injection"),
        controls=injection_rows(injection_scores, "control"),
        held_out=held_out_negatives(cut, published_graded_lens_ids(store.table(*VISUAL_GRADES.key))),
        real_test=real_test,
        cutout_stamps=lambda ids: load_stamps(cutouts, ids)[0][0],
        injection_stamps=lambda ids: injection_images(injection_plan, cutouts, ids),
        lens_finder_row=lens_finder.to_pylist()[0],
        lake_uri=store.uri,
        gallery_uri=_beside_report(store, CANDIDATE_GALLERY, GALLERY_FILE),
        conditioning=table_conditioning(selection_function),
        selection_tables={
            t.name: v
            for t, v in (
                (SELECTION_POPULATIONS, selection_populations),
                (SELECTION_MODEL, selection_model),
                (SELECTION_CALIBRATION, selection_calibration),
                (SELECTION_CLOSURE, selection_closure),
                (LENS_FORECAST, lens_forecast),
            )
        },
        realism=realism_probe,
        ablation_uri=_beside_report(store, REALISM_ABLATION, ABLATION_PAGE),
    ).encode("utf-8")
    staged = staged_table(context, EVALUATION_REPORT)
    staged.write_bytes("report.html", html)
    uri = staged.published_uri("report.html")
    staged.write(pa.table({"uri": [uri], "bytes": [len(html)], "figures": [html.count(b"<img")]}))
    md = {
        "figures": html.count(b"<img"),
        "report": file_link(uri),
        "report_figures": figures_markdown(html.decode("utf-8")),
        "gates": rows_table(json.loads(lens_finder.column("metrics")[0].as_py()).get("gates", []), GATE_COLUMNS),
    }
    return Publish({EVALUATION_REPORT: staged}, metadata={EVALUATION_REPORT: md})


def _beside_report(store, table, name: str) -> str:
    """Where ``table`` publishes its file ``name``, relative to the report's folder (a link the
    report gives, not a read: a copied lake keeps it)."""
    return posixpath.relpath(
        f"{store.table(*table.key).files_location()}/{name}", store.table(*EVALUATION_REPORT.key).files_location()
    )


evaluation_defs = dg.Definitions(
    assets=[
        cutout_scores,
        thresholds,
        selection_function,
        selection_model,
        selection_populations,
        selection_closure,
        lens_forecast,
        real_lens_recall,
        evaluation_report,
    ]
)
