"""Bad-input matrix: every bad input is refused with a clear error, and the lake is untouched.

One parametrised test. Each case builds a bad input in ``tmp_path`` from small valid files, starts
from a lake that already holds committed tables, runs the failing operation through the real
library entry point *in a way that writes to the lake* (batches are streamed into
``Lake.write_table`` / ``Lake.write_bytes`` of an already committed partition, so a bad input that
is only noticed mid-stream exercises the staging clean-up and the "previous version stays" rule),
and then checks

(a) the error is a ``darkhaloscope.errors.InputError`` whose message names the input (file name,
    column, value, URL, bucket, key), and
(b) every file under the lake root (listed with ``pyarrow.fs``; sizes and sha256) and every folder
    is exactly as before, with no temporary object left in ``_staging/``.

Cases 6-9, 11-13 and the blob half of 14 fail mid-write (after ``write_table`` opened its staging
object and wrote a first batch); the others are refused before the write starts.
``test_snapshot_sees_a_commit`` is the control: the same snapshot does change when a valid input
is committed over the same partition, so (b) can fail.

Case 17 runs on the loopback S3 server (moto); ``docs/bad_input_matrix.md`` lists what each case
gives, copied from a run of this file.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import itertools
import json
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from astropy.io import fits

from darkhaloscope.errors import CredentialError, InputError
from darkhaloscope.imaging.legacy_npz import decode_stamp_npz, pad_to_grz
from darkhaloscope.imaging.service import CutoutServiceClient
from darkhaloscope.stamps import STAMP_SHAPE, from_tensor_column, tensor_type, to_tensor_array
from darkhaloscope.survey import sweep_model as sm
from darkhaloscope.survey.known_lenses import load_known_lenses, validate_known_lenses
from darkhaloscope.survey.sweeps import SweepBox, iter_sweep_batches, parse_sweep_filename
from lake_platform.lake import STAGING_DIR, Lake
from tests.support.cutout_server import CutoutServer
from tests.support.s3_server import fresh_bucket
from tests.support.sweep_rows import dr10_rows

SWEEP = "sweep-030m005-035p000.fits"
BOX = SweepBox(30, 35, -5, 0)
N_ROWS = 20
BATCH_ROWS = 8  # rows 8.. are in the second batch: a bad row there is found mid-write
STAMP_SOURCE = "legacy_stamps.parquet"
STAMPS_SCHEMA = pa.schema([("object_id", pa.int64()), ("image", tensor_type(STAMP_SHAPE)), ("bandset", pa.string())])
STAMPS_PARTITION = {"source": "legacy"}
LENSCAT_HEADER = ["name", "RA [deg]", "DEC [deg]", "zlens", "grading", "type", "ref"]
MISSING_BUCKET = "dhs-missing-bucket"


# --------------------------------------------------------------------------- valid inputs


def _rows(n: int = N_ROWS) -> np.ndarray:
    """n DR10 sweep rows inside BOX, unique (release, brickid, objid), big-endian FITS layout."""
    return dr10_rows(n, BOX)


def _write_sweep(
    path: Path,
    rows: np.ndarray,
    columns=sm.DR10_SWEEP_COLUMNS,
    override: dict | None = None,
    drop: tuple[str, ...] = (),
) -> Path:
    """A sweep-like FITS file (primary HDU + BINTABLE) with ``columns``; ``override``: name -> (tform, array)."""
    override = override or {}
    cols = []
    for name, tform in columns:
        if name in drop:
            continue
        if name in override:
            tform, arr = override[name]
        else:
            arr = rows[name] == ord("T") if tform == "L" else rows[name]
        cols.append(fits.Column(name=name, format=tform, array=arr))
    path.parent.mkdir(parents=True, exist_ok=True)
    fits.HDUList([fits.PrimaryHDU(), fits.BinTableHDU.from_columns(cols, name="SWEEP")]).writeto(path)
    return path


def _npz(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _stamp_blob(i: int, size: int = STAMP_SHAPE[1]) -> bytes:
    rng = np.random.default_rng(i)
    return _npz(**{f"image_{b}": rng.normal(0, 0.01, (size, size)).astype(np.float32) for b in "grz"})


def _stamp_batches(blobs: list[bytes], source: str, rows_per_batch: int = 2):
    """Decode a legacy blob column into STAMPS_SCHEMA batches (a bad blob after row 1 is found mid-write)."""
    for i0 in range(0, len(blobs), rows_per_batch):
        idx = range(i0, min(i0 + rows_per_batch, len(blobs)))
        images, bandsets = [], []
        for i in idx:
            arr, bandset = decode_stamp_npz(blobs[i], STAMP_SHAPE[1:], name=f"{source} row {i}")
            images.append(pad_to_grz(arr, bandset)[0])
            bandsets.append(bandset)
        yield pa.record_batch(
            [pa.array(list(idx), pa.int64()), to_tensor_array(np.stack(images)), pa.array(bandsets)],
            schema=STAMPS_SCHEMA,
        )


def _write_legacy_stamps(path: Path, blobs: list[bytes]) -> Path:
    """Stamps in the earlier pipeline's format: a Parquet file with one NPZ blob per row."""
    pq.write_table(pa.table({"object_id": np.arange(len(blobs)), "stamp_npz": pa.array(blobs, pa.binary())}), path)
    return path


