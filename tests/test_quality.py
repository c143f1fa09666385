"""Quality metrics on hand-built stamps whose NaN/zero fractions and brightnesses are known exactly."""

import numpy as np
import pyarrow as pa
import pytest

from darkhaloscope.errors import InputError
from darkhaloscope.imaging.quality import (
    FLAG_BAD_PIXELS,
    FLAG_CENTRAL_NONFINITE,
    FLAG_CORE_NONFINITE,
    FLAG_MISSING_BAND,
    QualityConfig,
    quality_metrics,
    quality_summary,
)

S = 41
C = S // 2
YY, XX = np.mgrid[:S, :S]
R = np.hypot(YY - C, XX - C)
N_CORE = int((R <= 8).sum())
N_CENTRAL = 21 * 21  # |dy|, |dx| <= 0.5 * 41 / 2 = 10.25


def clean_batch(n, seed=0):
    rng = np.random.default_rng(seed)
    img = rng.normal(0.0, 0.01, (n, 3, S, S)).astype(np.float32)
    img += np.exp(-0.5 * (R / 3.0) ** 2).astype(np.float32)  # a galaxy at the centre
    ivar = np.full_like(img, 1.0e4)
    return img, ivar


def col(t, name):
    return t.column(name).to_numpy(zero_copy_only=False)


def test_clean_stamps_pass_with_expected_schema():
    img, ivar = clean_batch(3)
    t = quality_metrics(img, ivar)
    assert isinstance(t, pa.Table) and t.num_rows == 3
    for name in (
        "nonfinite_frac_g",
        "zero_frac_r",
        "central_nonfinite_frac",
        "has_z",
        "core_brightness_r",
        "annulus_brightness_r",
        "outer_brightness_r",
        "mad_r",
        "radial_gradient_r",
        "clip_frac_g",
        "bad_pixel_frac",
        "quality_ok",
        "quality_flags",
        "saturated_frac_r",
    ):
        assert name in t.column_names
    assert col(t, "quality_ok").all() and (col(t, "quality_flags") == 0).all()
    assert (col(t, "nonfinite_frac") == 0).all() and (col(t, "n_bands_present") == 3).all()
    assert (col(t, "core_brightness_r") > col(t, "annulus_brightness_r")).all()
    assert (col(t, "radial_gradient_r") > 0).all()
    assert t.column("saturated_frac_r").null_count == 3


def test_known_nan_and_zero_fractions_and_flags():
    img, ivar = clean_batch(4, seed=1)
    # Row 0: 60 NaN pixels in g, all in the outer corner rows -> outside the central box and core.
    img[0, 0, :2, :30] = np.nan
    # Row 1: one NaN at the centre of r.
    img[1, 1, C, C] = np.nan
    # Row 2: z band missing (all zeros).
    img[2, 2] = 0.0
    # Row 3: g has pixels but no weight -> not present.
    ivar[3, 0] = 0.0
    t = quality_metrics(img, ivar)
    nf_g, zf_z = col(t, "nonfinite_frac_g"), col(t, "zero_frac_z")
    assert nf_g[0] == pytest.approx(60 / S**2) and nf_g[1:].tolist() == [0, 0, 0]
    assert col(t, "central_nonfinite_frac")[0] == 0
    assert col(t, "bad_pixel_frac")[0] == pytest.approx(60 / S**2)
    assert col(t, "quality_flags")[0] == FLAG_BAD_PIXELS  # 3.6 % > 2 %
    assert col(t, "core_nonfinite_frac")[1] == pytest.approx(1 / (3 * N_CORE))
    assert col(t, "central_nonfinite_frac")[1] == pytest.approx(1 / (3 * N_CENTRAL))
    assert col(t, "quality_flags")[1] == FLAG_CORE_NONFINITE  # core NaN > 0.1 %, centre < 2 %
    assert zf_z[2] == 1.0 and not col(t, "has_z")[2] and col(t, "n_bands_present")[2] == 2
    assert col(t, "quality_flags")[2] == FLAG_MISSING_BAND | FLAG_BAD_PIXELS
    assert not col(t, "has_g")[3] and col(t, "quality_flags")[3] & FLAG_MISSING_BAND
    assert col(t, "quality_ok").tolist() == [False, False, False, False]
    s = quality_summary(t)
    assert s["n"] == 4 and s["quality_pass_frac"] == 0 and s["n_missing_band"] == 2 and s["n_core_nonfinite"] == 1


