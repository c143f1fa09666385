"""The candidate gallery: one static HTML page for discovering lenses among a search's candidates,
with every candidate's g, r, z colour stamp (the viewer's asinh mapping,
:func:`imaging.cutout_io.cutout_png`) as a PNG file beside it, linked relatively, so a copied
lake (or a copied gallery folder) keeps working offline; no script or style is fetched.

- **New candidates first**: the candidates that match no known lens come first, every one of them
  in rank order; the known lenses follow in their own section, folded away (a toggle opens it).
- **Every candidate**: each row of the candidates table (every galaxy above the search's
  threshold) has its stamp: the one the search kept, or one cut again at gallery time
  (:func:`gallery_stamps`).
- **Labels**: each stamp shows its rank and score over the image; the position links to the Legacy
  Surveys viewer only for stamps of the real survey (a mock sky has nothing there to see).
- **Filters**: status (new, known, all), a score range, a size range (the galaxy's half-light
  radius ``shape_r`` in arcsec: the only size a candidate has before any lens model, and on the
  same scale as the Einstein radii of the galaxy-scale lenses sought) and the grade given; they
  hide cards and never change what is exported.
- **Grades**: a grading control per stamp. Each choice is kept in the browser's storage
  (``localStorage``, under a key naming the page and the lens finder) as soon as it is made, so a
  reload or a closed tab loses nothing; "Export grades" saves them as CSV (columns of
  :data:`grades.GRADE_COLUMNS`: the grade and what the grader saw, full-precision position and
  score) for ``dhs grade``, one row per candidate of the page in rank order (``ungraded`` where the
  grader chose none: shown, still awaiting inspection); ``gradesCsv()`` returns the same text.
  "Forget grades" clears the stored ones once a round is landed.
"""

from __future__ import annotations

import hashlib
import html
import json
import math
from typing import Callable

import numpy as np
import pyarrow as pa

from ..errors import InputError
from ..imaging.cutout_io import cutout_png
from ..imaging.cutout_table import load_stamps
from .grades import GRADES, UNGRADED

#: The file name of the page in the published gallery's files
GALLERY_FILE = "gallery.html"
#: Folder of the stamp PNGs, beside the page (``stamps/<object_id>.png``)
STAMP_DIR = "stamps"
VIEWER_URL = "https://www.legacysurvey.org/viewer?ra={ra:.6f}&dec={dec:.6f}&layer=ls-dr10&zoom=16"
_COLUMNS = ("rank", "object_id", "ra", "dec", "score", "known", "known_name", "model_version")
#: Optional column: the galaxy's half-light radius [arcsec] (the size filter)
SIZE_COLUMN = "shape_r"

