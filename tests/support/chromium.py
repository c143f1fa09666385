"""Open an HTML page in headless Chromium and report how each of its images loaded.

A sentinel image with a broken PNG is added to the page, so a caller can prove the check fails:
its natural width comes back 0.
"""

from __future__ import annotations

import html
import json
import re
import subprocess
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
SENTINEL = "sentinel-broken"

_CHECK_SCRIPT = """
<img id="sentinel-broken" alt="deliberately broken image" src="data:image/png;base64,AAAA">
<script>
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.images);
  var out = document.createElement('pre');
  out.id = 'imgcheck';
  out.textContent = JSON.stringify(imgs.map(function (i) {
    return {id: i.id, alt: i.alt, complete: i.complete, w: i.naturalWidth, h: i.naturalHeight};
  }));
  document.body.appendChild(out);
});
</script>
"""


def image_load_results(page: str, work_dir: Path) -> dict[str, dict]:
    """{img id: {id, alt, complete, w, h}} for every image of ``page`` (the sentinel included)
    after Chromium loaded it offline; raises AssertionError with Chromium's stderr on failure."""
    dom, stderr = page_dom(page.replace("</body>", _CHECK_SCRIPT + "</body>"), work_dir)
    m = re.search(r'<pre id="imgcheck">(.*?)</pre>', dom, re.S)
    assert m, "the load handler never ran; chromium stderr: " + stderr[-2000:]
    return {r["id"]: r for r in json.loads(html.unescape(m.group(1)))}


def page_dom(page: str, work_dir: Path) -> tuple[str, str]:
    """(the DOM after headless Chromium loaded ``page`` offline and ran its scripts, Chromium's stderr)."""
    path = work_dir / "page.html"
    path.write_text(page, encoding="utf-8")
    return file_dom(path, work_dir)


def file_dom(path: Path, work_dir: Path, window: tuple[int, int] = (1280, 900)) -> tuple[str, str]:
    """(the DOM after headless Chromium opened the file ``path`` offline in a ``window``-sized
    window and ran its scripts, reloads included, Chromium's stderr); its profile (and so its
    browser storage) lives in ``work_dir``."""
    cmd = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={work_dir / 'chromium-profile'}",
        f"--window-size={window[0]},{window[1]}",
        "--virtual-time-budget=5000",
        "--dump-dom",
        Path(path).resolve().as_uri(),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, proc.stderr