def _lenscat_csv(path: Path, rows: list[tuple]) -> Path:
    lines = [",".join(LENSCAT_HEADER)] + [",".join(str(v) for v in r) for r in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


GOOD_LENSES = [
    ("J0011-0845", 2.83, -8.76, "0.54", "confident", "galaxy", "ref-a"),
    ("J0029-0055", 7.28, -0.92, "0.23", "probable", "galaxy", "ref-b"),
]


def _save_checkpoint(folder: Path):
    import torch

    from darkhaloscope.training import checkpoint as ck
    from darkhaloscope.training.models import build_model
    from darkhaloscope.training.preprocess import PreprocessSpec

    torch.manual_seed(0)
    spec = PreprocessSpec()
    model = build_model("bottleneck_resnet_tiny", spec.out_channels(3))
    return ck.save_checkpoint(
        folder, "best", model, architecture="bottleneck_resnet_tiny", in_channels=spec.out_channels(3), preprocess=spec
    )


class _PickledPayload:
    """Unpickling this would run code: load_checkpoint must refuse without unpickling."""

    def __reduce__(self):
        return (print, ("unpickled!",))


# --------------------------------------------------------------------------- lake and snapshot


def _sweep_into_lake(lake: Lake, path: Path, partition_key: str | None = None, **kw):
    """Stream a sweep file into survey/sweeps (the ingest path): peek the first batch for the schema."""
    batches = iter_sweep_batches(path, batch_rows=BATCH_ROWS, **kw)
    first = next(batches)
    return lake.write_table(
        "survey",
        "sweeps",
        itertools.chain([first], batches),
        schema=first.schema,
        partition={"sweep_file": partition_key or Path(path).name},
    )


def _commit_base(lake: Lake, tmp: Path) -> None:
    """The lake before every case: a sweep partition, a stamps partition, known lenses, a checkpoint spec."""
    _sweep_into_lake(lake, _write_sweep(tmp / "valid" / SWEEP, _rows()))
    blobs = [_stamp_blob(i) for i in range(4)]
    lake.write_table(
        "imaging", "stamps", _stamp_batches(blobs, "base"), schema=STAMPS_SCHEMA, partition=STAMPS_PARTITION
    )
    lake.write_table("survey", "known_lenses", load_known_lenses(str(_lenscat_csv(tmp / "lenses.csv", GOOD_LENSES))))
    lake.write_bytes("training", "checkpoints", "best.json", b'{"previous": "checkpoint spec"}')


def _snapshot(lake: Lake) -> dict[str, tuple]:
    """Every entry under the lake root: files as (size, sha256), folders as ('dir',)."""
    infos = lake.fs.get_file_info(pafs.FileSelector(lake.root, recursive=True, allow_not_found=True))
    out: dict[str, tuple] = {}
    for info in infos:
        rel = info.path[len(lake.root) + 1 :]
        if info.type == pafs.FileType.File:
            with lake.fs.open_input_stream(info.path) as f:
                data = f.read()
            assert len(data) == info.size
            out[rel] = (info.size, hashlib.sha256(data).hexdigest())
        elif info.type == pafs.FileType.Directory:
            out[rel] = ("dir",)
    return out


@dataclass
class Env:
    """What a case may use: its tmp folder, the committed local lake, the pytest request (for s3_server)."""

    tmp: Path
    lake: Lake
    request: pytest.FixtureRequest
    valid_sweep: Path = field(init=False)

    def __post_init__(self):
        self.valid_sweep = self.tmp / "valid" / SWEEP

    def bad(self, name: str = SWEEP) -> Path:
        """Path of a bad input file; same name as the committed sweep, so its ingest targets that partition."""
        p = self.tmp / "bad" / name
        p.parent.mkdir(parents=True, exist_ok=True)
        return p


@dataclass
class Attempt:
    """One failing operation: ``run()`` must raise ``error`` whose message contains every string in ``names``."""

    run: Callable[[], object]
    names: list[str]
    lake: Lake
    error: type = InputError


# --------------------------------------------------------------------------- the cases


def case_truncated_fits(env: Env):
    data = env.valid_sweep.read_bytes()
    table_bytes = N_ROWS * sm.DR10_SWEEP_DTYPE.itemsize
    data_start = len(data) - table_bytes - (-table_bytes) % 2880
    p = env.bad()
    p.write_bytes(data[: data_start + 1000])  # both headers, then 1000 bytes of rows
    return [Attempt(lambda: _sweep_into_lake(env.lake, p), [SWEEP, "truncated"], env.lake)]


def case_empty_fits(env: Env):
    p = env.bad()
    p.write_bytes(b"")
    return [Attempt(lambda: _sweep_into_lake(env.lake, p), [SWEEP, "empty"], env.lake)]


def case_wrong_hdu(env: Env):
    p = env.bad()
    fits.HDUList([fits.PrimaryHDU(), fits.ImageHDU(np.zeros((3, 8, 8), np.float32))]).writeto(p)
    return [Attempt(lambda: _sweep_into_lake(env.lake, p), [SWEEP, "HDU 1", "IMAGE"], env.lake)]


def case_missing_column(env: Env):
    p = _write_sweep(env.bad(), _rows(), drop=("FLUX_Z",))
    return [Attempt(lambda: _sweep_into_lake(env.lake, p), [SWEEP, "FLUX_Z"], env.lake)]


def case_mistyped_column(env: Env):
    rows = _rows()
    ra_text = np.array([f"{x:.7f}".encode() for x in rows["RA"]])
    p1 = _write_sweep(env.bad(), rows, override={"RA": ("16A", ra_text)})
    p2 = _write_sweep(env.tmp / "bad2" / SWEEP, rows, override={"TYPE": ("J", np.arange(len(rows), dtype=np.int32))})
    return [
        Attempt(lambda: _sweep_into_lake(env.lake, p1), [SWEEP, "RA", "'16A'"], env.lake),
        Attempt(lambda: _sweep_into_lake(env.lake, p2), [SWEEP, "TYPE", "'J'"], env.lake),
    ]


def case_nan_coordinates(env: Env):
    rows = _rows()
    rows["DEC"][10] = np.nan  # second batch: found while the write is streaming
    p = _write_sweep(env.bad(), rows)
    return [Attempt(lambda: _sweep_into_lake(env.lake, p), [SWEEP, "row 10", "DEC=nan"], env.lake)]


def case_out_of_range_coordinates(env: Env):
    rows = _rows()
    rows["DEC"][12] = 95.0
    p1 = _write_sweep(env.bad(), rows)
    rows = _rows()
    rows["RA"][9] = 400.0
    p2 = _write_sweep(env.tmp / "bad2" / SWEEP, rows)
    return [
        Attempt(lambda: _sweep_into_lake(env.lake, p1), [SWEEP, "row 12", "DEC=95.0"], env.lake),
        Attempt(lambda: _sweep_into_lake(env.lake, p2), [SWEEP, "row 9", "RA=400.0"], env.lake),
    ]


def case_duplicate_ids(env: Env):
    rows = _rows()
    rows["BRICKID"][17], rows["OBJID"][17] = rows["BRICKID"][3], rows["OBJID"][3]  # only seen at the end of the file
    p = _write_sweep(env.bad(), rows)
    ident = f"(10000, {int(rows['BRICKID'][3])}, 3)"
    return [Attempt(lambda: _sweep_into_lake(env.lake, p), [SWEEP, "duplicate", ident, "rows 3 and 17"], env.lake)]


def case_row_outside_box(env: Env):
    rows = _rows()
    rows["RA"][13] = 36.25  # valid sky position, but east of the file's box [30, 35)
    p = _write_sweep(env.bad(), rows)
    return [
        Attempt(
            lambda: _sweep_into_lake(env.lake, p), [SWEEP, "row 13", "RA=36.250000", "outside the sweep box"], env.lake
        )
    ]


def case_pre_dr4_schema(env: Env):
    n = 6
    cols = [
        ("BRICKID", "J"),
        ("BRICKNAME", "8A"),
        ("OBJID", "J"),
        ("TYPE", "4A"),
        ("RA", "D"),
        ("DEC", "D"),
        ("DECAM_FLUX", "6E"),
        ("DECAM_FLUX_IVAR", "6E"),
        ("WISE_FLUX", "5E"),
    ]
    rows = np.zeros(n, dtype=sm.numpy_dtype(tuple(cols)))
    rows["RA"], rows["DEC"], rows["TYPE"] = 31.0, -2.0, b"SIMP"
    p = _write_sweep(env.bad(), rows, columns=cols)
    return [Attempt(lambda: _sweep_into_lake(env.lake, p), [SWEEP, "pre-DR4", "DECAM_FLUX", "RELEASE"], env.lake)]


def _legacy_stamps_attempt(env: Env, bad_blob: bytes, names: list[str]) -> Attempt:
    folder = env.tmp / f"legacy-{len(list(env.tmp.glob('legacy-*')))}"  # one folder per attempt of a case
    folder.mkdir()
    src = _write_legacy_stamps(folder / STAMP_SOURCE, [_stamp_blob(10), _stamp_blob(11), bad_blob, _stamp_blob(13)])

    def run():
        blobs = pq.read_table(src).column("stamp_npz").to_pylist()
        return env.lake.write_table(
            "imaging", "stamps", _stamp_batches(blobs, src.name), schema=STAMPS_SCHEMA, partition=STAMPS_PARTITION
        )

    return Attempt(run, [STAMP_SOURCE, "row 2"] + names, env.lake)


def case_corrupt_npz(env: Env):
    good = _stamp_blob(12)
    return [_legacy_stamps_attempt(env, good[: len(good) // 2], ["corrupt NPZ"])]


def case_gzip_corrupt_npz(env: Env):
    good = _stamp_blob(12)
    return [
        _legacy_stamps_attempt(env, gzip.compress(good[: len(good) // 2], mtime=0), ["corrupt NPZ"]),
        _legacy_stamps_attempt(env, gzip.compress(good, mtime=0)[:500], ["gzip wrapper is corrupt"]),
    ]


def case_pickled_npz(env: Env):
    obj = np.empty((101, 101), dtype=object)
    obj[:] = _PickledPayload()
    blob = _npz(image_g=obj, image_r=np.zeros((101, 101), np.float32))
    return [_legacy_stamps_attempt(env, blob, ["pickle"])]


def case_wrong_stamp_shape(env: Env):
    npz_attempt = _legacy_stamps_attempt(env, _stamp_blob(12, size=64), ["(3, 64, 64)", "(101, 101)"])
    src = env.tmp / "stamps_64.parquet"
    pq.write_table(
        pa.table({"object_id": np.arange(2), "image": to_tensor_array(np.zeros((2, 3, 64, 64), np.float32))}), src
    )

    def run_tensor():
        t = pq.read_table(src)
        images = from_tensor_column(t.column("image"), STAMP_SHAPE, name=f"{src.name}:image")
        batch = pa.record_batch(
            [t.column("object_id").combine_chunks(), to_tensor_array(images), pa.array(["grz"] * len(images))],
            schema=STAMPS_SCHEMA,
        )
        return env.lake.write_table("imaging", "stamps", [batch], schema=STAMPS_SCHEMA, partition=STAMPS_PARTITION)

    return [npz_attempt, Attempt(run_tensor, ["stamps_64.parquet:image", "(3, 64, 64)", "(3, 101, 101)"], env.lake)]


def case_partition_key_with_path(env: Env):
    def write(key):
        return lambda: _sweep_into_lake(env.lake, env.valid_sweep, partition_key=key)

    return [Attempt(write("../x"), ["'../x'"], env.lake), Attempt(write("a/b"), ["'a/b'"], env.lake)]


def case_cutout_html(env: Env):
    ra, dec = 31.5, -2.5
    srv = CutoutServer(size=STAMP_SHAPE[1], lifetime_s=20).__enter__()
    env.request.addfinalizer(lambda: srv.__exit__(None, None, None))
    srv.script(ra, dec, ["html"])
    client = CutoutServiceClient(srv.base_url, size=STAMP_SHAPE[1], max_retries=1, timeout_s=5, sleep=lambda s: None)
    env.request.addfinalizer(client.close)

    def run():
        outcome = client.fetch_many([(7, 31.0, -2.0), (8, ra, dec)])
        batch = pa.record_batch(
            [
                pa.array([r.key for r in outcome.results], pa.int64()),
                to_tensor_array(outcome.stacked_images()),
                pa.array([r.bands for r in outcome.results]),
            ],
            schema=STAMPS_SCHEMA,
        )
        return env.lake.write_table("imaging", "stamps", [batch], schema=STAMPS_SCHEMA, partition=STAMPS_PARTITION)

    return [Attempt(run, [client.url_for(ra, dec), "HTML"], env.lake)]


def case_missing_s3_bucket(env: Env):
    server = env.request.getfixturevalue("s3_server")
    lake = Lake(f"s3://{fresh_bucket(server)}/lake", s3_endpoint=server.endpoint_url)
    _sweep_into_lake(lake, env.valid_sweep)  # the committed table on S3
    missing = Lake(f"s3://{MISSING_BUCKET}/lake", s3_endpoint=server.endpoint_url)

    def run():
        try:
            return _sweep_into_lake(missing, env.valid_sweep)
        finally:
            buckets = [b["Name"] for b in server.client().list_buckets()["Buckets"]]
            assert MISSING_BUCKET not in buckets, "the failed write created the bucket"

    return [Attempt(run, [f"s3://{MISSING_BUCKET}/", "does not exist"], lake)]


def case_known_lens_bad_coordinate(env: Env):
    bad_csv = _lenscat_csv(
        env.tmp / "lenses_bad.csv", GOOD_LENSES + [("J9999+9999", 12.5, 95.0, "0.4", "confident", "galaxy", "ref-c")]
    )

    def load_and_write():
        return env.lake.write_table("survey", "known_lenses", load_known_lenses(str(bad_csv)))

    table = pa.table({"name": ["J0011-0845", "J0158-0001"], "ra": [2.83, float("nan")], "dec": [-8.76, -0.02]})

    def validate_and_write():
        validate_known_lenses(table, where="lens_table.parquet")
        return env.lake.write_table("survey", "known_lenses", table)

    return [
        Attempt(load_and_write, ["lenses_bad.csv", "'J9999+9999'", "dec=", "95.0"], env.lake),
        Attempt(validate_and_write, ["lens_table.parquet", "'J0158-0001'", "ra=", "nan"], env.lake),
    ]


def case_bad_sweep_name(env: Env):
    bad_name = "sweep-035m005-030p000.fits"  # RA bounds reversed: an empty box
    p = env.bad(bad_name)
    p.write_bytes(env.valid_sweep.read_bytes())
    return [
        Attempt(lambda: parse_sweep_filename("sweep-30m005-035p000.fits"), ["'sweep-30m005-035p000.fits'"], env.lake),
        Attempt(lambda: _sweep_into_lake(env.lake, p), [f"'{bad_name}'", "empty or invalid sweep box"], env.lake),
    ]


def _checkpoint_into_lake(env: Env, folder: Path):
    from darkhaloscope.training.checkpoint import load_checkpoint

    _, spec = load_checkpoint(folder, "best")
    return env.lake.write_bytes("training", "checkpoints", "best.json", json.dumps(spec.to_dict()).encode())


def case_checkpoint_pickle_as_weights(env: Env):
    from darkhaloscope.training.checkpoint import sha256_file

    folder = env.tmp / "ckpt"
    spec = _save_checkpoint(folder)
    weights = folder / spec.weights_file
    weights.write_bytes(pickle.dumps({"state_dict": _PickledPayload()}))
    d = json.loads((folder / "best.json").read_text())
    d["weights_sha256"] = sha256_file(weights)  # a consistent spec: only the format is wrong
    (folder / "best.json").write_text(json.dumps(d))
    return [
        Attempt(lambda: _checkpoint_into_lake(env, folder), [spec.weights_file, "not a valid safetensors"], env.lake)
    ]


def case_checkpoint_pickle_only(env: Env):
    folder = env.tmp / "ckpt_pt"
    folder.mkdir()
    (folder / "best.pt").write_bytes(pickle.dumps({"state_dict": _PickledPayload()}))
    return [Attempt(lambda: _checkpoint_into_lake(env, folder), [str(folder), "best.pt"], env.lake)]


def case_float32_coordinates(env: Env):
    rows = _rows()
    p1 = _write_sweep(env.bad(), rows, override={"RA": ("E", rows["RA"].astype(">f4"))})
    p2 = _write_sweep(env.tmp / "bad2" / SWEEP, rows, override={"DEC": ("E", rows["DEC"].astype(">f4"))})
    p3 = _write_sweep(env.tmp / "bad3" / SWEEP, rows, override={"NOBS_G": ("J", rows["NOBS_G"].astype(">i4"))})
    return [
        Attempt(lambda: _sweep_into_lake(env.lake, p1), [SWEEP, "RA", "TFORM 'E'", "expected 'D'", "f8"], env.lake),
        Attempt(lambda: _sweep_into_lake(env.lake, p2), [SWEEP, "DEC", "TFORM 'E'", "expected 'D'"], env.lake),
        Attempt(lambda: _sweep_into_lake(env.lake, p3), [SWEEP, "NOBS_G", "TFORM 'J'", "expected 'I'"], env.lake),
    ]


def case_type_outside_data_model(env: Env):
    rows = _rows()
    rows["TYPE"][11] = b"GAL"  # second batch: found mid-write
    p = _write_sweep(env.bad(), rows)
    return [
        Attempt(lambda: _sweep_into_lake(env.lake, p), [SWEEP, "row 11", "TYPE 'GAL'", "dr10-sweep", "SER"], env.lake)
    ]


def case_bad_inverse_variance(env: Env):
    rows = _rows()
    rows["FLUX_IVAR_R"][9] = -4.0
    p1 = _write_sweep(env.bad(), rows)
    rows = _rows()
    rows["RA_IVAR"][2] = np.nan
    p2 = _write_sweep(env.tmp / "bad2" / SWEEP, rows)
    return [
        Attempt(lambda: _sweep_into_lake(env.lake, p1), [SWEEP, "row 9", "FLUX_IVAR_R = -4.0", ">= 0"], env.lake),
        Attempt(lambda: _sweep_into_lake(env.lake, p2), [SWEEP, "row 2", "RA_IVAR = nan", "finite"], env.lake),
    ]


def case_all_nan_flux_column(env: Env):
    rows = _rows()
    rows["FLUX_Z"] = np.nan  # found only when the whole file was read: after the last batch
    p = _write_sweep(env.bad(), rows)
    return [Attempt(lambda: _sweep_into_lake(env.lake, p), [SWEEP, "FLUX_Z", "no finite value"], env.lake)]


def case_gzip_under_fits_name(env: Env):
    p = env.bad()
    p.write_bytes(gzip.compress(env.valid_sweep.read_bytes(), mtime=0))
    return [Attempt(lambda: _sweep_into_lake(env.lake, p), [SWEEP, "gzip-compressed", f"{SWEEP}.gz"], env.lake)]


def case_non_ascii_digits_in_name(env: Env):
    name = "sweep-٠٣٠m005-035p000.fits"  # Arabic-Indic digits: int() would read them as 030
    p = env.bad(name)
    p.write_bytes(env.valid_sweep.read_bytes())
    return [
        Attempt(
            lambda: _sweep_into_lake(env.lake, p, partition_key=SWEEP), [repr(name), "not a sweep file name"], env.lake
        )
    ]


CASES = [
    pytest.param(case_truncated_fits, id="01-truncated-fits"),
    pytest.param(case_empty_fits, id="02-empty-fits"),
    pytest.param(case_wrong_hdu, id="03-image-in-hdu1"),
    pytest.param(case_missing_column, id="04-missing-column"),
    pytest.param(case_mistyped_column, id="05-mistyped-column"),
    pytest.param(case_nan_coordinates, id="06-nan-coordinates"),
    pytest.param(case_out_of_range_coordinates, id="07-out-of-range-coordinates"),
    pytest.param(case_duplicate_ids, id="08-duplicate-object-ids"),
    pytest.param(case_row_outside_box, id="09-row-outside-sweep-box"),
    pytest.param(case_pre_dr4_schema, id="10-pre-dr4-schema"),
    pytest.param(case_corrupt_npz, id="11-corrupt-npz"),
    pytest.param(case_gzip_corrupt_npz, id="12-gzip-corrupt-npz"),
    pytest.param(case_pickled_npz, id="13-pickled-object-array-npz"),
    pytest.param(case_wrong_stamp_shape, id="14-wrong-stamp-shape"),
    pytest.param(case_partition_key_with_path, id="15-partition-key-path"),
    pytest.param(case_cutout_html, id="16-cutout-html"),
    pytest.param(case_missing_s3_bucket, id="17-missing-s3-bucket"),
    pytest.param(case_known_lens_bad_coordinate, id="18-known-lens-bad-coordinate"),
    pytest.param(case_bad_sweep_name, id="19-bad-sweep-file-name"),
    pytest.param(case_checkpoint_pickle_as_weights, id="20a-checkpoint-pickle-as-weights"),
    pytest.param(case_checkpoint_pickle_only, id="20b-checkpoint-folder-pickle-only"),
    pytest.param(case_float32_coordinates, id="21-float32-coordinates"),
    pytest.param(case_type_outside_data_model, id="22-type-outside-data-model"),
    pytest.param(case_bad_inverse_variance, id="23-negative-or-nan-inverse-variance"),
    pytest.param(case_all_nan_flux_column, id="24-all-nan-flux-column"),
    pytest.param(case_gzip_under_fits_name, id="25-gzip-under-fits-name"),
    pytest.param(case_non_ascii_digits_in_name, id="26-non-ascii-digits-in-name"),
]


@pytest.fixture
def env(tmp_path, request) -> Env:
    lake = Lake(str(tmp_path / "lake"))
    _commit_base(lake, tmp_path)
    return Env(tmp_path, lake, request)


@pytest.mark.parametrize("case", CASES)
def test_bad_input_refused_and_lake_unchanged(case, env):
    attempts = case(env)
    assert attempts
    for attempt in attempts:
        before = _snapshot(attempt.lake)
        assert any(k.endswith("part-0.parquet") for k in before), "the lake must hold a committed table"
        try:
            attempt.run()
        except Exception as exc:  # checked below: type and message
            err = exc
        else:
            raise AssertionError("no error was raised: the bad input was accepted")
        assert isinstance(err, attempt.error) and isinstance(err, (InputError, CredentialError)), (
            f"expected {attempt.error.__name__}, got {type(err).__name__}: {err}"
        )
        message = str(err)
        missing = [s for s in attempt.names if s not in message]
        assert not missing, f"message does not name {missing}: {message}"
        assert "np.float" not in message, f"numbers must print plainly: {message}"
        after = _snapshot(attempt.lake)
        assert not [k for k, v in after.items() if k.startswith(STAGING_DIR) and v != ("dir",)], (
            f"staging leftovers: {sorted(after)}"
        )
        after = {k: v for k, v in after.items() if not k.startswith(STAGING_DIR)}
        before = {k: v for k, v in before.items() if not k.startswith(STAGING_DIR)}
        assert after == before, (
            f"lake changed: added {sorted(set(after) - set(before))}, removed {sorted(set(before) - set(after))}, "
            f"rewritten {sorted(k for k in set(after) & set(before) if after[k] != before[k])}"
        )


def test_snapshot_sees_a_commit(env):
    """Control for (b): committing a valid variant over the same partition does change the snapshot."""
    before = _snapshot(env.lake)
    rows = _rows()
    rows["FLUX_R"] += 1
    _sweep_into_lake(env.lake, _write_sweep(env.tmp / "valid2" / SWEEP, rows))
    after = _snapshot(env.lake)
    changed = sorted(k for k in before if after.get(k) != before[k])
    # the part and its manifest (lake_platform.manifest), the commit record beside it
    assert changed == [
        f"_manifests/survey/sweeps/sweep_file={SWEEP}/manifest.json",
        f"survey/sweeps/sweep_file={SWEEP}/part-0.parquet",
    ]