_SCRIPT = """
var STORE = %(store)s;
var UNGRADED = %(ungraded)s;
function cards() { return Array.prototype.slice.call(document.querySelectorAll('div.card')); }
function saved() {
  try { return JSON.parse(localStorage.getItem(STORE) || '{}'); } catch (e) { return {}; }
}
function saveGrade(sel) {
  var g = saved();
  if (sel.value) { g[sel.dataset.objectId] = sel.value; } else { delete g[sel.dataset.objectId]; }
  localStorage.setItem(STORE, JSON.stringify(g));
  sel.closest('div.card').dataset.grade = sel.value || UNGRADED;
  applyFilters();
}
function restoreGrades() {
  var g = saved();
  document.querySelectorAll('select.grade').forEach(function (s) {
    s.value = g[s.dataset.objectId] || '';
    s.closest('div.card').dataset.grade = s.value || UNGRADED;
  });
  applyFilters();
}
function forgetGrades() {
  localStorage.removeItem(STORE);
  restoreGrades();
}
function gradesCsv() {
  var rows = ['object_id,grade,ra,dec,score,model_version,known'];
  var sels = Array.prototype.slice.call(document.querySelectorAll('select.grade'));
  sels.sort(function (a, b) { return Number(a.dataset.rank) - Number(b.dataset.rank); });
  sels.forEach(function (s) {
    var d = s.dataset;
    rows.push([d.objectId, s.value || UNGRADED, d.ra, d.dec, d.score, d.modelVersion, d.known].join(','));
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
function bound(id, fallback) {
  var v = document.getElementById(id).value;
  return v === '' ? fallback : Number(v);
}
function applyFilters() {
  var status = document.getElementById('f-status').value;
  var grade = document.getElementById('f-grade').value;
  var s0 = bound('f-score-min', -Infinity), s1 = bound('f-score-max', Infinity);
  var r0 = bound('f-size-min', -Infinity), r1 = bound('f-size-max', Infinity);
  var shown = {new: 0, known: 0};
  cards().forEach(function (c) {
    var d = c.dataset, score = Number(d.score), size = d.size === '' ? NaN : Number(d.size);
    var sizeBounded = r0 !== -Infinity || r1 !== Infinity;
    var ok = (status === 'all' || d.status === status)
      && score >= s0 && score <= s1
      && (!sizeBounded || (size >= r0 && size <= r1))
      && (grade === '' || d.grade === grade);
    c.style.display = ok ? '' : 'none';
    if (ok) { shown[d.status] += 1; }
  });
  document.getElementById('n-new-shown').textContent = shown.new;
  document.getElementById('n-known-shown').textContent = shown.known;
  document.getElementById('sec-new').style.display = status === 'known' ? 'none' : '';
  var known = document.getElementById('sec-known');
  known.style.display = status === 'new' ? 'none' : '';
  if (status === 'known') { known.open = true; }
}
window.addEventListener('DOMContentLoaded', function () {
  document.querySelectorAll('select.grade').forEach(function (s) {
    s.addEventListener('change', function () { saveGrade(s); });
  });
  document.querySelectorAll('.filter').forEach(function (f) {
    f.addEventListener('input', applyFilters);
    f.addEventListener('change', applyFilters);
  });
  restoreGrades();
});
"""
_STYLE = """
body { font-family: sans-serif; margin: 0.6em; }
h1 { font-size: 1.3em; margin: 0.2em 0; } h2 { font-size: 1.1em; margin: 0.4em 0; display: inline; }
p { margin: 0.3em 0; } .filters { font-size: 13px; margin: 0.3em 0; }
.filters input { width: 4.5em; } .filters label { margin-right: 0.8em; }
.grid { display: flex; flex-wrap: wrap; gap: 4px; margin: 0.3em 0; }
.card { width: 103px; border: 1px solid #ccc; padding: 1px; font-size: 10px; }
.stampbox { position: relative; width: 101px; height: 101px; }
.stampbox img { width: 101px; height: 101px; image-rendering: pixelated; display: block; }
.label { position: absolute; left: 0; top: 0; background: rgba(0,0,0,0.6); color: #fff; padding: 0 2px;
  font-size: 10px; }
.card select { width: 100%; font-size: 10px; }
.known { color: #a40; } .new { color: #070; }
"""


def _attr(value) -> str:
    return html.escape(str(value), quote=True)


def _number(value) -> str:
    """A float as the shortest text that reads back to the same value (``repr``), or empty for none."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return repr(float(value))


def stamp_name(object_id: int) -> str:
    """The stamp's path relative to the page."""
    return f"{STAMP_DIR}/{int(object_id)}.png"


def _card(row: dict, viewer: bool) -> str:
    status = "known" if row["known"] else "new"
    label = (
        f'<span class="known">known: {html.escape(str(row["known_name"]))}</span>'
        if row["known"]
        else '<span class="new">new</span>'
    )
    options = '<option value="">(ungraded)</option>' + "".join(f'<option value="{g}">{g}</option>' for g in GRADES)
    position = f"{row['ra']:.5f}, {row['dec']:+.5f}"
    where = f'<a href="{_attr(VIEWER_URL.format(ra=row["ra"], dec=row["dec"]))}">{position}</a>' if viewer else position
    size = row.get(SIZE_COLUMN)
    size_text = f" r½ {size:.2f}″" if _number(size) else ""
    return (
        f'<div class="card" id="cand-{row["object_id"]}" data-status="{status}" data-score="{_number(row["score"])}" '
        f'data-size="{_number(size)}" data-grade="{UNGRADED}" data-rank="{row["rank"]}">'
        f'<div class="stampbox"><img class="stamp" loading="lazy" alt="candidate {row["rank"]}" '
        f'src="{_attr(stamp_name(row["object_id"]))}">'
        f'<span class="label">#{row["rank"]} · {row["score"]:.3f}</span></div>'
        f"<div>{label}{size_text}</div><div>{where}</div>"
        f'<select class="grade" data-object-id="{row["object_id"]}" data-rank="{row["rank"]}" '
        f'data-ra="{row["ra"]!r}" data-dec="{row["dec"]!r}" data-score="{row["score"]!r}" '
        f'data-model-version="{_attr(row["model_version"])}" data-known="{str(row["known"]).lower()}">'
        f"{options}</select>"
        "</div>"
    )


