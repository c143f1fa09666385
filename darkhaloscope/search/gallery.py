"""The candidate gallery: one static HTML page (works offline, images embedded) of the top
candidates' g, r, z colour stamps (the viewer's asinh mapping, :func:`imaging.cutout_io.cutout_png`)
with their rank, score, known/new, a link to the Legacy Surveys viewer at their position and a
grading control per stamp. The page's "Export grades" button saves the grades as CSV (columns of
:data:`grades.GRADE_COLUMNS`: the grade and what the grader saw, full-precision position and
score) for ``dhs grade``, one row per candidate shown (``ungraded`` where the grader chose none:
sent to inspection, still awaiting it); ``gradesCsv()`` returns the same text.
"""

from __future__ import annotations

import base64
import html
from typing import Callable

import numpy as np
import pyarrow as pa

from ..errors import InputError
from ..imaging.cutout_io import cutout_png
from ..imaging.cutout_table import load_stamps
from .grades import GRADES, UNGRADED

DEFAULT_TOP_N = 200
#: The file name of the page in the published gallery table
GALLERY_FILE = "gallery.html"
VIEWER_URL = "https://www.legacysurvey.org/viewer?ra={ra:.6f}&dec={dec:.6f}&layer=ls-dr10&zoom=16"
_COLUMNS = ("rank", "object_id", "ra", "dec", "score", "known", "known_name", "model_version")

_SCRIPT = """
function gradesCsv() {
  var rows = ['object_id,grade,ra,dec,score,model_version,known'];
  document.querySelectorAll('select.grade').forEach(function (s) {
    var d = s.dataset;
    rows.push([d.objectId, s.value || '%(ungraded)s', d.ra, d.dec, d.score, d.modelVersion, d.known].join(','));
  });
  return rows.join('\\n') + '\\n';
}
function exportGrades() {
  var url = URL.createObjectURL(new Blob([gradesCsv()], {type: 'text/csv'}));
  var a = document.createElement('a');
  a.href = url; a.download = 'grades.csv';
  document.body.appendChild(a); a.click(); a.remove();
  setTimeout(function () { URL.revokeObjectURL(url); }, 1000);
}
"""
_STYLE = """
body { font-family: sans-serif; margin: 1em; }
.grid { display: flex; flex-wrap: wrap; gap: 8px; }
.card { width: 170px; border: 1px solid #ccc; padding: 4px; font-size: 12px; }
.card img { width: 160px; height: 160px; image-rendering: pixelated; display: block; }
.known { color: #a40; } .new { color: #070; }
"""


def _card(row: dict, png: bytes) -> str:
    status = (
        f'<span class="known">known: {html.escape(str(row["known_name"]))}</span>'
        if row["known"]
        else '<span class="new">new</span>'
    )
    options = '<option value="">(ungraded)</option>' + "".join(f'<option value="{g}">{g}</option>' for g in GRADES)
    return (
        f'<div class="card" id="cand-{row["object_id"]}">'
        f'<img class="stamp" loading="lazy" alt="candidate {row["rank"]}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'
        f"<div>#{row['rank']} score {row['score']:.4f} {status}</div>"
        f'<div><a href="{html.escape(VIEWER_URL.format(ra=row["ra"], dec=row["dec"]))}">{row["ra"]:.5f}, {row["dec"]:+.5f}</a></div>'
        f'<select class="grade" data-object-id="{row["object_id"]}" data-ra="{row["ra"]!r}" data-dec="{row["dec"]!r}" '
        f'data-score="{row["score"]!r}" data-model-version="{html.escape(row["model_version"])}" data-known="{str(row["known"]).lower()}">{options}</select>'
        "</div>"
    )


def gallery_html(candidates: pa.Table, stamps: np.ndarray, title: str = "Lens candidates") -> str:
    """The page for ``candidates`` (rows in rank order, columns of ``_COLUMNS``) and their
    ``stamps`` ((N, 3, S, S) g, r, z nanomaggies, one per row)."""
    missing = [c for c in _COLUMNS if c not in candidates.column_names]
    if missing:
        raise InputError(f"candidates has no column(s) {missing}")
    if len(stamps) != candidates.num_rows:
        raise InputError(f"gallery: {len(stamps)} stamps for {candidates.num_rows} candidates")
    rows = candidates.select(list(_COLUMNS)).to_pylist()
    cards = "\n".join(_card(r, cutout_png(s)) for r, s in zip(rows, stamps))
    n_known = sum(1 for r in rows if r["known"])
    head = (
        f"<h1>{html.escape(title)}</h1><p>{len(rows)} candidates ({n_known} known, {len(rows) - n_known} new). "
        "Grade each stamp, then export the grades and land them with <code>dhs grade grades.csv</code>.</p>"
        '<p><button id="export" onclick="exportGrades()">Export grades (CSV)</button></p>'
    )
    return (
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title><style>{_STYLE}</style>'
        f'<script>{_SCRIPT % {"ungraded": UNGRADED}}</script></head><body>{head}<div class="grid">{cards}</div></body></html>'
    )


def top_candidates(candidates: pa.Table, n: int = DEFAULT_TOP_N) -> pa.Table:
    """The ``n`` best-ranked candidates, in rank order."""
    if n < 1:
        raise InputError(f"gallery size must be >= 1, got {n}")
    return candidates.sort_by("rank").slice(0, n)


def gallery_stamps(candidates: pa.Table, kept, open_source: Callable[[], object], size: int) -> np.ndarray:
    """(N, 3, size, size) stamps of ``candidates``: the ones the search kept (``kept``, the
    search_stamps dataset), the rest cut again from the image source ``open_source()`` returns,
    opened only then (a candidate below the keep-threshold; where the source fails the stamp stays
    zeros and shows black)."""
    ids = candidates.column("object_id").to_numpy()
    (stamps,), found = load_stamps(kept, ids)
    if not found.all():
        lost = np.flatnonzero(~found)
        batch, _ = open_source().cutouts(
            candidates.column("ra").to_numpy()[lost], candidates.column("dec").to_numpy()[lost], size
        )
        stamps[lost] = batch.image
    return stamps
