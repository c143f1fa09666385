"""The candidate gallery in headless Chromium, in one browser session: every new candidate on the
first screen before the folded known lenses, every stamp loading from its relative link in a copied
folder, the filters, grades kept in the browser's storage across a reload, and the export that
``dhs grade`` accepts."""

from __future__ import annotations

import html
import json
import re

import numpy as np
import pyarrow as pa

from darkhaloscope.search.gallery import GALLERY_FILE, VIEWER_URL, gallery_files, gallery_html, storage_key
from darkhaloscope.search.grades import check_against_candidates, parse_grades_csv
from darkhaloscope.seeding import rng_for
from tests.conftest import require_chromium
from tests.support.chromium import file_dom

N_KNOWN, N_NEW = 150, 28  # the demo's shape: the known lenses outrank the new candidates
SIZE = 31


def _candidates() -> pa.Table:
    rng = rng_for("test", "gallery")
    n = N_KNOWN + N_NEW
    score = np.sort(rng.uniform(0.9, 1.0, n))[::-1]
    known = np.arange(n) < N_KNOWN
    return pa.table(
        {
            "rank": pa.array(np.arange(1, n + 1), pa.int64()),
            "object_id": pa.array(1000 + np.arange(n) * 7, pa.int64()),
            "ra": 30.0 + rng.uniform(0, 5, n),
            "dec": -5.0 + rng.uniform(0, 5, n),
            "score": score,
            "known": known,
            "known_name": [f"J{i:04d}" if k else None for i, k in enumerate(known)],
            "model_version": ["abc123"] * n,
            "shape_r": pa.array(np.where(np.arange(n) % 3 == 0, 1.5, 0.6), pa.float32()),
            "threshold_name": ["fpr_1e-03"] * n,
            "threshold": [0.9] * n,
        }
    )


_PROBE = """
<script>
window.addEventListener('load', function () {
  function pick(id, grade) {
    var s = document.querySelector('select.grade[data-object-id="' + id + '"]');
    s.value = grade; s.dispatchEvent(new Event('change'));
  }
  function visible(sel) {
    return Array.prototype.filter.call(document.querySelectorAll(sel), function (c) {
      return c.checkVisibility();
    }).length;
  }
  function filter(id, value) {
    var f = document.getElementById(id); f.value = value; f.dispatchEvent(new Event('input'));
  }
  if (sessionStorage.getItem('probe') !== 'reloaded') {
    pick(%(new0)d, 'A'); pick(%(new1)d, 'B'); pick(%(known0)d, 'not_a_lens');
    sessionStorage.setItem('probe', 'reloaded');
    location.reload();
    return;
  }
  var out = {};
  var grades = {};
  document.querySelectorAll('select.grade').forEach(function (s) {
    if (s.value) { grades[s.dataset.objectId] = s.value; }
  });
  out.restored = grades;
  var h = window.innerHeight;
  var news = Array.prototype.slice.call(document.querySelectorAll('#grid-new div.card'));
  out.new_on_first_screen = news.filter(function (c) {
    var r = c.getBoundingClientRect(), img = c.querySelector('img');
    return r.bottom <= h && r.top >= 0 && img.complete && img.naturalWidth > 0;
  }).length;
  out.known_open = document.getElementById('sec-known').open;
  out.known_visible = visible('#grid-known div.card');
  out.first_card_is_new = document.querySelector('div.card').dataset.status === 'new';
  out.viewer_links = document.querySelectorAll('a[href*="legacysurvey.org"]').length;
  out.labels = Array.prototype.map.call(document.querySelectorAll('#grid-new span.label'), function (l) {
    return l.textContent; }).slice(0, 2);
  filter('f-status', 'known');
  out.status_known = [visible('#grid-new div.card'), visible('#grid-known div.card')];
  filter('f-status', 'all'); filter('f-score-min', '%(smin)s');
  out.score_min = visible('div.card');
  filter('f-score-min', ''); filter('f-size-min', '1'); filter('f-size-max', '2');
  out.size_range = visible('div.card');
  filter('f-size-min', ''); filter('f-size-max', ''); filter('f-grade', 'B');
  out.grade_b = visible('div.card');
  filter('f-grade', 'ungraded');
  out.ungraded = visible('div.card');
  filter('f-grade', ''); filter('f-status', 'new');
  out.status_new = [visible('#grid-new div.card'), visible('#grid-known div.card'),
                    document.getElementById('n-new-shown').textContent];
  out.csv = gradesCsv();
  forgetGrades();
  out.after_forget = [localStorage.getItem(%(store)s),
                      document.querySelectorAll('select.grade option:checked[value="A"]').length];
  var pre = document.createElement('pre'); pre.id = 'probe'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>
"""