_FILTERS = (
    '<div class="filters">'
    '<label>status <select id="f-status" class="filter"><option value="all">all</option>'
    '<option value="new">new</option><option value="known">known</option></select></label>'
    '<label>score <input id="f-score-min" class="filter" type="number" step="any" min="0" max="1"> to '
    '<input id="f-score-max" class="filter" type="number" step="any" min="0" max="1"></label>'
    '<label>size r½ (″) <input id="f-size-min" class="filter" type="number" step="any" min="0"> to '
    '<input id="f-size-max" class="filter" type="number" step="any" min="0"></label>'
    '<label>grade <select id="f-grade" class="filter"><option value="">any</option>'
    f'<option value="{UNGRADED}">{UNGRADED}</option>%(grades)s</select></label>'
    '<button id="export" onclick="exportGrades()">Export grades (CSV)</button> '
    '<button id="forget" onclick="forgetGrades()">Forget grades</button>'
    "</div>"
)


def storage_key(candidates: pa.Table) -> str:
    """The browser-storage key of a page's grades: the candidates' lens finder and ids, so grades of
    another search never appear on this page."""
    ids = np.sort(candidates.column("object_id").to_numpy())
    digest = hashlib.sha256(ids.astype("<i8").tobytes()).hexdigest()[:16]
    versions = sorted(set(map(str, candidates.column("model_version").to_pylist())))
    return f"dhs-grades:{','.join(v[:16] for v in versions)}:{digest}"


def gallery_html(candidates: pa.Table, viewer: bool, title: str = "Lens candidates") -> str:
    """The page for ``candidates`` (rows in rank order, columns of ``_COLUMNS``, ``shape_r``
    optional), its stamps at :func:`stamp_name`; ``viewer``: link each position to the Legacy
    Surveys viewer (real-survey stamps only)."""
    missing = [c for c in _COLUMNS if c not in candidates.column_names]
    if missing:
        raise InputError(f"candidates has no column(s) {missing}")
    columns = [*_COLUMNS, *([SIZE_COLUMN] if SIZE_COLUMN in candidates.column_names else [])]
    rows = candidates.sort_by("rank").select(columns).to_pylist()
    new = [r for r in rows if not r["known"]]
    known = [r for r in rows if r["known"]]
    threshold = ""
    if "threshold_name" in candidates.column_names and candidates.num_rows:
        threshold = (
            f" above the threshold {html.escape(str(candidates.column('threshold_name')[0].as_py()))} "
            f"(score &gt; {candidates.column('threshold')[0].as_py():.4f})"
        )
    head = (
        f"<h1>{html.escape(title)}</h1><p>{len(rows)} candidates{threshold}: {len(new)} new, {len(known)} known "
        "lenses. Grades are kept in this browser until exported; land the export with "
        "<code>dhs grade grades.csv</code>.</p>"
        + _FILTERS
        % {"grades": "".join(f"<option>{g}</option>" for g in GRADES)}
    )
    sections = (
        f'<div id="sec-new"><h2>New candidates (<span id="n-new-shown">{len(new)}</span> of {len(new)})</h2>'
        f'<div class="grid" id="grid-new">{"".join(_card(r, viewer) for r in new)}</div></div>'
        f'<details id="sec-known"><summary><h2>Known lenses (<span id="n-known-shown">{len(known)}</span> of '
        f'{len(known)})</h2></summary><div class="grid" id="grid-known">{"".join(_card(r, viewer) for r in known)}'
        "</div></details>"
    )
    script = _SCRIPT % {"store": json.dumps(storage_key(candidates)), "ungraded": json.dumps(UNGRADED)}
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{_STYLE}</style><script>{script}</script></head><body>{head}{sections}</body></html>\n"
    )


def gallery_files(candidates: pa.Table, stamps: np.ndarray, viewer: bool) -> dict[str, bytes]:
    """{path relative to the gallery's folder: bytes}: the page (:data:`GALLERY_FILE`) and one PNG
    per candidate (``stamps``: (N, 3, S, S) g, r, z nanomaggies, one per row of ``candidates``)."""
    if len(stamps) != candidates.num_rows:
        raise InputError(f"gallery: {len(stamps)} stamps for {candidates.num_rows} candidates")
    files = {GALLERY_FILE: gallery_html(candidates, viewer).encode("utf-8")}
    for oid, stamp in zip(candidates.column("object_id").to_pylist(), stamps):
        files[stamp_name(oid)] = cutout_png(stamp)
    return files


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
