"""Files of the embedded mock survey: DR10 sweep FITS files (byte for byte the layout legacypipe
writes: primary HDU, one SWEEP binary table of big-endian DR10_SWEEP_DTYPE rows, padded to 2880-byte
blocks) and Parquet truth tables. Every file is written under a temporary name and renamed into
place, so a reader never sees half a file."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from astropy.io import fits

from darkhaloscope.survey import sweep_model as sm
from darkhaloscope.survey.sweeps import SweepBox

#: FITS files are sequences of 2880-byte blocks.
FITS_BLOCK_BYTES = 2880


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp)`` on a temporary name beside ``path``, then rename it to ``path``; on any
    error the temporary file is removed and ``path`` is left as it was."""
    tmp = path.with_name(f"_staging-{secrets.token_hex(6)}-{path.name}")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        if tmp.exists():
            tmp.unlink()
        raise


def sweep_headers(box: SweepBox, nrows: int, generator_version: str) -> tuple[bytes, bytes]:
    """Primary and SWEEP extension headers (padded bytes) of a DR10 sweep with ``nrows`` rows."""
    primary = fits.PrimaryHDU()
    cols = [fits.Column(name=name, format=tform) for name, tform in sm.DR10_SWEEP_COLUMNS]
    ext = fits.BinTableHDU.from_columns(cols, nrows=0, name="SWEEP")
    hdr = ext.header
    hdr["NAXIS2"] = nrows
    for h in (primary.header, hdr):
        h["RAMIN"], h["RAMAX"], h["DECMIN"], h["DECMAX"] = box.ra_min, box.ra_max, box.dec_min, box.dec_max
        h["SURVEY"] = ("DHS-MOCK", "deterministic mock of DR10 south")
        h["MOCKVER"] = generator_version
    if int(hdr["NAXIS1"]) != sm.DR10_SWEEP_DTYPE.itemsize:
        raise RuntimeError(f"FITS row size {hdr['NAXIS1']} != model row size {sm.DR10_SWEEP_DTYPE.itemsize}")
    return primary.header.tostring().encode("ascii"), hdr.tostring().encode("ascii")


def write_sweep(
    path: Path,
    box: SweepBox,
    nrows: int,
    chunk_rows: int,
    fill: Callable[[np.ndarray, slice, int], None],
    generator_version: str,
) -> None:
    """Write a sweep file of ``nrows`` rows; ``fill(rows, sl, chunk)`` fills the DR10_SWEEP_DTYPE
    rows ``sl`` (chunk number ``chunk``), ``chunk_rows`` at a time, so memory stays one chunk."""
    primary, extension = sweep_headers(box, nrows, generator_version)

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            f.write(primary)
            f.write(extension)
            for c, start in enumerate(range(0, nrows, chunk_rows)):
                sl = slice(start, min(nrows, start + chunk_rows))
                rows = np.zeros(sl.stop - sl.start, dtype=sm.DR10_SWEEP_DTYPE)
                fill(rows, sl, c)
                f.write(rows.tobytes())
            f.write(b"\0" * ((-nrows * sm.DR10_SWEEP_DTYPE.itemsize) % FITS_BLOCK_BYTES))

    atomic_write(path, write)


def write_parquet(path: Path, table: pa.Table) -> None:
    """Write ``table`` as one zstd Parquet file at ``path``, atomically."""
    atomic_write(path, lambda tmp: pq.write_table(table, tmp, compression="zstd"))
