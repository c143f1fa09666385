"""Known lenses of the mock survey: the SIE mass has the light's position angle in the painted image.

Frames (evidence in the tests below): the mock sky draws a brick with pixel x towards West (RA
decreases with x) and y North; Tractor's position angle is East of North. The lensing engine's x is
East (x = −(i − c) pix) and y North, so Tractor (e1, e2) is the engine's (−e1, +e2).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch

from darkhaloscope.imaging.bricks import BrickTable
from darkhaloscope.lensing.render import pixel_coordinates
from darkhaloscope.lensing.sie import LensBatch, sie_convergence
from mock_survey.lenses import draw_known_lenses, tractor_to_engine_ellipticity
from mock_survey.sky import MockSky
from mock_survey.truth_render import TRUTH_RENDER_FIELDS, render_truth_arcs, truth_engine

RA0, DEC0 = 150.12, 2.13
FOOT = BrickTable.generate((RA0 - 0.01, RA0 + 0.01), (DEC0 - 0.01, DEC0 + 0.01))
N = 101
SHAPES = [(0.3, 0.0), (0.0, 0.3), (-0.2, 0.2), (0.1, -0.25)]


def _galaxy(ra, dec, e, flux_r=50.0):
    one = lambda v: np.array([v])  # noqa: E731
    return {
        "ra": one(ra),
        "dec": one(dec),
        "type": one("EXP"),
        "flux_g": one(0.0),
        "flux_r": one(flux_r),
        "flux_z": one(0.0),
        "shape_r": one(1.5),
        "shape_e1": one(e[0]),
        "shape_e2": one(e[1]),
        "sersic": one(1.0),
        "psfsize_g": one(0.8),
        "psfsize_r": one(0.8),
        "psfsize_z": one(0.8),
        "psfdepth_g": one(2500.0),
        "psfdepth_r": one(900.0),
        "psfdepth_z": one(180.0),
        "maskbits": np.zeros(1, np.int32),
    }


def _pixel_angle(img: np.ndarray) -> float:
    """Second-moment major-axis angle [deg] from pixel +x (column) towards +y (row), in (−90, 90]."""
    yy, xx = np.mgrid[: img.shape[0], : img.shape[1]].astype(np.float64)
    m = img.sum()
    xx -= (img * xx).sum() / m
    yy -= (img * yy).sum() / m
    qxx, qyy, qxy = ((img * a * b).sum() / m for a, b in ((xx, xx), (yy, yy), (xx, yy)))
    return float(np.degrees(0.5 * np.arctan2(2 * qxy, qxx - qyy)))


def _axis_diff(a: float, b: float) -> float:
    """Difference of two axis angles [deg], modulo 180, in [0, 90]."""
    d = (a - b) % 180.0
    return min(d, 180.0 - d)


def _centre():
    ra, dec = FOOT.wcs(0).pixel_to_world(1800.0, 1800.0)
    return float(ra), float(dec)


def _light_angle(e) -> float:
    ra, dec = _centre()
    img = MockSky(_galaxy(ra, dec, e), bricks=FOOT, noise=False).cutouts([ra], [dec], N)[0].image[0, 1]
    return _pixel_angle(img.astype(np.float64))


def test_brick_pixels_are_west_and_north():
    w = FOOT.wcs(0)
    ra, dec = w.pixel_to_world(1800.0, 1800.0)
    rx, dx = w.pixel_to_world(1801.0, 1800.0)
    ry, dy = w.pixel_to_world(1800.0, 1801.0)
    assert rx < ra and abs(dx - dec) < 1e-9  # +x is West
    assert dy > dec and abs(ry - ra) < 1e-9  # +y is North


def test_conversion_values():
    e1, e2 = tractor_to_engine_ellipticity(np.array([0.3, 0.0, -0.2]), np.array([0.0, 0.3, 0.2]))
    np.testing.assert_allclose(e1, [-0.3, 0.0, 0.2])
    np.testing.assert_allclose(e2, [0.0, 0.3, 0.2])


@pytest.mark.parametrize("e", SHAPES)
def test_convergence_has_the_light_position_angle(e):
    l1, l2 = tractor_to_engine_ellipticity(*e)
    lens = LensBatch.from_arrays(
        dtype=torch.float64,
        theta_e=[1.5],
        e1=[float(l1)],
        e2=[float(l2)],
        center_x=[0.0],
        center_y=[0.0],
        gamma1=[0.0],
        gamma2=[0.0],
    )
    xc, yr = pixel_coordinates(N, 0.262)  # the engine's grid of a painted stamp, [row, column]
    y, x = torch.meshgrid(yr, xc, indexing="ij")
    kappa = sie_convergence(x[None], y[None], lens)[0].numpy()
    r = np.hypot(*(np.mgrid[:N, :N] - N // 2))
    kappa = np.where((r > 3) & (r < 40), kappa, 0.0)  # drop the cusp and the square's corners
    assert _axis_diff(_pixel_angle(kappa), _light_angle(e)) < 2.0


@pytest.mark.parametrize("e", SHAPES[:3])
def test_painted_einstein_cross_is_perpendicular_to_the_light(e):
    # A centred compact source's images lie furthest out along the SIE's minor axis (the deflection
    # is largest there), so the painted arcs, placed by the mock sky exactly as the known lenses' are,
    # are elongated at 90 degrees to the mass, i.e. to the light.
    ra, dec = _centre()
    l1, l2 = tractor_to_engine_ellipticity(*e)
    truth = pa.table(
        {
            "theta_e_arcsec": [1.5],
            "lens_e1": [float(l1)],
            "lens_e2": [float(l2)],
            "shear_g1": [0.0],
            "shear_g2": [0.0],
            "src_mag_r": [20.0],
            "src_r_sersic_arcsec": [0.05],
            "src_n_sersic": [1.0],
            "src_e1": [0.0],
            "src_e2": [0.0],
            "src_x_arcsec": [0.0],
            "src_y_arcsec": [0.0],
            "src_g_minus_r": [0.0],
            "src_r_minus_z": [0.0],
            # an isothermal lens without multipoles, a plain Sérsic source
            **{f.name: [0] for f in TRUTH_RENDER_FIELDS},
            "source_model": ["sersic"],
            "truth_engine": [truth_engine()],
            "lens_gamma": [2.0],
            "source_flip": [False],
        }
    )
    arc = render_truth_arcs(truth, np.array([[0.8, 0.8, 0.8]]), stamp_size=N, poisson=False).stamps[0]
    sky = MockSky(_galaxy(ra, dec, e, flux_r=1e-9), bricks=FOOT, noise=False, extra_stamps=[(ra, dec, arc)])
    painted = sky.cutouts([ra], [dec], N)[0].image[0, 1].astype(np.float64)
    assert _axis_diff(_pixel_angle(painted), _light_angle(e) + 90.0) < 3.0


def test_mock_truth_mass_follows_light():
    lenses = pa.table({"name": [f"L{i}" for i in range(40)], "z_lens": [0.4] * 40})
    d = draw_known_lenses(lenses, seed=7)
    le1, le2 = tractor_to_engine_ellipticity(d["shape_e1"], d["shape_e2"])
    ok = np.hypot(d["shape_e1"], d["shape_e2"]) > 0.02
    engine_pa = 0.5 * np.arctan2(d["lens_e2"][ok], d["lens_e1"][ok])
    light_pa = 0.5 * np.arctan2(le2[ok], le1[ok])
    diff = np.degrees((engine_pa - light_pa + np.pi / 2) % np.pi - np.pi / 2)
    np.testing.assert_allclose(diff, 0.0, atol=1e-6)
    assert (np.hypot(d["lens_e1"], d["lens_e2"]) <= np.hypot(d["shape_e1"], d["shape_e2"]) + 1e-12).all()
