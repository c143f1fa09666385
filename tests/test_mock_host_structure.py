"""Hosts with structure in the mock sky: the stated fraction of DEV/EXP/SER galaxies carry an offset
clump, the catalog flux is kept, and a structured galaxy is no longer point-symmetric."""

from __future__ import annotations

import numpy as np

from mock_survey.sky import STRUCTURED_FRACTION, MockSky, _Sources, _structure_draws
from tests.test_mock_sky import FOOT, catalog, single


def test_structured_fraction_per_type():
    cat = catalog(6000, seed=3)
    bare = _Sources.from_catalog(cat, structure=False)
    src = _Sources.from_catalog(cat)
    assert not bare.clump.any() and len(src.ra) == len(bare.ra) + int(src.clump.sum())
    # each clump follows its galaxy; the galaxy's type is that of the source before it
    parents = np.flatnonzero(src.clump) - 1
    assert not src.clump[parents].any()
    u = _structure_draws(np.asarray(cat["ra"]), np.asarray(cat["dec"]))[:, 0]
    types = np.array([str(t) for t in cat["type"]])
    for t, frac in STRUCTURED_FRACTION.items():
        sel = types == t
        assert abs((u[sel] < frac).mean() - frac) < 0.04
    assert int(src.clump.sum()) == int(sum(((types == t) & (u < f)).sum() for t, f in STRUCTURED_FRACTION.items()))
    # flux is moved, not added
    np.testing.assert_allclose(src.flux.sum(axis=0), bare.flux.sum(axis=0), rtol=1e-12)


def _structured_position():
    """A position near the footprint's centre whose EXP galaxy is structured."""
    w = FOOT.wcs(0)
    for k in range(400):
        ra, dec = w.pixel_to_world(1700.0 + k, 1750.0 + 2.0 * k)
        if _structure_draws(np.array([ra]), np.array([dec]))[0, 0] < STRUCTURED_FRACTION["EXP"]:
            return float(ra), float(dec)
    raise AssertionError("no structured position found")


def test_a_structured_galaxy_keeps_its_flux_and_loses_its_symmetry():
    ra, dec = _structured_position()
    flux = (20.0, 40.0, 60.0)
    cat = single("EXP", ra, dec, flux, 1.2, (0.1, 0.05))
    images = {}
    for structure in (True, False):
        sky = MockSky(cat, bricks=FOOT, noise=False, structure=structure)
        b, _ = sky.cutouts([ra], [dec], 101)
        images[structure] = b.image[0].astype(np.float64)
        np.testing.assert_allclose(images[structure].sum(axis=(1, 2)), flux, rtol=0.01)

    def asymmetry(img):
        # about the galaxy's own pixel (the cutout centre is the nearest pixel to ra, dec)
        return np.abs(img - img[::-1, ::-1]).sum() / np.abs(img).sum()

    bare, structured = asymmetry(images[False][1]), asymmetry(images[True][1])
    assert structured > 0.05 and structured > 3 * bare
