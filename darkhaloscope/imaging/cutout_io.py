"""Single cutouts for ``dhs cutout``: checked requests, and a FITS cube like the Legacy Surveys
service or a PNG.

FITS layout (as the Legacy Surveys viewer's ``fits-cutout`` endpoint writes it): primary HDU float32 (band, y, x) in
nanomaggies
per pixel with IMAGETYP='IMAGE', BANDS='grz', BAND0.., and a TAN WCS centred on the target (North
up, East left); an optional second HDU of the same shape with IMAGETYP='INVVAR' (1/nmgy²).
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from ..constants import AB_ZEROPOINT, BANDS, PIXEL_SCALE_ARCSEC
from ..errors import InputError
from .sources import ImageSource
from .wcs import TanWCS

#: Per-band (RGB plane, scale) of the Legacy Surveys / legacypipe grz colour mapping (z red, r green, g blue).
RGB_SCALES = {"g": (2, 6.0), "r": (1, 3.4), "z": (0, 2.2)}
#: asinh softening (nanomaggies after scaling) and stretch of the colour image.
RGB_STRETCH_Q = 20.0
RGB_OFFSET = 0.03
#: Largest cutout side (pixels) ``dhs cutout`` cuts by default: 3 bands x image + invvar of 1024²
#: float32 is 25 MB; the limit keeps a mistyped size from allocating the machine's memory.
MAX_CUTOUT_SIZE = 1024
#: Bytes a cutout may take in memory, its image and inverse variance (3 bands, float32 each)
#: together: whatever DHS_CUTOUT_MAX_SIZE allows, a request past it is refused before allocating.
MAX_CUTOUT_BYTES = 2**30
#: Output file endings and the format written for each.
CUTOUT_FORMATS = {".fits": "fits", ".fit": "fits", ".fits.gz": "fits", ".png": "png"}


class CutoutUnavailable(RuntimeError):
    """The source has no usable cutout for a valid request (no data in any band, or the fetch failed)."""


def cutout_format(out: str) -> str:
    """'fits' or 'png' from the output file's ending; InputError naming the file otherwise."""
    name = os.path.basename(str(out)).lower()
    for ending, fmt in sorted(CUTOUT_FORMATS.items(), key=lambda kv: -len(kv[0])):
        if name.endswith(ending) and len(name) > len(ending):
            return fmt
    raise InputError(f"output file {out!r} has an unknown extension: use one of {', '.join(CUTOUT_FORMATS)}")


def check_cutout_request(ra: float, dec: float, size: int, max_size: int = MAX_CUTOUT_SIZE) -> None:
    """InputError naming the value unless 0 <= ra < 360, -90 <= dec <= 90 (deg) and 1 <= size <= max_size (pixels)."""
    if not (np.isfinite(ra) and 0.0 <= ra < 360.0):
        raise InputError(f"RA {ra} deg is outside [0, 360)")
    if not (np.isfinite(dec) and -90.0 <= dec <= 90.0):
        raise InputError(f"DEC {dec} deg is outside [-90, 90]")
    if not 1 <= size <= max_size:
        raise InputError(f"size {size} pixels is outside [1, {max_size}] (the limit is DHS_CUTOUT_MAX_SIZE)")
    needed = 2 * len(BANDS) * 4 * size * size
    if needed > MAX_CUTOUT_BYTES:
        raise InputError(
            f"size {size} pixels needs {needed / 2**30:.1f} GiB for its image and inverse variance "
            f"({len(BANDS)} bands, float32), over the {MAX_CUTOUT_BYTES / 2**30:g} GiB a cutout may take"
        )


def cutout_to_file(
    source: ImageSource, ra: float, dec: float, size: int, out: str, max_size: int = MAX_CUTOUT_SIZE
) -> str:
    """Cut one g, r, z stamp of ``size``² pixels at (ra, dec) deg from ``source`` and write ``out``:
    FITS (cube (band, y, x) in nmgy + TAN WCS + INVVAR HDU) or PNG (asinh colour), by extension.

    Raises InputError for a bad request (checked before anything is read or allocated) and
    CutoutUnavailable when the source failed or has no data in any band there.
    """
    check_cutout_request(ra, dec, size, max_size)
    fmt = cutout_format(out)
    batch, failed = source.cutouts(np.array([ra]), np.array([dec]), size)
    if failed[0]:
        raise CutoutUnavailable(f"cutout at RA={ra}, DEC={dec} could not be fetched: {failed[0]}")
    if not batch.has_data()[0]:
        raise CutoutUnavailable(
            f"no imaging data at RA={ra}, DEC={dec} in any band ({', '.join(BANDS)}): "
            "the position is outside the survey's coverage"
        )
    if fmt == "png":
        write_cutout_png(out, batch.image[0])
    else:
        write_cutout_fits(
            out, batch.image[0], batch.invvar[0], ra, dec, offset_pix=(float(batch.dx[0]), float(batch.dy[0]))
        )
    return out


def _check_cube(image, name: str) -> np.ndarray:
    arr = np.asarray(image)
    if arr.ndim != 3 or arr.shape[0] != len(BANDS) or arr.shape[1] != arr.shape[2]:
        raise InputError(f"{name} must have shape (3, S, S) for bands {''.join(BANDS)}, got {arr.shape}")
    return arr.astype(np.float32, copy=False)


