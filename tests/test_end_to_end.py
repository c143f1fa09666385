"""The demo: the whole graph on the embedded mock survey, from sweeps to the evaluation report."""

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import require_chromium
from tests.support.chromium import SENTINEL, image_load_results


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_demo_runs_end_to_end(tmp_path):
    env = dict(os.environ, DHS_LAKE=str(tmp_path / "lakehouse"), DAGSTER_HOME=str(tmp_path / "dagster_home"), DHS_MOCK_DIR=str(tmp_path / "mock"), DHS_PROFILE="demo", PYTHONWARNINGS="ignore")
    run = subprocess.run([sys.executable, "-m", "lens_assets.cli", "demo"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert "Selection function C(theta_E, z_l)" in run.stdout and "Evaluation report:" in run.stdout

    def query(sql):
        out = subprocess.run([sys.executable, "-m", "lens_assets.cli", "query", sql, "--format", "json"], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    cells = query("select threshold_name, count(*) filter (where n_valid > 0) as nonempty, count(*) as cells from selection_function group by 1")
    assert cells and all(c["nonempty"] == c["cells"] == 99 for c in cells)
    recall = query("select * from real_lens_recall where tier = 'all'")
    assert recall and all(r["n"] > 0 for r in recall)
    report = query("select uri, figures from evaluation_report")[0]
    assert os.path.exists(report["uri"]) and report["figures"] >= 5

    # dhs cutout: a FITS cube (band, y, x) whose WCS puts the lens at the requested position
    lens = query("select ra, dec from positives order by name limit 1")[0]
    out = tmp_path / "lens.fits"
    cut = subprocess.run([sys.executable, "-m", "lens_assets.cli", "cutout", str(lens["ra"]), str(lens["dec"]), "--out", str(out)], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert cut.returncode == 0, cut.stderr
    from astropy.io import fits
    from astropy.wcs import WCS

    with fits.open(out) as hdul:
        assert hdul[0].data.shape == (3, 101, 101) and hdul["INVVAR"].data.shape == (3, 101, 101)
        x, y = WCS(hdul[0].header).celestial.world_to_pixel_values(lens["ra"], lens["dec"])
    assert abs(x - 50) < 0.5 and abs(y - 50) < 0.5
    # ... and a position outside the survey is refused, not written as an all-zero stamp
    far = subprocess.run([sys.executable, "-m", "lens_assets.cli", "cutout", "0.5", "-80", "--out", str(tmp_path / "far.fits")], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert far.returncode == 1 and "no imaging data" in far.stderr and not (tmp_path / "far.fits").exists()

    # a failing materialization names the asset and exits non-zero
    bad = subprocess.run([sys.executable, "-m", "lens_assets.cli", "materialize", "no_such_asset"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert bad.returncode == 1 and "unknown asset 'no_such_asset'" in bad.stderr

    # last, so that without Chromium everything else has been checked before the test is marked
    # skipped (failed in CI): the lake's own report, every figure decodes in a browser
    require_chromium()
    loaded = image_load_results(open(report["uri"], encoding="utf-8").read(), tmp_path)
    assert loaded.pop(SENTINEL)["w"] == 0
    assert len(loaded) >= report["figures"] and all(r["complete"] and r["w"] > 0 for r in loaded.values()), loaded
