"""PreprocessSpec round trip and the normalisation / residual / crop arithmetic."""

import numpy as np
import pytest
import torch

from darkhaloscope.errors import InputError
from darkhaloscope.training.preprocess import (
    PreprocessSpec,
    annulus_stats,
    antisymmetric_part,
    asinh,
    core_mask,
    light_centre,
    preprocess,
    radius_grid,
    subtract_radial_profile,
)


def test_spec_json_round_trip():
    for spec in (
        PreprocessSpec(),
        PreprocessSpec(annulus_frac=(0.5, 0.8), clip=20.0, crop=65, residual="append"),
        PreprocessSpec(residual="append", stretch="asinh", colour_difference=True),
        PreprocessSpec(crop=49, residual="append", stretch="asinh", colour_difference=True, antisymmetric=True),
    ):
        assert PreprocessSpec.from_json(spec.to_json()) == spec
        assert PreprocessSpec.from_dict(spec.to_dict()) == spec
    with pytest.raises(InputError, match="unknown fields"):
        PreprocessSpec.from_dict({"clip": 3, "mode": "x"})
    with pytest.raises(InputError, match="not valid JSON"):
        PreprocessSpec.from_json("{")
    for bad in (dict(crop=64), dict(clip=0), dict(annulus_frac=(0.9, 0.5)), dict(residual="yes")):
        with pytest.raises(InputError):
            PreprocessSpec(**bad)


def test_annulus_is_sized_to_the_stamp():
    r = radius_grid(101, 101)
    assert r[50, 50] == 0 and core_mask(101, 101, 5).sum() == 69
    # on 101 px the default annulus is 32.5 <= r < 45 px (not the 64 px-era 20-32 px)
    x = torch.zeros(1, 3, 101, 101)
    x[..., torch.from_numpy((r >= 32.5) & (r < 45))] = 7.0
    med, _ = annulus_stats(x, PreprocessSpec())
    assert torch.all(med == 7.0)


def test_robust_normalisation_nan_and_clip():
    rng = np.random.default_rng(0)
    x = (5.0 + 2.0 * rng.standard_normal((4, 3, 101, 101))).astype(np.float32)
    x[:, :, 50, 50] = 1e4  # a bright core must be clipped, not rescale the image
    x[0, 1, 10, 10] = np.nan
    z = preprocess(x, PreprocessSpec())
    assert z.shape == (4, 3, 101, 101) and z.dtype == torch.float32 and torch.isfinite(z).all()
    ann = torch.from_numpy((radius_grid(101, 101) >= 32.5) & (radius_grid(101, 101) < 45))
    vals = z[..., ann]
    assert abs(float(vals.median())) < 0.05 and abs(float(vals.std()) - 1.0) < 0.05  # 1.4826 MAD = sigma
    assert float(z[0, 1, 10, 10]) == 0.0 and float(z[:, :, 50, 50].min()) == 10.0
    assert torch.equal(z, preprocess(torch.from_numpy(x), PreprocessSpec()))


def test_residual_removes_radial_profile_and_crop():
    r = radius_grid(33, 33)
    host = np.exp(-0.5 * (r / 3.0) ** 2) * 50
    x = np.broadcast_to(host, (2, 3, 33, 33)).astype(np.float32) + np.random.default_rng(1).normal(
        0, 1, (2, 3, 33, 33)
    ).astype(np.float32)
    raw = preprocess(x, PreprocessSpec())
    both = preprocess(x, PreprocessSpec(residual="append"))
    res = preprocess(x, PreprocessSpec(residual="replace", crop=11))
    assert both.shape == (2, 6, 33, 33) and res.shape == (2, 3, 11, 11)
    assert torch.equal(both[:, :3], raw)
    core = torch.from_numpy(core_mask(33, 33, 4))
    assert float(raw[..., core].mean()) > 5 and abs(float(both[:, 3:][..., core].mean())) < 1.0


def test_colour_difference_cancels_the_host_and_keeps_a_blue_core():
    """g - α z with α the core's g/z ratio: a red host leaves noise; an unresolved blue source on its
    core, which the radial-profile residual absorbs, stands out: bluer than the core's mean colour
    at its centre, redder around it (α is pulled towards its colour); noise is in its own sigma."""
    rng = np.random.default_rng(5)
    r = radius_grid(101, 101)
    host = 200.0 * np.exp(-r / 4.0)
    source = 40.0 * np.exp(-0.5 * (r / 2.0) ** 2)  # θ_E ~ 0, a PSF-sized brightening of the core
    noise = np.array([1.0, 1.5, 3.0])[:, None, None]  # per-band sky sigma, nanomaggies
    ctrl = np.stack([0.15 * host, 0.5 * host, host]) + noise * rng.standard_normal((3, 101, 101))
    lens = ctrl + np.stack([source, 0.6 * source, 0.3 * source])  # bluer than the host
    stamps = np.stack([ctrl, lens]).astype(np.float32)
    spec = PreprocessSpec(crop=49, residual="append", stretch="asinh", colour_difference=True)
    z = preprocess(stamps, spec)
    assert z.shape == (2, 7, 49, 49) and spec.out_channels(3) == 7
    assert torch.equal(z[:, :6], preprocess(stamps, PreprocessSpec(crop=49, residual="append", stretch="asinh")))
    r49 = radius_grid(49, 49)
    core, around, outer = (torch.from_numpy(m) for m in (r49 < 3, (r49 >= 3) & (r49 < 8), (r49 >= 12) & (r49 < 24)))
    # the host cancels: its colour channel is noise of unit sigma, its core too
    assert abs(float(z[0, 6][outer].mean())) < 0.1 and abs(float(z[0, 6][outer].std()) - 1.0) < 0.1
    assert abs(float(z[0, 6][core].mean())) < 0.5
    # the blue source stands out in the colour channel, not in the g residual, which absorbs it
    assert float(z[1, 6][core].mean()) > 2.5 and float(z[1, 6][around].mean() - z[0, 6][around].mean()) < -2.0
    assert abs(float(z[1, 3][core].mean() - z[0, 3][core].mean())) < 0.5