def write_cutout_fits(
    path: str,
    image,
    invvar=None,
    ra: float = 0.0,
    dec: float = 0.0,
    pixel_scale: float = PIXEL_SCALE_ARCSEC,
    offset_pix: tuple[float, float] = (0.0, 0.0),
    maskbits=None,
) -> None:
    """Write a g, r, z cutout cube (nmgy/pixel) with its WCS; ``invvar`` (1/nmgy²) as an INVVAR HDU.

    ra, dec (deg) is the target, at the stamp centre pixel size//2 shifted by ``offset_pix``
    (the sub-pixel offset a brick cutout records). ``maskbits`` (S, S) adds a MASKBITS HDU.
    """
    from astropy.io import fits

    img = _check_cube(image, "image")
    size = img.shape[-1]
    hdr = TanWCS.for_cutout(ra, dec, size, pixel_scale, offset_pix).to_header()
    # axis 3 is the band index (0, 1, 2 = BAND0..BAND2), so readers see a complete 3-axis WCS
    hdr.insert(0, ("WCSAXES", 3, "RA, Dec, band index"))
    hdr["CTYPE3"], hdr["CRPIX3"], hdr["CRVAL3"], hdr["CD3_3"] = "BAND", 1.0, 0.0, 1.0
    hdr["BANDS"] = "".join(BANDS)
    for i, b in enumerate(BANDS):
        hdr[f"BAND{i}"] = b
    hdr["BUNIT"] = "nanomaggy"
    hdr["MAGZERO"] = AB_ZEROPOINT
    hdr["PIXSCALE"] = (float(pixel_scale), "arcsec/pixel")
    primary = fits.PrimaryHDU(img, header=hdr)
    primary.header["IMAGETYP"] = "IMAGE"
    hdus = [primary]
    if invvar is not None:
        iv = _check_cube(invvar, "invvar")
        if iv.shape != img.shape:
            raise InputError(f"invvar shape {iv.shape} differs from image shape {img.shape}")
        h = fits.ImageHDU(iv, header=hdr.copy(), name="INVVAR")
        h.header["IMAGETYP"] = "INVVAR"
        h.header["BUNIT"] = "1/nanomaggy^2"
        hdus.append(h)
    if maskbits is not None:
        mb = np.asarray(maskbits)
        if mb.shape != img.shape[1:]:
            raise InputError(f"maskbits shape {mb.shape} differs from the image's {img.shape[1:]}")
        h = fits.ImageHDU(mb.astype(np.int32), header=hdr.copy(), name="MASKBITS")
        h.header["IMAGETYP"] = "MASKBITS"
        del h.header["BUNIT"]
        hdus.append(h)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fits.HDUList(hdus).writeto(path, overwrite=True)


def asinh_rgb(stamps: np.ndarray, bands: Sequence[str] = ("g", "r", "z")) -> np.ndarray:
    """Legacy-Surveys-style asinh colour image of g, r, z stamps in nanomaggies: the one colour
    mapping of cutout PNGs and the report's mosaics.

    The Lupton-style mapping of the Legacy Surveys viewer: each band is scaled, the mean scaled
    intensity I is stretched to asinh(Q I)/sqrt(Q), and each channel keeps its ratio to I (so
    colours survive the stretch). ``stamps`` is ``[band, y, x]`` or ``[n, band, y, x]``; returns float32 RGB in [0, 1]
    with shape
    ``[y, x, 3]`` or ``[n, y, x, 3]``. z goes to red, r to green, g to blue (the viewer's mapping).
    """
    a = np.asarray(stamps, dtype=np.float64)
    single = a.ndim == 3
    if single:
        a = a[None]
    if a.ndim != 4 or a.shape[1] != len(bands):
        raise InputError(f"stamps: expected [n, {len(bands)}, y, x] nanomaggies, got shape {np.shape(stamps)}")
    unknown = [b for b in bands if b not in RGB_SCALES]
    if unknown:
        raise InputError(f"bands {unknown} have no colour mapping; known {list(RGB_SCALES)}")
    a = np.nan_to_num(a, nan=0.0, posinf=0.0, neginf=0.0)
    scaled = [a[:, i] * RGB_SCALES[b][1] + RGB_OFFSET for i, b in enumerate(bands)]
    intensity = sum(np.maximum(0.0, s) for s in scaled) / len(bands)
    f_i = np.arcsinh(RGB_STRETCH_Q * intensity) / np.sqrt(RGB_STRETCH_Q)
    intensity = intensity + (intensity == 0.0) * 1e-6
    rgb = np.zeros(a.shape[:1] + a.shape[2:] + (3,), dtype=np.float64)
    for s, b in zip(scaled, bands):
        rgb[..., RGB_SCALES[b][0]] = s * f_i / intensity
    rgb = np.clip(rgb, 0.0, 1.0).astype(np.float32)
    return rgb[0] if single else rgb


def rgb_image(image) -> np.ndarray:
    """(S, S, 3) uint8 colour image of a g, r, z cube (nmgy/pixel), North up: :func:`asinh_rgb`."""
    return (asinh_rgb(_check_cube(image, "image")) * 255.0 + 0.5).astype(np.uint8)


def cutout_png(image) -> bytes:
    """PNG bytes of the colour image of a g, r, z cube (nmgy/pixel), North up (row 0 = top)."""
    import io

    from PIL import Image

    # FITS row 0 is the south edge; a PNG's first row is the top, so flip to keep North up
    out = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(rgb_image(image)[::-1])).save(out, format="PNG")
    return out.getvalue()


def write_cutout_png(path: str, image) -> None:
    """Write :func:`cutout_png` of a g, r, z cube (nmgy/pixel) to ``path``."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "wb") as f:
        f.write(cutout_png(image))