def test_central_nan_block_trips_central_gate_only_when_above_two_percent():
    img, _ = clean_batch(2, seed=2)
    # 3x3 NaN block in every band just outside the core radius but inside the central box.
    img[0, :, C + 9 : C + 10, C : C + 9] = np.nan  # 9 px x 3 bands -> 27 / (3*441) = 2.04 %
    img[1, :, C + 9 : C + 10, C : C + 8] = np.nan  # 8 px -> 1.81 %
    t = quality_metrics(img, config=QualityConfig(max_bad_pixel_frac=1.0))
    frac = col(t, "central_nonfinite_frac")
    assert frac[0] == pytest.approx(9 / N_CENTRAL) and frac[1] == pytest.approx(8 / N_CENTRAL)
    assert col(t, "quality_flags").tolist() == [FLAG_CENTRAL_NONFINITE, 0]


def test_brightness_mad_clip_and_saturation_values():
    img = np.ones((2, 3, S, S), dtype=np.float32)
    img[:, :, R <= 8] = 3.0
    img[1, 1] += np.float32(0.5) * ((YY + XX) % 2).astype(np.float32)  # checkerboard: r of row 1 gets a non-zero MAD
    img[1, 1, 0, :5] = 1.0e4  # five extreme pixels in the corner
    mb = np.zeros((2, S, S), dtype=np.int32)
    mb[0, :2, :5] = 1 << 3  # SATUR_R on 10 pixels
    t = quality_metrics(img, maskbits=mb)
    assert col(t, "core_brightness_g").tolist() == [3.0, 3.0]
    assert col(t, "annulus_brightness_g").tolist() == [1.0, 1.0] and col(t, "outer_brightness_z").tolist() == [1.0, 1.0]
    assert col(t, "core_max_r")[0] == 3.0
    rc, ro = R[R <= 8].mean(), R[R > 0.9 * 20].mean()
    assert col(t, "radial_gradient_g")[0] == pytest.approx(2.0 / (ro - rc))
    ref = img[1, 1]
    mad_ref = np.median(np.abs(ref - np.median(ref)))
    assert col(t, "mad_r")[1] == pytest.approx(mad_ref) and mad_ref > 0
    clip_ref = np.mean(np.abs(ref - np.median(ref)) > 10 * 1.4826 * mad_ref)
    assert col(t, "clip_frac_r")[1] == pytest.approx(clip_ref) and clip_ref >= 5 / S**2
    assert np.isnan(col(t, "clip_frac_g")[0])  # MAD 0: clipping undefined, not zero
    assert col(t, "saturated_frac_r").tolist() == [pytest.approx(10 / S**2), 0.0]
    assert col(t, "saturated_frac_g").tolist() == [0.0, 0.0]


def test_chunking_does_not_change_results_and_bad_inputs_raise():
    img, ivar = clean_batch(5, seed=3)
    img[2, 0, 3, 3] = np.inf
    a = quality_metrics(img, ivar)
    b = quality_metrics(img, ivar, config=QualityConfig(chunk_rows=2))
    assert a.equals(b)
    assert quality_metrics(img[:0], ivar[:0]).num_rows == 0
    with pytest.raises(InputError, match="image must be"):
        quality_metrics(img[:, :2])
    with pytest.raises(InputError, match="invvar shape"):
        quality_metrics(img, ivar[:3])
    with pytest.raises(InputError, match="maskbits"):
        quality_metrics(img, maskbits=np.zeros((5, S, S), np.float32))
    with pytest.raises(InputError, match="too small"):
        quality_metrics(np.zeros((1, 3, 9, 9), np.float32))