def test_gallery_in_chromium_filters_keeps_grades_across_a_reload_and_exports_them(tmp_path):
    require_chromium()
    cand = _candidates()
    stamps = rng_for("test", "gallery", "stamps").normal(0.0, 0.05, (cand.num_rows, 3, SIZE, SIZE))
    files = gallery_files(cand, stamps.astype(np.float32), viewer=False)
    assert len(files) == cand.num_rows + 1  # the page and every candidate's stamp
    copy = tmp_path / "copied-lake" / "search" / "candidate_gallery.files"  # a lake moved elsewhere
    for name, payload in files.items():
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        (copy / name).write_bytes(payload)
    page = files[GALLERY_FILE].decode()
    assert not re.search(r'(src|href)="(file:|/|https?:)', page)  # relative links only, nothing fetched
    rows = cand.to_pylist()
    new0, new1, known0 = rows[N_KNOWN]["object_id"], rows[N_KNOWN + 1]["object_id"], rows[0]["object_id"]
    smin = rows[N_KNOWN - 10]["score"]  # the 10 lowest-ranked known lenses and every new candidate lie below
    probe = _PROBE % {
        "new0": new0,
        "new1": new1,
        "known0": known0,
        "smin": repr(smin),
        "store": json.dumps(storage_key(cand)),
    }
    (copy / GALLERY_FILE).write_text(page.replace("</body>", probe + "</body>"), encoding="utf-8")
    dom, stderr = file_dom(copy / GALLERY_FILE, tmp_path)
    m = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert m, "the probe never ran after the reload; chromium stderr: " + stderr[-2000:]
    out = json.loads(html.unescape(m.group(1)))

    # the grades survived the reload through the browser's storage
    assert out["restored"] == {str(new0): "A", str(new1): "B", str(known0): "not_a_lens"}
    # every new candidate on the first screen, loaded; the known lenses folded away after them
    assert out["new_on_first_screen"] == N_NEW and out["first_card_is_new"]
    assert out["known_open"] is False and out["known_visible"] == 0
    assert out["viewer_links"] == 0  # a mock sky: no link to the real sky
    assert out["labels"] == [
        f"#{N_KNOWN + 1} · {rows[N_KNOWN]['score']:.3f}",
        f"#{N_KNOWN + 2} · {rows[N_KNOWN + 1]['score']:.3f}",
    ]
    # the filters
    assert out["status_known"] == [0, N_KNOWN]
    assert out["score_min"] == sum(r["score"] >= smin for r in rows) == N_KNOWN - 9
    assert out["size_range"] == sum(1.0 <= r["shape_r"] <= 2.0 for r in rows)
    assert out["grade_b"] == 1 and out["ungraded"] == cand.num_rows - 3
    assert out["status_new"] == [N_NEW, 0, str(N_NEW)]
    # "Forget grades" empties the storage and the controls
    assert out["after_forget"] == [None, 0]

    # the export holds every candidate in rank order and lands as it is (dhs grade's checks)
    graded = parse_grades_csv(out["csv"].encode(), "grades.csv")
    check_against_candidates(graded, cand, "grades.csv")
    assert graded.column("object_id").to_pylist() == cand.column("object_id").to_pylist()
    by_id = dict(zip(graded.column("object_id").to_pylist(), graded.column("grade").to_pylist()))
    assert (by_id[new0], by_id[new1], by_id[known0]) == ("A", "B", "not_a_lens")
    assert sum(g == "ungraded" for g in by_id.values()) == cand.num_rows - 3
    assert graded.column("score").to_pylist() == cand.column("score").to_pylist()  # full precision


def test_viewer_links_only_for_real_survey_stamps():
    cand = _candidates().slice(N_KNOWN - 1, 3)
    real, mock = gallery_html(cand, viewer=True), gallery_html(cand, viewer=False)
    first = cand.to_pylist()[0]
    assert html.escape(VIEWER_URL.format(ra=first["ra"], dec=first["dec"])) in real
    assert real.count("legacysurvey.org/viewer") == 3 and "legacysurvey.org" not in mock
