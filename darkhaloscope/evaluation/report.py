"""The static evaluation report: one self-contained HTML page.

Figures are embedded as ``data:image/png;base64`` URIs and the style sheet is inline, so the page
works from S3, a local disk or an e-mail attachment with no other file and no network. Every
``<img>`` has an ``id`` and an ``alt``. Sections that were not supplied are shown as "not
provided" rather than left out, so a missing input is visible to the reader.
"""

from __future__ import annotations

import base64
import html
import json
import math
import re
from typing import Mapping, Sequence

import numpy as np
import pyarrow as pa

from ..errors import InputError
from .realism import PROBE_FOLDS, PROBE_WARN_AUROC
from .thresholds import require_columns, valid_scores

_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:1.5em auto;max-width:1200px;
 color:#222;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ccc;margin-top:1.8em}
h3{font-size:1.0em}
table{border-collapse:collapse;font-size:0.8em;margin:0.5em 0}
th,td{border:1px solid #ccc;padding:2px 6px;text-align:right}th{background:#f2f2f2}
td.s{text-align:left}
.pass{background:#d9f2d9}.fail{background:#f7d4d4}.missing{color:#999;font-style:italic}
.scroll{overflow-x:auto}.note{color:#666;font-size:0.8em}figure{margin:0.5em 0}img{max-width:100%;height:auto}
"""


def _slug(text: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return s or "x"


class _Ids:
    """Unique element ids derived from names (collisions get a numeric suffix)."""

    def __init__(self) -> None:
        self.used: set[str] = set()

    def __call__(self, prefix: str, name: str) -> str:
        base = f"{prefix}-{_slug(name)}"
        out, i = base, 2
        while out in self.used:
            out, i = f"{base}-{i}", i + 1
        self.used.add(out)
        return out


def _img(png: bytes, alt: str, el_id: str) -> str:
    if not isinstance(png, (bytes, bytearray)) or not bytes(png).startswith(b"\x89PNG\r\n\x1a\n"):
        raise InputError(f"report figure {el_id!r}: expected PNG bytes")
    data = base64.b64encode(bytes(png)).decode("ascii")
    return (
        f'<figure><img id="{html.escape(el_id)}" alt="{html.escape(alt)}" '
        f'src="data:image/png;base64,{data}"><figcaption class="note">{html.escape(alt)}'
        f"</figcaption></figure>"
    )


def _cell(v) -> tuple[str, str]:
    """(text, css class) of one table value."""
    if v is None:
        return "—", ""
    if isinstance(v, bool):
        return ("yes" if v else "no"), "s"
    if isinstance(v, float):
        if math.isnan(v):
            return "—", ""
        return f"{v:.4g}", ""
    if isinstance(v, (int, np.integer)):
        return str(v), ""
    return html.escape(str(v)), "s"


def table_html(
    table: pa.Table, columns: Sequence[str] | None = None, max_rows: int = 200, el_id: str | None = None
) -> str:
    """An HTML table of ``table`` (floats to 4 significant digits, nulls as '—').

    When the table has more than ``max_rows`` rows the first ``max_rows`` are shown and a note
    says how many were left out.
    """
    cols = list(columns) if columns is not None else table.column_names
    require_columns(table, cols, "report table")
    shown = table.slice(0, max_rows)
    data = {c: shown.column(c).to_pylist() for c in cols}
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = []
    for i in range(shown.num_rows):
        tds = []
        for c in cols:
            text, cls = _cell(data[c][i])
            tds.append(f'<td class="{cls}">{text}</td>' if cls else f"<td>{text}</td>")
        body.append("<tr>" + "".join(tds) + "</tr>")
    id_attr = f' id="{html.escape(el_id)}"' if el_id else ""
    out = (
        f'<div class="scroll"><table{id_attr}><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )
    if table.num_rows > max_rows:
        out += f'<p class="note">Showing {max_rows} of {table.num_rows} rows; the full table is in the lake.</p>'
    return out


def gates_html(gates: Sequence[Mapping], el_id: str = "table-gates") -> str:
    """Gate results (dicts with name, value, threshold, passed) as an HTML table."""
    rows = []
    for i, g in enumerate(gates):
        missing = [k for k in ("name", "value", "threshold", "passed") if k not in g]
        if missing:
            raise InputError(f"gate #{i} ({g.get('name', '?')!r}) lacks key(s) {missing}")
        if not isinstance(g["passed"], (bool, np.bool_)):
            raise InputError(f"gate {g['name']!r}: 'passed' must be a bool, got {g['passed']!r}")
        cls = "pass" if g["passed"] else "fail"
        rows.append(
            f'<tr class="{cls}"><td class="s">{html.escape(str(g["name"]))}</td>'
            f"<td>{_cell(g['value'])[0]}</td><td>{_cell(g['threshold'])[0]}</td>"
            f'<td class="s">{"PASS" if g["passed"] else "FAIL"}</td></tr>'
        )
    n_fail = sum(1 for g in gates if not g["passed"])
    summary = f"<p>{len(gates) - n_fail} of {len(gates)} gates passed.</p>"
    return (
        summary + f'<table id="{html.escape(el_id)}"><thead><tr><th>gate</th><th>value</th>'
        f"<th>threshold</th><th>result</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def calibration_html(
    calibration: Mapping | None, model_choice: Mapping | None = None, validation: Mapping | None = None
) -> str:
    """The published model (and, for an ensemble, why), its validation AUROC and its calibration as
    HTML. ``validation``: the lens finder's metrics (``val_auroc``, and where trained by epochs
    ``best_epoch`` of ``epochs_run``; the AUROCs of the validation injections and real positives
    against the validation negatives)."""
    rows = []
    if validation and validation.get("val_auroc") is not None:
        parts = [
            f"{name} {validation[key]:.4f}"
            for key, name in (
                ("val_auroc_injections_vs_negatives", "injections vs negatives"),
                ("val_auroc_real_vs_negatives", "real positives vs negatives"),
            )
            if validation.get(key) is not None
        ]
        if validation.get("epochs_run"):
            parts.append(
                f"the published epoch, {validation['best_epoch']} of {validation['epochs_run']}, is the one it chose"
            )
        rows.append(("validation AUROC", f"{validation['val_auroc']:.4f}", "; ".join(parts)))
    if model_choice:
        rows.append(("published model", model_choice.get("published"), model_choice.get("reason")))
        for name, auc in (model_choice.get("member_val_auroc") or {}).items():
            rows.append((f"member {name}", f"val AUROC {auc:.4f}", "single network"))
        if model_choice.get("ensemble_val_auroc_cross_fitted") is not None:
            rows.append(
                (
                    "stacked ensemble",
                    f"val AUROC {model_choice['ensemble_val_auroc_cross_fitted']:.4f}",
                    "meta-learner scored on validation rows it was not fitted on",
                )
            )
    if calibration:
        from ..training.preprocess import DIHEDRAL_SUBGROUP_NAMES  # torch only when a model is reported

        views = int(calibration.get("dihedral_views", 1))
        rows.append(("views averaged", str(views), f"the logit is the mean over {DIHEDRAL_SUBGROUP_NAMES[views]}"))
        rows.append(
            (
                "temperature T",
                f"{calibration.get('temperature', float('nan')):.4g}",
                "scores are sigmoid(logit / T), fitted on the validation split (never test)",
            )
        )
        rows.append(
            (
                "expected calibration error",
                f"{calibration.get('ece_before', float('nan')):.4f} → {calibration.get('ece_after', float('nan')):.4f}",
                f"15 equal-mass bins, {calibration.get('n', '?')} validation rows, before → after",
            )
        )
    body = "".join(
        f'<tr><th>{html.escape(str(a))}</th><td class="s">{html.escape(str(b))}</td>'
        f'<td class="s">{html.escape(str(c))}</td></tr>'
        for a, b, c in rows
    )
    return f'<table id="table-calibration"><tbody>{body}</tbody></table>'


def example_ids(injection_scores: pa.Table, neg_scores: pa.Table, threshold: float, n: int = 12) -> dict[str, list]:
    """Ids of example stamps for the report mosaics at one threshold (score units).

    ``'true positives'``: detected injections, highest score first. ``'missed injections'``:
    scorable injections at or below the threshold, highest ``arc_snr`` first (the misses that
    should have been easy; by lowest score when ``arc_snr`` is absent). ``'highest-scoring
    negatives'``: valid negatives, highest score first. Ties break on the id, so the choice is
    deterministic.
    """
    require_columns(injection_scores, ("injection_id",), "injection scores")
    require_columns(neg_scores, ("object_id",), "negative scores")
    s_inj, u_inj = valid_scores(injection_scores, "injection scores")
    s_neg, u_neg = valid_scores(neg_scores, "negative scores")
    inj_id = np.asarray(injection_scores.column("injection_id").to_pylist(), dtype=object)
    neg_id = np.asarray(neg_scores.column("object_id").to_pylist(), dtype=object)

    def top(ids, key, mask):
        idx = np.flatnonzero(mask)
        order = sorted(idx.tolist(), key=lambda i: (-key[i], str(ids[i])))
        return [ids[i] for i in order[:n]]

    det = u_inj & (np.where(u_inj, s_inj, -np.inf) > threshold)
    if "arc_snr" in injection_scores.column_names:
        arc = np.asarray(
            injection_scores.column("arc_snr").cast(pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64
        )
        miss_key = np.where(np.isfinite(arc), arc, -np.inf)
    else:
        miss_key = -np.where(u_inj, s_inj, np.inf)
    return {
        "true positives": top(inj_id, s_inj, det),
        "missed injections": top(inj_id, miss_key, u_inj & ~det),
        "highest-scoring negatives": top(neg_id, s_neg, u_neg),
    }


#: Shown in place of a section whose input was not provided.
_MISSING = '<p class="missing">Not provided.</p>'


def _provenance_html(provenance: Mapping[str, object]) -> str:
    return (
        '<table id="table-provenance"><tbody>'
        + "".join(
            f'<tr><th>{html.escape(str(k))}</th><td class="s">{html.escape(str(v))}</td></tr>'
            for k, v in provenance.items()
        )
        + "</tbody></table>"
    )


def _model_sections(
    ids: _Ids, gates, validation, calibration, reliability, model_choice, comparison, max_rows: int
) -> list[str]:
    """The gates and the published model's calibration and comparison with its members."""
    parts = ["<h2>Gates</h2>", gates_html(gates) if gates else _MISSING]
    parts.append("<h2>Published model and calibration</h2>")
    parts.append(
        calibration_html(calibration, model_choice, validation)
        if calibration or model_choice or validation
        else _MISSING
    )
    if reliability is not None:
        parts.append(
            _img(
                reliability,
                "Reliability diagram of validation scores before and after temperature scaling",
                ids("fig", "reliability"),
            )
        )
    if comparison is not None and comparison.num_rows:
        parts.append(
            '<p class="note">The stacked ensemble and each member on the same test rows, each at its own '
            "threshold from the same held-out negatives.</p>"
        )
        parts.append(table_html(comparison, max_rows=max_rows, el_id=ids("table", "model-comparison")))
    return parts


def _score_sections(ids: _Ids, roc, aurocs, thresholds, recall, max_rows: int) -> list[str]:
    """ROC curves and their areas, the thresholds set on negatives and the recall of real lenses."""
    parts = ["<h2>ROC curves</h2>"]
    parts.append(
        _img(
            roc,
            "ROC curves: injections vs paired controls and real lenses vs negatives, log false-positive-rate axis",
            ids("fig", "roc"),
        )
        if roc is not None
        else _MISSING
    )
    if aurocs is not None:
        parts.append(
            '<p class="note">Areas under the curves, with percentile bootstrap intervals: the injections '
            "and their controls are resampled by host (a host holds several injections, and its controls "
            "are one score repeated), the real positives and negatives by galaxy.</p>"
        )
        parts.append(table_html(aurocs, max_rows=max_rows, el_id=ids("table", "aurocs")))
    parts.append("<h2>Thresholds from negatives</h2>")
    parts.append(
        table_html(thresholds, max_rows=max_rows, el_id=ids("table", "thresholds"))
        if thresholds is not None
        else _MISSING
    )
    parts.append("<h2>Real-lens recall</h2>")
    if recall is not None:
        parts.append('<p class="note">Tier A is the headline; "all" is dominated by tier B.</p>')
        parts.append(table_html(recall, max_rows=max_rows, el_id=ids("table", "recall")))
    else:
        parts.append(_MISSING)
    return parts


def _selection_sections(ids: _Ids, selection, selection_heatmaps, marginals, max_rows: int) -> list[str]:
    """The selection function C(θ_E, z_l) (heat maps and table) and its marginals."""
    parts = ["<h2>Selection function C(θ_E, z_l)</h2>"]
    if selection_heatmaps:
        for name, png in selection_heatmaps.items():
            parts.append(
                _img(
                    png,
                    f"Selection function C(θ_E, z_l) at threshold {name} with its 68% interval half-width",
                    ids("fig-selection", name),
                )
            )
    if selection is not None:
        parts.append(
            '<p class="note">Failed and unscorable injections are excluded from '
            "n_valid and counted in n_failed; cells with sufficient = no have too few "
            "valid injections.</p>"
        )
        parts.append(table_html(selection, max_rows=max_rows, el_id=ids("table", "selection")))
    if not selection_heatmaps and selection is None:
        parts.append(_MISSING)
    parts.append("<h2>Marginal completeness</h2>")
    if marginals:
        for label, (png, table) in marginals.items():
            parts.append(f"<h3>{html.escape(label)}</h3>")
            parts.append(
                _img(
                    png,
                    f"Completeness against {label}, 68% Jeffreys intervals on the effective number of injections (a "
                    "host's injections share their outcome)",
                    ids("fig-marginal", label),
                )
            )
            parts.append(table_html(table, max_rows=max_rows, el_id=ids("table-marginal", label)))
    else:
        parts.append(_MISSING)
    return parts


def _conditioning_section(conditioning: Mapping | None) -> list[str]:
    """What C(θ_E, z_l) is conditioned on: one row per item, nested values as JSON."""
    import json

    parts = ["<h2>What the selection function is conditioned on</h2>"]
    if not conditioning:
        return parts + [_MISSING]
    parts.append(
        '<p class="note">C(θ_E, z_l) is the completeness of the injections drawn from these priors into these '
        "hosts; it predicts the lenses of another population only where what decides detection is the same.</p>"
    )
    rows = "".join(
        f"<tr><th>{html.escape(str(k))}</th><td><code>"
        f"{html.escape(v if isinstance(v, str) else json.dumps(v, sort_keys=True))}</code></td></tr>"
        for k, v in conditioning.items()
    )
    return parts + [f'<table id="table-conditioning">{rows}</table>']


def _mosaic_sections(ids: _Ids, mosaics) -> list[str]:
    """Example-cutout mosaics, one captioned figure each."""
    parts = ["<h2>Example cutouts</h2>"]
    if not mosaics:
        return parts + [_MISSING]
    for label, png in mosaics.items():
        parts.append(f"<h3>{html.escape(label)}</h3>")
        parts.append(_img(png, f"Example cutouts: {label} (g, r, z asinh colour)", ids("fig-mosaic", label)))
    return parts


def build_report(
    *,
    title: str = "Dark Halo Scope — lens-finder evaluation",
    roc: bytes | None = None,
    thresholds: pa.Table | None = None,
    selection: pa.Table | None = None,
    selection_heatmaps: Mapping[str, bytes] | None = None,
    marginals: Mapping[str, tuple[bytes, pa.Table]] | None = None,
    recall: pa.Table | None = None,
    fpr_by_confuser: pa.Table | None = None,
    gates: Sequence[Mapping] | None = None,
    validation: Mapping | None = None,
    calibration: Mapping | None = None,
    reliability: bytes | None = None,
    model_choice: Mapping | None = None,
    comparison: pa.Table | None = None,
    aurocs: pa.Table | None = None,
    mosaics: Mapping[str, bytes] | None = None,
    provenance: Mapping[str, object] | None = None,
    gallery_uri: str | None = None,
    conditioning: Mapping | None = None,
    selection_tables: Mapping[str, pa.Table | None] | None = None,
    forecast_assumptions: Mapping | None = None,
    realism: pa.Table | None = None,
    ablation_uri: str | None = None,
    max_table_rows: int = 200,
) -> str:
    """One static, self-contained HTML page of the evaluation; every argument is optional (an absent
    one is shown as "not provided").

    Parameters
    ----------
    roc : PNG of :func:`plots.roc_png`; ``aurocs`` the table of :func:`comparison.auroc_intervals`.
    thresholds : table of :func:`thresholds_from_negatives`.
    selection : long table of :func:`selection_function`; ``selection_heatmaps`` maps a threshold
        name to the PNG of :func:`plots.selection_heatmap_png`.
    marginals : maps a label (e.g. 'PSF FWHM r') to (PNG of :func:`plots.marginal_png`, its table).
    recall : table of :func:`real_lens_recall`; ``fpr_by_confuser`` the table of that function.
    gates : dicts with ``name``, ``value``, ``threshold``, ``passed`` (bool).
    validation : the lens finder's metrics, for its validation AUROC (see :func:`calibration_html`).
    calibration : the lens finder's calibration summary (temperature, ECE before and after, fitted
        on the validation split); ``reliability`` the PNG of :func:`plots.reliability_png`.
    model_choice : which model is published and why (``published``, ``reason``, members' and the
        ensemble's AUROCs) for an ensemble; ``comparison`` :func:`comparison.model_comparison`'s table.
    mosaics : maps a caption ('true positives', 'missed injections', 'highest-scoring negatives')
        to the PNG of :func:`plots.mosaic_png`.
    provenance : key/value pairs printed at the top (model, code version, data versions).
    gallery_uri : where the survey search's candidate gallery is published, best relative to the
        report's folder (a link; no section without it).
    conditioning : what the selection function is conditioned on (priors, cosmology, host selection,
        σ_v relation, grid, injections per cell), shown beside it.
    selection_tables : by table name: ``selection_populations`` (C reweighted to populations; its
        ``kind = 'all'`` rows shown), ``selection_model`` and ``selection_calibration`` (the detection
        model, its reliability), ``selection_closure`` (hidden lenses found against predicted) and
        ``lens_forecast`` (``forecast_assumptions``: its schema's metadata).
    realism : the realism probe's table; ``ablation_uri`` where the realism ablation's page
        (:func:`ablation_page`) is published, relative to the report as ``gallery_uri``.

    Returns the HTML text (UTF-8); identical inputs give an identical page.
    """
    ids = _Ids()
    parts = [f"<h1>{html.escape(title)}</h1>", *([_provenance_html(provenance)] if provenance else [])]
    parts += _model_sections(ids, gates, validation, calibration, reliability, model_choice, comparison, max_table_rows)
    parts += _score_sections(ids, roc, aurocs, thresholds, recall, max_table_rows)
    parts += _conditioning_section(conditioning)
    parts += _selection_sections(ids, selection, selection_heatmaps, marginals, max_table_rows)
    st = selection_tables or {}
    parts += _population_sections(
        ids, st.get("selection_populations"), st.get("selection_model"), st.get("selection_calibration"), max_table_rows
    )
    parts += _closure_section(ids, st.get("selection_closure"), max_table_rows)
    parts += _forecast_section(ids, st.get("lens_forecast"), forecast_assumptions, max_table_rows)
    parts += _fpr_section(ids, fpr_by_confuser, max_table_rows) + _realism_section(ids, realism, ablation_uri)
    parts += _mosaic_sections(ids, mosaics)
    parts += _gallery_section(gallery_uri)
    return _page(title, parts)


def _page(title: str, parts: list[str]) -> str:
    """A self-contained HTML page of ``parts`` under the report's style."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head>\n<body>\n"
        + "\n".join(parts)
        + "\n</body></html>\n"
    )


def _population_sections(ids, populations, model, calibration, max_table_rows: int) -> list[str]:
    """C reweighted to populations (overall rows), and the detection model with its reliability."""
    import pyarrow.compute as pc

    parts = ["<h2>C for a population: the selection function reweighted</h2>"]
    if populations is None or not populations.num_rows:
        parts.append(_MISSING)
    else:
        parts.append(
            '<p class="note">C(θ_E, z_l | λ) = Σ w d / Σ w with w = p(ψ | λ) / q(ψ), the injections reweighted from '
            "the proposal q they were drawn from to a population λ: <code>proposal</code> itself, "
            "<code>lenspop</code> (after Collett 2015) and <code>mock</code> (the mock's hidden-lens sources); each "
            "cell carries N_eff = (Σw)²/Σw² and is flagged below 10. Overall C per population and threshold (the "
            "cells weighted by the population's lenses; the full table is <code>selection_populations</code>):</p>"
        )
        overall = populations.filter(pc.equal(populations.column("kind"), "all"))
        parts.append(table_html(overall, max_rows=max_table_rows, el_id=ids("table", "populations")))
    parts.append("<h2>The detection model P_det(ψ)</h2>")
    if model is None or not model.num_rows:
        return [*parts, _MISSING]
    parts.append(
        '<p class="note">Gradient-boosted trees per threshold over the lens, source and observing parameters, with '
        "their validity ranges (inputs outside are refused) and Brier scores of out-of-fold probabilities (4 folds "
        "by host) against a logistic regression and the base rate; then its reliability on those held-out "
        "injections.</p>"
    )
    parts.append(table_html(model, max_rows=max_table_rows, el_id=ids("table", "detection-model")))
    if calibration is not None and calibration.num_rows:
        parts.append(table_html(calibration, max_rows=max_table_rows, el_id=ids("table", "detection-calibration")))
    return parts


def _fpr_section(ids, fpr_by_confuser: pa.Table | None, max_table_rows: int) -> list[str]:
    return [
        "<h2>False-positive rate by pool and confuser category</h2>",
        table_html(fpr_by_confuser, max_rows=max_table_rows, el_id=ids("table", "fpr-by-confuser"))
        if fpr_by_confuser is not None
        else _MISSING,
    ]


def _realism_section(ids, realism: pa.Table | None, ablation_uri: str | None) -> list[str]:
    parts = ["<h2>Realism: does the finder tell the truth world's lenses from its injections?</h2>"]
    if realism is None:
        return parts + [_MISSING] + _ablation_link(ablation_uri)
    parts.append(
        f'<p class="note">A {PROBE_FOLDS}-fold cross-validated logistic regression on the lens finder’s '
        "penultimate features, truth lenses (the test split's known lenses) against injections matched to them "
        f"(<code>matched_on</code>): AUROC 0.5 means the finder sees no difference; above {PROBE_WARN_AUROC} "
        "the <code>realism_probe_gate</code> check warns: the injections it trained on are not the world "
        "it is applied to, and C measured on them may not transfer. Interval: 95 % bootstrap.</p>"
    )
    return parts + [table_html(realism, el_id=ids("table", "realism-probe"))] + _ablation_link(ablation_uri)


ABLATION_TITLE = "Realism ablation: which source realism does the finder's C depend on?"


def _ablation_link(ablation_uri: str | None) -> list[str]:
    """The report's pointer to the realism ablation, its own asset and page (not part of the demo)."""
    parts = [f"<h2>{html.escape(ABLATION_TITLE)}</h2>"]
    text = (
        "One lens finder per source model and imaging nuisance, each scored on the same truth world: not part "
        "of the demo; <code>dhs materialize realism_ablation</code> trains the arms and publishes the table "
        "and its page"
    )
    if not ablation_uri:
        return parts + [f'<p class="missing">{text}.</p>']
    href = "file://" + ablation_uri if ablation_uri.startswith("/") else ablation_uri
    return parts + [f'<p>{text}: <a id="link-realism-ablation" href="{html.escape(href)}">realism ablation</a>.</p>']


def ablation_page(table: pa.Table, figure: bytes, provenance: Mapping[str, object] | None = None) -> str:
    """The realism ablation's page: its arms' table (``evaluation.ablation.ABLATION_SCHEMA``) and
    ``figure`` (PNG, :func:`plots.ablation_png`). Identical inputs give an identical page."""
    ids = _Ids()
    parts = [f"<h1>{html.escape(ABLATION_TITLE)}</h1>", *([_provenance_html(provenance)] if provenance else [])]
    parts.append(
        '<p class="note">One arm per source model and nuisance: AUROC of the truth lenses against held-out '
        "negatives, recall at the arm's threshold, the realism probe's AUROC, and ΔC ± sd, the change of the "
        "completeness against the baseline arm (paired bootstrap over the same truth lenses).</p>"
    )
    cols = ["arm", "auroc_truth", "recall_truth", "probe_auroc", "delta_c", "delta_c_sd", "baseline_arm"]
    parts.append(table_html(table.select(cols), el_id=ids("table", "realism-ablation")))
    parts.append(_img(figure, "ΔC per arm (±1σ); recall and probe AUROC per arm", ids("fig", "realism-ablation")))
    return _page(ABLATION_TITLE, parts)


def _closure_section(ids, closure: pa.Table | None, max_table_rows: int) -> list[str]:
    parts = ["<h2>Closure: the selection function against the hidden lenses the search found</h2>"]
    if closure is None or not closure.num_rows:
        return parts + ['<p class="note">No hidden-lens truth (not the mock survey): no closure test.</p>']
    parts.append(
        '<p class="note">Per threshold, method and θ_E bin: hidden lenses of the mock sky (all in the closure '
        "reserve, so none is a threshold negative or an injection host), the number predicted per lens by the "
        "detection model at each lens's parameters (<code>per_lens</code>) and from C reweighted to the mock's "
        "source population at each lens's cell (<code>population</code>), its standard deviation, the number "
        "the search recovered, the pull, and <code>power_15pct</code>, the pull a 15 % bias of C would give.</p>"
    )
    return parts + [table_html(closure, max_rows=max_table_rows, el_id=ids("table", "closure"))]


def _gallery_section(gallery_uri: str | None) -> list[str]:
    if not gallery_uri:
        return []
    # a path relative to the report stays relative (a copied lake keeps the link)
    href = "file://" + gallery_uri if gallery_uri.startswith("/") else gallery_uri
    return [
        "<h2>Survey-wide search</h2>",
        '<p>The candidates of the search, with stamps and grading: <a id="link-gallery" '
        f'href="{html.escape(href)}">'
        f"candidate gallery</a> (materialize <code>candidate_gallery</code> when the link is missing).</p>",
    ]


def _forecast_section(ids, forecast, assumptions, max_table_rows: int) -> list[str]:
    parts = ["<h2>Forecast: lenses the search finds per square degree</h2>"]
    if forecast is None or not forecast.num_rows:
        return [*parts, _MISSING]
    parts.append(
        "<p class=\"note\">The LensPop-like population (after Collett 2015: Choi et al. 2007's VDF with LensPop's "
        "evolution, LensPop-like source counts, redshifts and sizes, every source within θ_E) per cell, times C "
        "reweighted to it: expected detected lenses per deg² and in the searched area, per θ_E bin and overall; "
        "lenses in cells whose N_eff is below the floor are counted apart (<code>n_unmeasured_per_deg2</code>).</p>"
    )
    if assumptions:
        items = "".join(
            f"<li><b>{html.escape(str(k))}</b>: {html.escape(json.dumps(v, ensure_ascii=False))}</li>"
            for k, v in assumptions.items()
        )
        parts.append(f"<p>Assumptions:</p><ul>{items}</ul>")
    parts.append(table_html(forecast, max_rows=max_table_rows, el_id=ids("table", "forecast")))
    return parts
