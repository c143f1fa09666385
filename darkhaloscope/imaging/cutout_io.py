"""Writing single cutouts for ``dhs cutout``: a FITS cube like the Legacy Surveys service, or a PNG.

FITS layout (shared/reference/science.md §2.6): primary HDU float32 (band, y, x) in nanomaggies
per pixel with IMAGETYP='IMAGE', BANDS='grz', BAND0.., and a TAN WCS centred on the target (North
up, East left); an optional second HDU of the same shape with IMAGETYP='INVVAR' (1/nmgy²).
"""

from __future__ import annotations

import os

import numpy as np

from ..constants import BANDS, PIXEL_SCALE_ARCSEC
from ..errors import InputError
from .bricks import TanWCS

#: Per-band (RGB plane, scale) of the Legacy Surveys / legacypipe grz colour mapping (z red, r green, g blue).
RGB_SCALES = {"g": (2, 6.0), "r": (1, 3.4), "z": (0, 2.2)}
#: asinh softening (nanomaggies after scaling) and stretch of the colour image.
RGB_STRETCH_Q = 20.0
RGB_OFFSET = 0.03


def _check_cube(image, name: str) -> np.ndarray:
    arr = np.asarray(image)
    if arr.ndim != 3 or arr.shape[0] != len(BANDS) or arr.shape[1] != arr.shape[2]:
        raise InputError(f"{name} must have shape (3, S, S) for bands {''.join(BANDS)}, got {arr.shape}")
    return arr.astype(np.float32, copy=False)


def cutout_wcs(ra_deg: float, dec_deg: float, size: int, pixel_scale: float = PIXEL_SCALE_ARCSEC,
               offset_pix: tuple[float, float] = (0.0, 0.0)) -> TanWCS:
    """TAN WCS of a ``size``² cutout with (ra, dec) at 0-based pixel (size//2 + dx, size//2 + dy)."""
    s = pixel_scale / 3600.0
    return TanWCS((float(ra_deg), float(dec_deg)),
                  (size // 2 + 1.0 + float(offset_pix[0]), size // 2 + 1.0 + float(offset_pix[1])),
                  ((-s, 0.0), (0.0, s)), (size, size))


def write_cutout_fits(path: str, image, invvar=None, ra: float = 0.0, dec: float = 0.0,
                      pixel_scale: float = PIXEL_SCALE_ARCSEC, offset_pix: tuple[float, float] = (0.0, 0.0),
                      maskbits=None) -> None:
    """Write a g, r, z cutout cube (nmgy/pixel) with its WCS; ``invvar`` (1/nmgy²) as an INVVAR HDU.

    ra, dec (deg) is the target, at the stamp centre pixel size//2 shifted by ``offset_pix``
    (the sub-pixel offset a brick cutout records). ``maskbits`` (S, S) adds a MASKBITS HDU.
    """
    from astropy.io import fits

    img = _check_cube(image, "image")
    size = img.shape[-1]
    hdr = cutout_wcs(ra, dec, size, pixel_scale, offset_pix).to_header()
    hdr.insert(0, ("WCSAXES", 2, "celestial axes; axis 3 of the cube is the band"))
    hdr["BANDS"] = "".join(BANDS)
    for i, b in enumerate(BANDS):
        hdr[f"BAND{i}"] = b
    hdr["BUNIT"] = "nanomaggy"
    hdr["MAGZERO"] = 22.5
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


def rgb_image(image) -> np.ndarray:
    """(S, S, 3) uint8 colour image of a g, r, z cube (nmgy/pixel), North up.

    The Lupton-style asinh mapping of the Legacy Surveys viewer: each band is scaled, the mean
    scaled intensity I is stretched to asinh(Q I)/sqrt(Q), and each channel keeps its ratio to I
    (so colours survive the stretch).
    """
    img = _check_cube(image, "image").astype(np.float64)
    planes = np.zeros(img.shape[1:] + (3,))
    scaled = []
    for j, b in enumerate(BANDS):
        plane, scale = RGB_SCALES[b]
        v = np.maximum(img[j] * scale + RGB_OFFSET, 0.0)
        scaled.append((plane, v))
    mean = sum(v for _, v in scaled) / len(scaled)
    stretch = np.arcsinh(RGB_STRETCH_Q * mean) / np.sqrt(RGB_STRETCH_Q)
    ratio = np.where(mean > 0, stretch / np.where(mean > 0, mean, 1.0), 0.0)
    for plane, v in scaled:
        planes[..., plane] = v * ratio
    return (np.clip(planes, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)


def write_cutout_png(path: str, image) -> None:
    """Write the colour image of a g, r, z cube (nmgy/pixel) as a PNG, North up (row 0 = top)."""
    from PIL import Image

    rgb = rgb_image(image)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    # FITS row 0 is the south edge; a PNG's first row is the top, so flip to keep North up
    Image.fromarray(np.ascontiguousarray(rgb[::-1])).save(path)
