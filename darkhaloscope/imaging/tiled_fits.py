"""Windows of a tile-compressed FITS image, each tile decoded at most once.

DR10 coadds are fpack files: the image is cut into 100² tiles, each compressed on its own and
stored as one row of a binary table (the FITS tiled-image convention, FITS Standard 4.0 §10;
Pence et al. 2009, PASP 121, 1387). A 101² stamp touches 4 to 9 tiles. astropy's
``CompImageHDU.section`` decodes exactly those, but re-validates the compression header on every
call, which is ≈ 85 % of the time of a stamp read from a DR10-like file
(``benchmarks/bench_cutouts.py``). :class:`TiledImage` reads the header once per file, decodes a
tile the first time a window touches it and keeps it for the other targets of the brick, so a
brick costs at most one decompression of each of its tiles.

Codecs (``ZCMPTYPE``): RICE_1 through astropy's C decoder (the ``Rice1`` codec of
``astropy.io.fits.hdu.compressed._codecs``, a private module: the tests compare every codec with
astropy's public decompression, so a change in astropy shows there), GZIP_1 / GZIP_2 with
``zlib``, NOCOMPRESS; others (PLIO_1, HCOMPRESS_1; not used by the Legacy Surveys) fall back to
astropy's section reads. Quantized floats are restored as the standard
prescribes (§10.2): ``(i - r + 0.5) * ZSCALE + ZZERO`` with the dither offsets ``r`` of
SUBTRACTIVE_DITHER_1/2 (the standard's random sequence, seeded by tile row and ``ZDITHER0``),
``i * ZSCALE + ZZERO`` without dithering; SUBTRACTIVE_DITHER_2 keeps exact zeros, and ``ZBLANK``
marks NaN. ``tests/test_tiled_fits.py`` checks every case against astropy's own decompression.
"""

from __future__ import annotations

import io
import re
import zlib
from contextlib import contextmanager
from functools import lru_cache
from typing import Iterator

import numpy as np

from ..errors import InputError
from .files import read_bytes

#: Length of the standard's table of dither offsets and its seed row (FITS Standard 4.0 §10.2.1).
N_RANDOM = 10000
#: Quantized value of an exact zero under SUBTRACTIVE_DITHER_2.
ZERO_VALUE = -2147483646
_DITHER = {"NO_DITHER": 0, "SUBTRACTIVE_DITHER_1": 1, "SUBTRACTIVE_DITHER_2": 2}
_DECODED_HERE = ("RICE_1", "RICE_ONE", "GZIP_1", "GZIP_2", "NOCOMPRESS")


@lru_cache(maxsize=1)
def dither_offsets() -> np.ndarray:
    """The standard's N_RANDOM uniform offsets in (0, 1), float32 values: a Park–Miller generator
    (a = 16807, m = 2³¹ − 1) from seed 1, in double precision as the standard's reference code
    computes it."""
    a, m = 16807.0, 2147483647.0
    seed = 1.0
    out = np.empty(N_RANDOM)
    for i in range(N_RANDOM):
        temp = a * seed
        seed = temp - m * int(temp / m)
        out[i] = seed / m
    if int(seed) != 1043618065:  # the check value the standard gives for the 10000th seed
        raise RuntimeError(f"dither offset generator gave seed {int(seed)} after {N_RANDOM} draws")
    return out.astype(np.float32)


@lru_cache(maxsize=1)
def _offsets_f8() -> np.ndarray:
    """dither_offsets() widened to float64 (exactly), as the standard's decoder subtracts them."""
    return dither_offsets().astype(np.float64)


def _dither_sequence(row: int, n: int) -> np.ndarray:
    """The n offsets (float64) subtracted from the pixels of the tile whose dither row is ``row``
    (1-based: the tile's row in the table plus ZDITHER0 − 1)."""
    r = _offsets_f8()
    iseed = (row - 1) % N_RANDOM
    start = int(r[iseed] * 500)
    parts, left = [], n
    while left > 0:
        take = min(N_RANDOM - start, left)
        parts.append(r[start : start + take])
        left -= take
        iseed = (iseed + 1) % N_RANDOM
        start = int(r[iseed] * 500)
    return np.concatenate(parts)


