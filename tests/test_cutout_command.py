"""``dhs cutout``: checked requests (exit 2, ``error:``), refusals without data (exit 1), real output.

The imaging sources are real: a DR10-layout mirror whose g band is the real brick 0959p805
(symlinks, nothing copied), and the loopback cutout service of tests.support.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from astropy.io import fits
from astropy.wcs import WCS

from darkhaloscope.imaging.coadd import coadd_path
from darkhaloscope.imaging.wcs import TanWCS
from dhs.main import main
from tests.support.cutout_server import CutoutServer, expected_cube

BRICK = "0959p805"


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    from tests.conftest import require_real_file

    real = [require_real_file(f"legacysurvey-{BRICK}-{kind}-g.fits.fz") for kind in ("image", "invvar")]
    root = tmp_path_factory.mktemp("mirror")
    for kind, src in zip(("image", "invvar"), real):
        p = coadd_path(str(root), BRICK, kind, "g")
        os.makedirs(os.path.dirname(p), exist_ok=True)
        os.symlink(src, p)
    with fits.open(real[1]) as h:
        iv, hdr = h[1].data, h[1].header
        ys, xs = np.nonzero(iv[600:3000, 600:3000] > 0)  # this edge brick is partly covered
        covered = TanWCS.from_header(hdr).pixel_to_world(xs[len(xs) // 2] + 600.0, ys[len(ys) // 2] + 600.0)
    return root, tuple(float(v) for v in covered)


@pytest.fixture
def dhs(monkeypatch, tmp_path, capsys):
    """Run ``dhs cutout ...`` in-process on a survey mirror; returns (exit code, stdout, stderr)."""
    monkeypatch.setenv("DHS_LAKE", str(tmp_path / "lake"))
    monkeypatch.delenv("DHS_CUTOUT_MAX_SIZE", raising=False)

    def run(*args, survey=None, source="auto"):
        monkeypatch.setenv("DHS_SURVEY", str(survey) if survey else "mock")
        monkeypatch.setenv("DHS_CUTOUT_SOURCE", source)
        code = main(["cutout", *map(str, args)])
        out = capsys.readouterr()
        assert "Traceback" not in out.err
        return code, out.out, out.err

    return run


def test_fits_and_png_of_a_real_brick(dhs, mirror, tmp_path):
    root, (ra, dec) = mirror
    code, out, err = dhs(ra, dec, "--size", 64, "--out", tmp_path / "c.fits", survey=root)
    assert code == 0, err
    with fits.open(tmp_path / "c.fits") as h:
        assert h[0].data.shape == (3, 64, 64) and h["INVVAR"].data[0].max() > 0
        x, y = WCS(h[0].header).celestial.world_to_pixel_values(ra, dec)
    assert abs(x - 32) <= 0.5 and abs(y - 32) <= 0.5
    code, _, err = dhs(ra, dec, "--out", tmp_path / "c.png", survey=root)
    assert code == 0, err
    assert (tmp_path / "c.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize(
    "args, message",
    [
        (("400", "10"), "RA 400.0 deg is outside [0, 360)"),
        (("360", "10"), "RA 360.0 deg is outside [0, 360)"),
        (("-0.5", "10"), "RA -0.5 deg is outside"),
        (("nan", "10"), "RA nan deg"),
        (("10", "90.5"), "DEC 90.5 deg is outside [-90, 90]"),
        (("10", "-90.5"), "DEC -90.5 deg is outside"),
        (("10", "inf"), "DEC inf deg"),
        (("10", "5", "--size", "0"), "size 0 pixels is outside [1, 1024]"),
        (("10", "5", "--size", "100000"), "size 100000 pixels is outside [1, 1024]"),
    ],
)
def test_out_of_range_requests_are_usage_errors(dhs, tmp_path, monkeypatch, args, message):
    # nothing is built, read or allocated before the request is checked
    monkeypatch.setattr("resources.config.build_resources", lambda: pytest.fail("source built for a bad request"))
    code, _, err = dhs(*args, "--out", tmp_path / "c.fits")
    assert code == 2 and err.startswith("error: ") and message in err, err
    assert not (tmp_path / "c.fits").exists()


@pytest.mark.parametrize("name", ["x.txt", "x", "cutout.fits.txt", ".fits"])
def test_unknown_output_extension_is_refused(dhs, tmp_path, monkeypatch, name):
    monkeypatch.setattr("resources.config.build_resources", lambda: pytest.fail("source built for a bad request"))
    code, _, err = dhs(10, 5, "--out", tmp_path / name)
    assert code == 2 and "unknown extension" in err and name in err
    assert not (tmp_path / name).exists()


def test_target_without_data_in_any_band_is_refused(dhs, mirror, tmp_path):
    root, _ = mirror
    code, out, err = dhs(10.0, -40.0, "--out", tmp_path / "c.fits", survey=root)
    assert code == 1 and "no imaging data at RA=10.0, DEC=-40.0 in any band" in err
    assert not (tmp_path / "c.fits").exists()


def test_the_size_limit_is_configurable(dhs, mirror, tmp_path, monkeypatch):
    root, (ra, dec) = mirror
    monkeypatch.setenv("DHS_CUTOUT_MAX_SIZE", "48")
    code, _, err = dhs(ra, dec, "--size", 64, "--out", tmp_path / "c.fits", survey=root)
    assert code == 2 and "[1, 48]" in err
    monkeypatch.setenv("DHS_CUTOUT_MAX_SIZE", "2048")
    code, _, err = dhs(ra, dec, "--size", 1100, "--out", tmp_path / "c.fits", survey=root)
    assert code == 0, err
    monkeypatch.setenv("DHS_CUTOUT_MAX_SIZE", "lots")
    code, _, err = dhs(ra, dec, "--out", tmp_path / "c.fits", survey=root)
    assert code == 2 and "DHS_CUTOUT_MAX_SIZE='lots'" in err


def test_fetch_and_write_failures_exit_1_and_fetches_pass(dhs, tmp_path):
    with CutoutServer(size=15) as srv:
        srv.script(20.0, 5.0, [404])
        code, _, err = dhs(20.0, 5.0, "--size", 15, "--out", tmp_path / "a.fits", source=srv.base_url)
        assert code == 1 and "could not be fetched: http_404" in err
        (tmp_path / "afile").write_text("not a folder")
        code, _, err = dhs(21.0, 5.0, "--size", 15, "--out", tmp_path / "afile" / "b.fits", source=srv.base_url)
        assert code == 1 and err.startswith("error: ") and "afile" in err
        code, _, err = dhs(21.0, 5.0, "--size", 15, "--out", tmp_path / "b.fits", source=srv.base_url)
    assert code == 0, err
    with fits.open(tmp_path / "b.fits") as h:
        np.testing.assert_array_equal(h[0].data, expected_cube(21.0, 5.0, 15)[0])
