"""The host model of the host-fit diagnostics (``research.host_model``): it fits the mock sky's
galaxies to the noise, and its linearised refit removes what the host model can absorb and keeps
what it cannot.

    python -m pytest research/tests
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from darkhaloscope.imaging.bricks import BrickTable
from darkhaloscope.training.preprocess import PreprocessSpec, annulus_stats
from mock_survey.sky import MockSky
from research.host_model import FIT_SIZE, fit_hosts, refit_change, refit_share_kept

RA0, DEC0 = 150.12, 2.13
FOOT = BrickTable.generate((RA0 - 0.01, RA0 + 0.01), (DEC0 - 0.01, DEC0 + 0.01))
#: (type, SHAPE_R arcsec, e1, e2, Sérsic n, flux_r nmgy): the mock sky's host types
HOSTS = [("DEV", 1.2, 0.15, -0.1, 4.0, 25.0), ("SER", 0.8, -0.2, 0.05, 2.5, 15.0), ("EXP", 1.6, 0.0, 0.3, 1.0, 10.0)]
PSF_FWHM = (1.45, 1.3, 1.2)


def _hosts():
    """Stamps (3, 3, 101, 101) [nmgy] of the three hosts, each alone on the sky with the mock's noise."""
    wcs = FOOT.wcs(0)
    pos = [wcs.pixel_to_world(x, 1800.0) for x in (900.0, 1800.0, 2700.0)]
    ra, dec = (np.array([float(p[i]) for p in pos]) for i in (0, 1))
    col = lambda i: np.array([h[i] for h in HOSTS])  # noqa: E731
    cat = {
        "ra": ra,
        "dec": dec,
        "type": col(0),
        "shape_r": col(1),
        "shape_e1": col(2),
        "shape_e2": col(3),
        "sersic": col(4),
        "flux_g": col(5) * 0.4,
        "flux_r": col(5),
        "flux_z": col(5) * 1.8,
        "maskbits": np.zeros(3, np.int32),
        **{f"psfsize_{b}": np.full(3, f) for b, f in zip("grz", PSF_FWHM)},
        "psfdepth_g": np.full(3, 2500.0),
        "psfdepth_r": np.full(3, 900.0),
        "psfdepth_z": np.full(3, 180.0),
    }
    return MockSky(cat, bricks=FOOT).cutouts(ra, dec, 101)[0].image


@pytest.fixture(scope="module")
def fitted():
    """(per-band σ (3, 3) nmgy, the fit with its tangent basis and columns) of the three hosts."""
    torch.set_num_threads(1)
    stamps = _hosts()
    sigma = (
        annulus_stats(torch.from_numpy(np.ascontiguousarray(stamps)), PreprocessSpec(crop=FIT_SIZE))[1]
        .numpy()
        .reshape(3, 3)
    )
    return sigma, fit_hosts(stamps, np.tile(PSF_FWHM, (3, 1)), sigma.astype(np.float64), tangent=True, columns=True)


def _tangent_share(x: np.ndarray, fit: dict, sigma: np.ndarray) -> np.ndarray:
    """(3,) share of images x (3, 3, FIT_SIZE, FIT_SIZE) [nmgy], in σ units, that the refit leaves."""
    norm = lambda a: np.linalg.norm((a / sigma[:, :, None, None]).reshape(3, -1), axis=1)  # noqa: E731
    return norm(refit_change(x, fit["tangent"], torch.from_numpy(sigma).float())) / norm(x)


def test_the_mock_hosts_fit_to_the_noise_and_the_refit_keeps_what_no_host_absorbs(fitted):
    sigma, fit = fitted
    # χ² per pixel of a model exact to the noise is 1 ± √(2/7203) = 1 ± 0.017; the bound leaves room
    # for the DEV core's 2 × 2 sub-pixel rendering, and a PSF 10 % too broad exceeds it
    assert np.all(np.abs(fit["chi2"].numpy() - 1.0) < 0.08), fit["chi2"]
    brighter = 0.05 * fit["model"].numpy()  # 5 % more of the host: a host model absorbs all of it
    assert np.all(_tangent_share(brighter, fit, sigma) < 1e-4)
    yy, xx = np.mgrid[:FIT_SIZE, :FIT_SIZE] - (FIT_SIZE - 1) / 2
    blob = (
        np.broadcast_to(np.exp(-((xx - 9.0) ** 2 + (yy - 3.0) ** 2) / 4.5), (3, 3, FIT_SIZE, FIT_SIZE))
        * sigma[:, :, None, None]
    )
    kept = _tangent_share(blob, fit, sigma)
    assert np.all(kept > 0.9), kept  # a compact image 9.5 px off the centre is nothing a Sérsic host makes


def test_a_prior_on_the_host_colours_keeps_more_of_a_blue_image_and_none_of_a_brighter_host(fitted):
    sigma, fit = fitted
    s = torch.from_numpy(sigma).float()
    # a blue image at the host's centre, the host's shape: what an unresolved ring looks like to the fit
    model = fit["model"].numpy() - np.median(fit["model"].numpy(), axis=(2, 3), keepdims=True)
    blue = (
        0.05
        * model
        * np.array([2.5, 1.0, 0.4])[None, :, None, None]
        / (fit["flux"].numpy() / fit["flux"].numpy()[:, 1:2])[:, :, None, None]
    )
    free = refit_share_kept(blue, fit, s)
    np.testing.assert_allclose(
        free, _tangent_share(blue, fit, sigma), atol=1e-4
    )  # free colours: the tangent space's projection
    kept = [refit_share_kept(blue, fit, s, (sd, sd)) for sd in (0.2, 0.05, 0.0)]
    assert np.all(free < 1e-4), free  # the free fluxes take an image of the host's shape whatever its colour
    assert np.all(np.diff(np.stack([free, *kept]), axis=0) > 0), kept  # the tighter the prior, the more is left
    assert np.all(kept[-1] > 0.5), kept  # held colours: its colour difference from the host stands
    brighter = 0.05 * fit["model"].numpy()
    assert np.all(
        refit_share_kept(brighter, fit, s, (0.0, 0.0)) < 1e-4
    )  # more of the host, its own colours: absorbed whole
