"""The mock sky: determinism, tile consistency, centring, flux, extra stamps, mock brick files."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from darkhaloscope.errors import InputError
from darkhaloscope.imaging.batch import BAND_MISSING_BIT
from darkhaloscope.imaging.bricks import BrickTable
from darkhaloscope.imaging.coadd import BrickImageSource
from mock_survey.sky import MockSky, gaussian_neff_pix, pixel_sigma

RA0, DEC0 = 150.12, 2.13
FOOT = BrickTable.generate((RA0 - 0.01, RA0 + 0.01), (DEC0 - 0.01, DEC0 + 0.01))


def catalog(n=150, seed=1):
    rng = np.random.default_rng(seed)
    types = rng.choice(["PSF", "REX", "EXP", "DEV", "SER", "DUP"], n)
    return {
        "ra": RA0 + rng.uniform(-0.06, 0.06, n),
        "dec": DEC0 + rng.uniform(-0.06, 0.06, n),
        "type": types,
        "flux_g": 10 ** rng.uniform(0, 1.5, n),
        "flux_r": 10 ** rng.uniform(0, 1.8, n),
        "flux_z": 10 ** rng.uniform(0, 2, n),
        "shape_r": np.where(types == "PSF", 0.0, rng.lognormal(np.log(0.8), 0.5, n)),
        "shape_e1": rng.uniform(-0.3, 0.3, n),
        "shape_e2": rng.uniform(-0.3, 0.3, n),
        "sersic": np.where(types == "SER", rng.uniform(0.8, 5, n), 0.0),
        "psfsize_g": np.full(n, 1.5),
        "psfsize_r": np.full(n, 1.35),
        "psfsize_z": np.full(n, 1.25),
        "psfdepth_g": np.full(n, 2500.0),
        "psfdepth_r": np.full(n, 900.0),
        "psfdepth_z": np.full(n, 180.0),
        "maskbits": np.where(rng.uniform(size=n) < 0.05, 0x2, 0).astype(np.int32),
    }


def single(type_, ra, dec, flux=(20.0, 40.0, 60.0), shape_r=0.0, e=(0.0, 0.0), sersic=0.0):
    c = catalog(1)
    c.update(
        ra=np.array([ra]),
        dec=np.array([dec]),
        type=np.array([type_]),
        flux_g=np.array([flux[0]]),
        flux_r=np.array([flux[1]]),
        flux_z=np.array([flux[2]]),
        shape_r=np.array([shape_r]),
        shape_e1=np.array([e[0]]),
        shape_e2=np.array([e[1]]),
        sersic=np.array([sersic]),
        maskbits=np.zeros(1, np.int32),
    )
    return c


def test_determinism_and_tile_consistency():
    cat = catalog()
    a = MockSky(cat, bricks=FOOT)
    w = FOOT.wcs(0)
    x, y = 1900.0, 1700.0
    ra, dec = w.pixel_to_world(np.array([x, x + 37, x - 120]), np.array([y, y - 23, y + 90]))
    b1, _ = a.cutouts(ra, dec, 101)
    # a fresh sky (cold cache), targets in another order and one at a time
    b2, _ = MockSky(pa.table(cat), bricks=FOOT, cache_tiles=4).cutouts(ra[::-1], dec[::-1], 101)
    assert b1.image.tobytes() == b2.image[::-1].tobytes()
    assert b1.invvar.tobytes() == b2.invvar[::-1].tobytes()
    assert b1.maskbits.tobytes() == b2.maskbits[::-1].tobytes()
    # overlapping windows agree pixel for pixel where they overlap (offset 37, -23 pixels)
    np.testing.assert_array_equal(b1.image[0][:, :-23, 37:], b1.image[1][:, 23:, :-37])
    img, iv, mb = a.render_window(ra[0], dec[0], 101)
    np.testing.assert_array_equal(img, b1.image[0])
    assert img.dtype == np.float32 and iv.dtype == np.float32 and mb.dtype == np.int32
    assert np.all(b1.brickname == FOOT.brickname[0]) and not b1.edge_padded.any() and not b1.band_missing.any()
    # a different noise key changes the noise, not the sources' positions
    c, _ = MockSky(cat, bricks=FOOT, key="other").cutouts(ra[:1], dec[:1], 101)
    assert not np.array_equal(c.image, b1.image[:1])


def test_noise_follows_psfdepth():
    sky = MockSky(single("PSF", RA0, DEC0), bricks=FOOT)
    w = FOOT.wcs(0)
    ra, dec = w.pixel_to_world(np.array([600.0]), np.array([3000.0]))  # far from the source
    b, _ = sky.cutouts(ra, dec, 151)
    sig = pixel_sigma([2500.0, 900.0, 180.0], [1.5, 1.35, 1.25])
    np.testing.assert_allclose(b.image[0].std(axis=(1, 2)), sig, rtol=0.03)
    np.testing.assert_allclose(b.invvar[0, :, 0, 0], 1 / sig**2, rtol=1e-6)
    # PSFDEPTH = 1/(N_eff sigma^2): the 5-sigma point-source flux follows
    assert np.isclose(1.0 / (gaussian_neff_pix(1.5) * sig[0] ** 2), 2500.0)


@pytest.mark.parametrize(
    "type_,shape_r,sersic",
    [("PSF", 0.0, 0.0), ("EXP", 0.9, 0.0), ("DEV", 1.2, 0.0), ("SER", 0.4, 2.5), ("REX", 0.3, 0.0)],
)
def test_centring_and_flux(type_, shape_r, sersic):
    w = FOOT.wcs(0)
    x, y = 1800.37, 1650.81  # known sub-pixel position
    ra, dec = w.pixel_to_world(x, y)
    flux = (20.0, 40.0, 60.0)
    sky = MockSky(single(type_, ra, dec, flux, shape_r, (0.2, -0.1), sersic), bricks=FOOT, noise=False)
    b, _ = sky.cutouts([ra], [dec], 101)
    assert abs(b.dx[0] - 0.37) < 1e-6 and abs(b.dy[0] - (-0.19)) < 1e-6
    img = b.image[0].astype(np.float64)
    np.testing.assert_allclose(img.sum(axis=(1, 2)), flux, rtol=0.01)
    yy, xx = np.mgrid[:101, :101]
    for j in range(3):
        cx = (img[j] * xx).sum() / img[j].sum()
        cy = (img[j] * yy).sum() / img[j].sum()
        assert abs(cx - (50 + 0.37)) < 0.05 and abs(cy - (50 - 0.19)) < 0.05, (type_, j, cx, cy)
    if type_ == "PSF":  # a point source is the PSF: a Moffat (beta 3.5) of FWHM 1.5" to 3 FWHM
        r2 = ((xx - 50.37) ** 2 + (yy - 49.81) ** 2) * img[0]
        sigma = np.sqrt(r2.sum() / img[0].sum() / 2) * 0.262
        assert abs(sigma - _truncated_moffat_sigma(1.5, 3.5, np.ceil(3 * 1.5 / 0.262) * 0.262)) < 0.01 * sigma


def _truncated_moffat_sigma(fwhm: float, beta: float, half_width: float) -> float:
    """Per-axis RMS width (arcsec) of a Moffat profile cut to the square |x|, |y| <= half_width + 1/2 px."""
    alpha = fwhm / (2 * np.sqrt(2 ** (1 / beta) - 1))
    h = half_width + 0.131
    t = np.linspace(-h, h, 1201)
    x, y = np.meshgrid(t, t)
    p = (1 + (x**2 + y**2) / alpha**2) ** -beta
    return float(np.sqrt((p * x**2).sum() / p.sum()))


def test_ellipse_orientation():
    # Tractor e1 > 0 with PA 0 (East of North) puts the major axis North-South: along image y
    w = FOOT.wcs(0)
    ra, dec = w.pixel_to_world(1800.0, 1800.0)
    sky = MockSky(single("EXP", ra, dec, (50, 50, 50), 2.0, (0.5, 0.0)), bricks=FOOT, noise=False)
    img = sky.cutouts([ra], [dec], 101)[0].image[0, 1].astype(np.float64)
    yy, xx = np.mgrid[:101, :101] - 50
    assert (img * yy**2).sum() > 2 * (img * xx**2).sum()


def test_extra_stamps_are_added_at_their_position():
    w = FOOT.wcs(0)
    x, y = 1500.25, 2100.0
    ra, dec = w.pixel_to_world(x, y)
    stamp = np.zeros((3, 41, 41))
    yy, xx = np.mgrid[:41, :41] - 20
    ring = np.exp(-0.5 * ((np.hypot(xx, yy) - 8) / 1.5) ** 2)
    stamp[:] = ring / ring.sum() * np.array([5.0, 7.0, 9.0])[:, None, None]
    base = MockSky(catalog(), bricks=FOOT, noise=False).cutouts([ra], [dec], 101)[0].image[0]
    with_arc = (
        MockSky(catalog(), bricks=FOOT, noise=False, extra_stamps=[(ra, dec, stamp)])
        .cutouts([ra], [dec], 101)[0]
        .image[0]
    )
    diff = (with_arc - base).astype(np.float64)
    np.testing.assert_allclose(diff.sum(axis=(1, 2)), [5.0, 7.0, 9.0], rtol=1e-3)
    gy, gx = np.mgrid[:101, :101]
    assert abs((diff[2] * gx).sum() / diff[2].sum() - 50.25) < 0.05
    with pytest.raises(InputError, match="extra stamp 0"):
        MockSky(catalog(), bricks=FOOT, extra_stamps=[(ra, dec, np.zeros((2, 5, 5)))])


def test_bad_catalog_and_outside_footprint():
    cat = catalog()
    del cat["psfdepth_r"]
    with pytest.raises(InputError, match="psfdepth_r"):
        MockSky(cat, bricks=FOOT)
    cat = catalog()
    cat["type"] = cat["type"].astype(object)
    cat["type"][0] = "XYZ"
    with pytest.raises(InputError, match="XYZ"):
        MockSky(cat, bricks=FOOT)
    b, _ = MockSky(catalog(), bricks=FOOT).cutouts([10.0], [-40.0], 51)
    assert b.band_missing[0] == 0b111 and not b.invvar.any() and b.brickname[0] == ""


@pytest.fixture(scope="module")
def mock_mirror(tmp_path_factory):
    root = tmp_path_factory.mktemp("mockdr10")
    sky = MockSky(catalog(), bricks=FOOT)
    brick = str(FOOT.brickname[0])
    paths = sky.write_mock_brick(brick, str(root), bands=("g",))
    FOOT.write_fits(str(root / "survey-bricks.fits.gz"))
    return sky, root, paths


def test_mock_brick_files_equal_mock_sky(mock_mirror):
    from astropy.io import fits

    sky, root, paths = mock_mirror
    assert len(paths) == 3  # image-g, invvar-g, maskbits
    with fits.open(paths[0]) as h:
        assert h[1].compression_type == "GZIP_2" and h[1].tile_shape == (100, 100)
        assert h[1].data.shape == (3600, 3600) and h[1].header["CTYPE1"] == "RA---TAN"
    w = FOOT.wcs(0)
    xs = np.array([1800.2, 30.0, 3575.0, 900.7])  # centre, both edges (neighbour bricks absent), interior
    ys = np.array([1799.6, 1000.0, 3400.0, 2999.4])
    ra, dec = w.pixel_to_world(xs, ys)
    src = BrickImageSource(str(root))
    assert len(src.bricks) == len(FOOT)
    got, _ = src.cutouts(ra, dec, 101)
    want, _ = sky.cutouts(ra, dec, 101)
    np.testing.assert_array_equal(got.image[:, 0], want.image[:, 0])
    np.testing.assert_array_equal(got.invvar[:, 0], want.invvar[:, 0])
    np.testing.assert_array_equal(got.maskbits, want.maskbits)
    np.testing.assert_array_equal(got.edge_padded, want.edge_padded)
    assert got.edge_padded[1] and got.edge_padded[2]
    assert np.all(got.band_missing == BAND_MISSING_BIT["r"] | BAND_MISSING_BIT["z"])
    assert not got.invvar[:, 1:].any()
    # NPRIMARY marks pixels outside the brick's primary region (the 0.25 deg box)
    assert got.maskbits[1, 50, 70] & 1 and not got.maskbits[1, 50, 10] and not got.maskbits[0, 50, 50] & 1


def test_mock_brick_compressed_as_dr10(mock_mirror, tmp_path):
    """lossless=False writes the files as DR10's (RICE_1, SUBTRACTIVE_DITHER_2): the cutouts equal
    the mock sky within the quantization step, and uncovered (zero) pixels stay exactly zero."""
    from astropy.io import fits

    sky, _, _ = mock_mirror
    brick = str(FOOT.brickname[0])
    paths = sky.write_mock_brick(brick, str(tmp_path), bands=("g",), lossless=False)
    with fits.open(paths[0], disable_image_compression=True) as h:
        assert h[1].header["ZCMPTYPE"] == "RICE_1" and h[1].header["ZQUANTIZ"] == "SUBTRACTIVE_DITHER_2"
        step = float(np.max(h[1].data["ZSCALE"]))
    FOOT.write_fits(str(tmp_path / "survey-bricks.fits.gz"))
    w = FOOT.wcs(0)
    ra, dec = w.pixel_to_world(np.array([1800.2, 30.0, 900.7]), np.array([1799.6, 1000.0, 2999.4]))
    got, _ = BrickImageSource(str(tmp_path)).cutouts(ra, dec, 101)
    want, _ = sky.cutouts(ra, dec, 101)
    assert 0 < step and np.max(np.abs(got.image[:, 0] - want.image[:, 0])) <= step
    assert np.array_equal(got.image[:, 0] == 0, want.image[:, 0] == 0)
    np.testing.assert_array_equal(got.maskbits, want.maskbits)


@pytest.mark.s3
def test_brick_mirror_on_s3_gives_the_mock_sky_in_every_band(tmp_path, s3_server):
    """A DR10-layout mirror with all three bands, uploaded to the loopback S3 server and read
    through a pyarrow S3 filesystem: images, invvar and maskbits equal the mock sky's, band by band."""
    import pyarrow.fs as pafs

    from tests.support.s3_server import fresh_bucket

    sky = MockSky(catalog(), bricks=FOOT)
    local = tmp_path / "mirror"
    sky.write_mock_brick(str(FOOT.brickname[0]), str(local), bands=("g", "r", "z"))
    FOOT.write_fits(str(local / "survey-bricks.fits.gz"))
    bucket = fresh_bucket(s3_server)
    s3 = pafs.S3FileSystem(endpoint_override=s3_server.endpoint_override, scheme="http", region="us-east-1")
    pafs.copy_files(str(local), f"{bucket}/dr10", source_filesystem=pafs.LocalFileSystem(), destination_filesystem=s3)
    w = FOOT.wcs(0)
    ra, dec = w.pixel_to_world(np.array([1800.2, 900.7, 2500.5]), np.array([1799.6, 2999.4, 600.3]))
    got, _ = BrickImageSource(f"{bucket}/dr10", filesystem=s3).cutouts(ra, dec, 101)
    want, _ = sky.cutouts(ra, dec, 101)
    np.testing.assert_array_equal(got.image, want.image)
    np.testing.assert_array_equal(got.invvar, want.invvar)
    np.testing.assert_array_equal(got.maskbits, want.maskbits)
    assert not got.band_missing.any() and got.invvar.all()