class TiledImage:
    """The image of HDU 1 of a coadd file, read window by window: ``image[y0:y1, x0:x1]`` with
    0-based, in-bounds, half-open pixel ranges returns a native-endian array of the image's type.

    ``header``: for a compressed image the header of its table (the image's WCS keywords, and
    ``ZNAXISn`` for its shape), else the image's. ``shape``: (ny, nx). ``path`` names the file in
    errors. Build it with :func:`open_tiled_image`.
    """

    def __init__(
        self,
        header,
        path: str,
        table: np.ndarray | None = None,
        heap: np.ndarray | None = None,
        elements: dict[str, int] | None = None,
        section=None,
    ):
        self.path = path
        self.header = h = header
        self._section = section
        self._tiles: dict[int, np.ndarray] = {}
        if table is None:
            self.shape = (int(h.get("ZNAXIS2", h.get("NAXIS2"))), int(h.get("ZNAXIS1", h.get("NAXIS1"))))
            return
        if int(h["ZNAXIS"]) != 2:
            raise InputError(f"{path}: expected a 2-d compressed image, ZNAXIS = {h['ZNAXIS']}")
        self.shape = (int(h["ZNAXIS2"]), int(h["ZNAXIS1"]))
        self.tile = (int(h.get("ZTILE2", 1)), int(h.get("ZTILE1", self.shape[1])))
        self.n_tiles_x = -(-self.shape[1] // self.tile[1])
        self.algorithm = str(h["ZCMPTYPE"]).strip()
        self.zbitpix = int(h["ZBITPIX"])
        settings = {str(h[f"ZNAME{i}"]).strip(): h[f"ZVAL{i}"] for i in range(1, 10) if f"ZNAME{i}" in h}
        self.blocksize, self.bytepix = int(settings.get("BLOCKSIZE", 32)), int(settings.get("BYTEPIX", 4))
        names = table.dtype.names
        self._heap = heap

        def arrays(name):  # (descriptors (rows, 2) int64, element bytes) of a variable-length column
            return (table[name].astype(np.int64), elements[name]) if name in names else None

        self._data = arrays("COMPRESSED_DATA")
        if self._data is None:
            raise InputError(f"{path}: compressed image without a COMPRESSED_DATA column")
        self._gzip_data = arrays("GZIP_COMPRESSED_DATA")
        self._raw_data = arrays("UNCOMPRESSED_DATA")
        self.quantized = "ZSCALE" in names
        self._zscale = table["ZSCALE"].astype(np.float64).ravel() if self.quantized else None
        self._zzero = table["ZZERO"].astype(np.float64).ravel() if self.quantized else None
        self._zblank = table["ZBLANK"].astype(np.int64).ravel() if "ZBLANK" in names else None
        self._zblank_header = h.get("ZBLANK")
        method = str(h.get("ZQUANTIZ", "NO_DITHER")).strip()
        if self.quantized and method not in _DITHER:
            raise InputError(f"{path}: unknown quantization ZQUANTIZ = {method!r}")
        self.dither = _DITHER.get(method, 0)
        self.dither_seed = int(h.get("ZDITHER0", 0))
        if float(h.get("BSCALE", 1.0)) != 1.0 or float(h.get("BZERO", 0.0)) != 0.0:
            # no coadd of the Legacy Surveys scales its pixels; reading them unscaled would be wrong silently
            raise InputError(
                f"{path}: scaled pixels (BSCALE = {h.get('BSCALE', 1.0)}, BZERO = {h.get('BZERO', 0.0)}) are not supported"
            )
        types = {8: np.uint8, 16: np.int16, 32: np.int32, 64: np.int64, -32: np.float32, -64: np.float64}
        if self.zbitpix not in types:
            raise InputError(f"{path}: unsupported ZBITPIX = {self.zbitpix}")
        self.dtype = np.dtype(types[self.zbitpix])

    def __getitem__(self, window) -> np.ndarray:
        ys, xs = window
        y0, y1, x0, x1 = ys.start, ys.stop, xs.start, xs.stop
        if not (0 <= y0 < y1 <= self.shape[0] and 0 <= x0 < x1 <= self.shape[1]):
            raise InputError(f"{self.path}: window [{y0}:{y1}, {x0}:{x1}] outside the {self.shape} image")
        if self._section is not None:
            return np.asarray(self._section[y0:y1, x0:x1])
        ty, tx = self.tile
        out = np.empty((y1 - y0, x1 - x0), self.dtype)
        for j in range(y0 // ty, (y1 - 1) // ty + 1):
            for i in range(x0 // tx, (x1 - 1) // tx + 1):
                t = self._tile(j * self.n_tiles_x + i, j, i)
                ya, yb = max(y0, j * ty), min(y1, (j + 1) * ty)
                xa, xb = max(x0, i * tx), min(x1, (i + 1) * tx)
                out[ya - y0 : yb - y0, xa - x0 : xb - x0] = t[ya - j * ty : yb - j * ty, xa - i * tx : xb - i * tx]
        return out

    def _tile(self, row: int, j: int, i: int) -> np.ndarray:
        """Tile ``row`` of the table (tile j, i of the image), decoded and kept."""
        tile = self._tiles.get(row)
        if tile is None:
            shape = (
                min(self.tile[0], self.shape[0] - j * self.tile[0]),
                min(self.tile[1], self.shape[1] - i * self.tile[1]),
            )
            try:
                tile = self._decode(row, shape)
            except (ValueError, zlib.error) as exc:
                raise InputError(f"{self.path}: tile {row} cannot be decoded ({self.algorithm}): {exc}") from exc
            self._tiles[row] = tile
        return tile

    def _bytes(self, column: tuple[np.ndarray, int], row: int) -> np.ndarray:
        """The heap bytes (uint8) of ``row``'s array in a variable-length column."""
        desc, itemsize = column
        count, offset = int(desc[row, 0]), int(desc[row, 1])
        if offset + count * itemsize > self._heap.size:
            raise ValueError(
                f"its {count * itemsize} bytes at heap offset {offset} lie past the heap's {self._heap.size}"
            )
        return self._heap[offset : offset + count * itemsize]

    def _decode(self, row: int, shape: tuple[int, int]) -> np.ndarray:
        n = shape[0] * shape[1]
        cdata = self._bytes(self._data, row)
        if cdata.size == 0:
            # a tile that did not quantize well is stored losslessly beside the table's codec
            if self._gzip_data is not None and self._gzip_data[0][row, 0]:
                raw = zlib.decompress(self._bytes(self._gzip_data, row), 47)
            elif self._raw_data is not None:
                raw = self._bytes(self._raw_data, row).tobytes()
            else:
                raise ValueError("empty COMPRESSED_DATA and no lossless copy of the tile")
            return np.frombuffer(raw, np.dtype(self.dtype).newbyteorder(">")).reshape(shape).astype(self.dtype)
        if self.algorithm in ("RICE_1", "RICE_ONE"):
            from astropy.io.fits.hdu.compressed._codecs import Rice1

            ints = np.asarray(Rice1(blocksize=self.blocksize, bytepix=self.bytepix, tilesize=n).decode(cdata))[:n]
        else:
            raw = zlib.decompress(cdata, 47) if self.algorithm != "NOCOMPRESS" else cdata.tobytes()
            width = len(raw) // n
            if self.algorithm == "GZIP_2" and width > 1:  # bytes were shuffled: all first bytes, then all second ...
                raw = np.frombuffer(raw, np.uint8).reshape(width, n).T.tobytes()
            kind = "f" if (self.zbitpix < 0 and not self.quantized) else ("u" if width == 1 else "i")
            ints = np.frombuffer(raw, np.dtype(f">{kind}{width}")).astype(np.dtype(f"{kind}{width}"))
        ints = ints.reshape(shape)
        blank = self._zblank[row] if self._zblank is not None else self._zblank_header
        if not self.quantized:
            out = ints.astype(self.dtype, copy=False)
            if blank is not None and self.zbitpix < 0:
                out = np.where(ints == blank, np.nan, out).astype(self.dtype)
            return out
        scale, zero = self._zscale[row], self._zzero[row]
        values = ints.astype(np.float64)
        if self.dither:
            values -= _dither_sequence(row + self.dither_seed, n).reshape(shape)
            values += 0.5
        values *= scale
        values += zero
        out = values.astype(self.dtype)
        if self.dither == 2:
            out[ints == ZERO_VALUE] = 0.0
        if blank is not None:
            out[ints == blank] = np.nan
        return out


@contextmanager
def open_tiled_image(path: str, filesystem=None) -> Iterator[TiledImage]:
    """The :class:`TiledImage` of HDU 1 of the coadd file at ``path`` (local when ``filesystem`` is
    None, else on that pyarrow filesystem); InputError naming the file when it cannot be read or
    has no HDU 1."""
    from astropy.io import fits

    data = None if filesystem is None else read_bytes(path, filesystem)
    src = path if data is None else io.BytesIO(data)

    def opened(**kw):
        try:
            hdul = fits.open(src, **kw)
        except OSError as exc:
            raise InputError(f"cannot read coadd file {path}: {exc}") from exc
        if len(hdul) < 2:
            hdul.close()
            raise InputError(f"{path}: expected the image in HDU 1, file has {len(hdul)} HDU(s)")
        return hdul

    with opened(disable_image_compression=True) as hdul:
        header = hdul[1].header
        if "ZIMAGE" not in header:
            yield TiledImage(header, path, section=hdul[1].section)
        elif str(header["ZCMPTYPE"]).strip() in _DECODED_HERE:
            yield TiledImage(
                header, path, *_table_and_heap(path if data is None else data, hdul.fileinfo(1)["datLoc"], header, path)
            )
        else:
            if not isinstance(src, str):
                src.seek(0)
            with opened() as image:
                yield TiledImage(header, path, section=image[1].section)


#: Bytes and big-endian numpy type of the binary-table column types (FITS Standard 4.0 §7.3.1);
#: P and Q are variable-length array descriptors (element count, heap offset) of 32 and 64 bits.
_TFORM_TYPES = {
    "L": "i1",
    "B": "u1",
    "I": ">i2",
    "J": ">i4",
    "K": ">i8",
    "E": ">f4",
    "D": ">f8",
    "C": ">c8",
    "M": ">c16",
    "A": "S1",
    "P": ">i4",
    "Q": ">i8",
}
_TFORM = re.compile(r"^\s*(\d*)([LXBIJKAEDCMPQ])([BIJKED]?)")


def _table_and_heap(
    src: str | bytes, data_start: int, header, path: str
) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """(the rows of the compressed image's table in ``src`` (a local path or the file's bytes) as a
    numpy structured array, P/Q columns as
    (count, offset) pairs; its heap as uint8; the element size in bytes of each P/Q column),
    read straight from the file's bytes: astropy would make a Python object of every tile's array."""
    fields, elements = [], {}
    for i in range(1, int(header["TFIELDS"]) + 1):
        form = str(header[f"TFORM{i}"])
        m = _TFORM.match(form)
        if m is None:
            raise InputError(f"{path}: column {i} has an unknown TFORM {form!r}")
        repeat, code, element = int(m.group(1) or 1), m.group(2), m.group(3)
        name = str(header.get(f"TTYPE{i}", f"col{i}")).strip()
        if code == "X":
            fields.append((name, "u1", (-(-repeat // 8),)))
        elif code in "PQ":
            fields.append((name, _TFORM_TYPES[code], (2,)))
            elements[name] = np.dtype(_TFORM_TYPES[element]).itemsize
        else:
            fields.append((name, _TFORM_TYPES[code], (repeat,)))
    dtype = np.dtype(fields)
    row_bytes, n_rows = int(header["NAXIS1"]), int(header["NAXIS2"])
    if dtype.itemsize != row_bytes:
        raise InputError(f"{path}: table columns take {dtype.itemsize} bytes per row, NAXIS1 says {row_bytes}")
    heap_start = data_start + int(header.get("THEAP", row_bytes * n_rows))
    heap_size = int(header.get("PCOUNT", 0))
    raw = np.memmap(src, np.uint8, mode="r") if isinstance(src, str) else np.frombuffer(src, np.uint8)
    if heap_start + heap_size > raw.size:
        raise InputError(
            f"{path}: truncated: the tile table ends at byte {heap_start + heap_size}, the file at {raw.size}"
        )
    table = raw[data_start : data_start + row_bytes * n_rows].view(dtype)
    return table, raw[heap_start : heap_start + heap_size], elements
