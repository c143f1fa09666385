"""decode_stamp_npz / pad_to_grz / decode_stamp_column on hand-built blobs of every legacy flavour."""

import gzip
import io
import pickle
import zipfile

import numpy as np
import pyarrow as pa
import pytest

from darkhaloscope.errors import InputError
from darkhaloscope.imaging.legacy_npz import decode_stamp_column, decode_stamp_npz, pad_to_grz

H = 8


def planes(seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return {b: rng.normal(0, 1, (H, H)).astype(dtype) for b in "grz"}


def npz(compressed=True, **arrays):
    buf = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buf, **arrays)
    return buf.getvalue()


def test_plain_npz_in_grz_order_and_float32():
    p = planes(dtype=np.float64)
    # Key order in the archive must not matter.
    blob = npz(compressed=False, image_z=p["z"], image_g=p["g"], image_r=p["r"])
    arr, bandset = decode_stamp_npz(blob, expected_shape=(H, H))
    assert bandset == "grz" and arr.dtype == np.float32 and arr.shape == (3, H, H)
    np.testing.assert_array_equal(arr, np.stack([p["g"], p["r"], p["z"]]).astype(np.float32))


def test_gzip_wrapped_npz():
    p = planes(1)
    blob = gzip.compress(npz(image_g=p["g"], image_r=p["r"], image_z=p["z"]))
    assert blob[:2] == b"\x1f\x8b"
    arr, bandset = decode_stamp_npz(blob, expected_shape=(3, H, H))
    assert bandset == "grz"
    np.testing.assert_array_equal(arr[2], p["z"])


def test_missing_bands_give_present_bands_and_bandset():
    p = planes(2)
    arr, bandset = decode_stamp_npz(npz(image_r=p["r"], image_z=p["z"]))
    assert bandset == "rz" and arr.shape == (2, H, H)
    np.testing.assert_array_equal(arr[0], p["r"])
    arr_r, bs_r = decode_stamp_npz(npz(image_r=p["r"]))
    assert bs_r == "r" and arr_r.shape == (1, H, H)
    padded, present = pad_to_grz(arr, bandset)
    assert padded.shape == (3, H, H) and present.tolist() == [False, True, True]
    assert not padded[0].any()
    np.testing.assert_array_equal(padded[2], p["z"])
    with pytest.raises(InputError, match="shape"):
        decode_stamp_npz(npz(image_r=p["r"], image_z=p["z"]), expected_shape=(3, H, H))
    with pytest.raises(InputError, match="not a subset"):
        pad_to_grz(arr, "zr")


def test_legacy_img_key_and_final_cutout_key():
    p = planes(3)
    chw = np.stack([p["g"], p["r"], p["z"]])
    arr, bs = decode_stamp_npz(npz(img=chw))
    assert bs == "grz"
    np.testing.assert_array_equal(arr, chw)
    arr_hwc, _ = decode_stamp_npz(npz(img=np.moveaxis(chw, 0, -1)))
    np.testing.assert_array_equal(arr_hwc, chw)
    arr_r, bs_r = decode_stamp_npz(npz(img=p["r"]), legacy_img_bands="r")
    assert bs_r == "r" and arr_r.shape == (1, H, H)
    with pytest.raises(InputError, match="does not hold the 3 band"):
        decode_stamp_npz(npz(img=p["r"]))
    arr_cut, bs_cut = decode_stamp_npz(npz(cutout=np.moveaxis(chw, 0, -1)))
    assert bs_cut == "grz"
    np.testing.assert_array_equal(arr_cut, chw)
    with pytest.raises(InputError, match="ambiguous"):
        decode_stamp_npz(npz(img=chw, image_r=p["r"]))


@pytest.mark.parametrize(
    "blob, match",
    [
        (b"", "empty blob"),
        (b"this is not an archive", "not an NPZ"),
        (gzip.compress(b"")[:6], "gzip wrapper is corrupt"),
        (npz(image_r=np.zeros((H, H), np.float32))[:40], "corrupt NPZ"),
        (npz(something=np.zeros(3)), "no stamp arrays"),
        (npz(image_r=np.zeros((H, H), dtype=complex)), "dtype complex"),
        (npz(image_r=np.zeros((H, H)), image_g=np.zeros((H + 1, H))), "differ in shape"),
        (npz(image_r=np.zeros((2, H, H))), "expected \\(H, W\\)"),
        (npz(image_q=np.zeros((H, H))), "unexpected band arrays"),
    ],
)
def test_bad_blobs_raise_input_error(blob, match):
    with pytest.raises(InputError, match=match):
        decode_stamp_npz(blob, name="stamp_npz")


def test_pickled_object_array_is_refused_without_unpickling():
    obj = np.empty(2, dtype=object)
    obj[0], obj[1] = {"a": 1}, [1, 2]
    with pytest.raises(InputError, match="object/pickled"):
        decode_stamp_npz(npz(compressed=False, image_r=obj))
    # A raw pickle smuggled into the zip under a stamp name is not a .npy member.
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("image_r.npy", pickle.dumps(np.zeros((H, H))))
    with pytest.raises(InputError):
        decode_stamp_npz(buf.getvalue())


def test_wrong_shape_and_nonfinite_policy():
    p = planes(4)
    p["r"][1, 1] = np.nan
    blob = npz(image_g=p["g"], image_r=p["r"], image_z=p["z"])
    with pytest.raises(InputError, match=r"stamp_npz: stamp has shape \(3, 8, 8\).*expected \(64, 64\)"):
        decode_stamp_npz(blob, expected_shape=(64, 64))
    arr, _ = decode_stamp_npz(blob)
    assert np.isnan(arr[1, 1, 1]) and np.isfinite(arr[0]).all()
    with pytest.raises(InputError, match="1 non-finite"):
        decode_stamp_npz(blob, allow_nonfinite=False)


def test_decode_column_pads_reports_and_names_rows():
    p = planes(5)
    p["g"][0, :4] = np.inf
    blobs = pa.array(
        [npz(image_g=p["g"], image_r=p["r"], image_z=p["z"]), gzip.compress(npz(image_r=p["r"]))], type=pa.binary()
    )
    batch = decode_stamp_column(blobs, (H, H))
    assert batch.images.shape == (2, 3, H, H)
    assert batch.band_present.tolist() == [[True, True, True], [False, True, False]]
    assert batch.bandsets == ["grz", "r"]
    np.testing.assert_allclose(batch.nonfinite_frac, [4 / (3 * H * H), 0.0])
    with pytest.raises(InputError, match="stamp_npz row 1: null blob"):
        decode_stamp_column([blobs[0].as_py(), None], (H, H))
    with pytest.raises(InputError, match="ctrl_stamp_npz row 0: not an NPZ"):
        decode_stamp_column([b"junk"], (H, H), name="ctrl_stamp_npz")