def _elliptical_host(size: int, dx: float, dy: float, peak: float) -> np.ndarray:
    """A PSF-smoothed elliptical galaxy (two concentric Gaussians, axis ratio 0.6 at 30°) centred
    (dx, dy) px off the centre pixel: point-symmetric about its centre, band-limited."""
    off = np.arange(size) - (size - 1) / 2
    y, x = np.meshgrid(off - dy, off - dx, indexing="ij")
    c, s = np.cos(np.pi / 6), np.sin(np.pi / 6)
    u, v = c * x + s * y, (-s * x + c * y) / 0.6
    return peak * (0.7 * np.exp(-0.5 * (u * u + v * v) / 1.8**2) + 0.3 * np.exp(-0.5 * (u * u + v * v) / 5.0**2))


def test_antisymmetric_part_cancels_an_off_centre_elliptical_host_and_keeps_an_arc():
    """A bright elliptical host 0.37, -0.21 px off the centre pixel leaves noise in the antisymmetric
    channels (its light centre is found to 0.05 px), where the radial-profile residual keeps its
    ellipticity; a blob on one side (an arc without a counter-image) stays, at 1/√2 of its
    amplitude, mirrored with the opposite sign; pure noise keeps unit sigma."""
    rng = np.random.default_rng(11)
    size, dx, dy = 49, 0.37, -0.21
    host = _elliptical_host(size, dx, dy, 400.0)
    r = radius_grid(size, size)
    blob = 20.0 * np.exp(
        -0.5 * ((np.arange(size)[None, :] - 32.0) ** 2 + (np.arange(size)[:, None] - 24.0) ** 2) / 1.5**2
    )
    noise = rng.standard_normal((3, size, size))  # the same in both: their difference is the blob's
    z = torch.from_numpy(np.stack([host + noise, host + blob + noise])).to(torch.float32)
    cx, cy = light_centre(z)
    assert abs(float(cx[0]) - dx) < 0.05 and abs(float(cy[0]) - dy) < 0.05
    a = antisymmetric_part(z)
    assert a.shape == z.shape
    inner = torch.from_numpy(r < 12)
    assert float(a[0][:, inner].std()) < 1.3  # the host cancels to the noise (sigma 1)
    assert float(subtract_radial_profile(z)[0][:, inner].std()) > 3.0  # the radial profile keeps the ellipticity
    # the blob through the channel, in the frame shifted to the host's centre: its peak moves by
    # (-dx, -dy), so the pixel it was on sees the Gaussian that far off, its mirror the negative
    expected = 20.0 / np.sqrt(2) * np.exp(-0.5 * (dx * dx + dy * dy) / 1.5**2)
    diff = (a[1] - a[0]).mean(0)
    assert abs(float(diff[24, 32]) - expected) < 0.05 and abs(float(diff[24, 16]) + expected) < 0.05
    pure = antisymmetric_part(torch.from_numpy(rng.standard_normal((8, 3, size, size)).astype(np.float32)))
    assert abs(float(pure[..., torch.from_numpy(r > 2)].std()) - 1.0) < 0.05


def test_antisymmetric_channels_follow_the_other_channels():
    x = np.random.default_rng(2).normal(5.0, 1.0, (3, 3, 101, 101)).astype(np.float32)
    base = PreprocessSpec(crop=49, residual="append", stretch="asinh", colour_difference=True)
    spec = PreprocessSpec(crop=49, residual="append", stretch="asinh", colour_difference=True, antisymmetric=True)
    z = preprocess(x, spec)
    assert spec.out_channels(3) == 10 and z.shape == (3, 10, 49, 49)
    assert torch.equal(z[:, :7], preprocess(x, base))


def test_asinh_matches_the_float64_reference_to_float32_round_off():
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.standard_normal(50_000) * s for s in (1e-6, 1e-2, 1.0, 30.0, 1e4, 1e12, 1e29)]).astype(
        np.float32
    )
    x = np.r_[x, 0.0, -0.0, np.finfo(np.float32).tiny, -1e30].astype(np.float32)
    got = asinh(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, np.arcsinh(x.astype(np.float64)), rtol=1e-6, atol=3e-7)
    assert np.array_equal(np.signbit(got), np.signbit(x))  # odd, -0 included
    huge = asinh(torch.tensor([3e38, -np.inf, np.inf]))
    assert torch.equal(huge, torch.tensor([1.0, -1.0, 1.0]) * float(np.arcsinh(np.float32(1e30))))


def test_bad_shapes_raise():
    with pytest.raises(InputError, match="shape"):
        preprocess(np.zeros((3, 33, 33), np.float32), PreprocessSpec())
    with pytest.raises(InputError, match="crop"):
        preprocess(np.zeros((1, 3, 33, 33), np.float32), PreprocessSpec(crop=65))
