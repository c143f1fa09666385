"""Named imaging-nuisance models of the injections: ``none`` (the default) or ``survey``.

``survey`` turns on the domain randomisation of ``lensing.randomize`` where it acts on the rendered
arc: every arc's PSF kernel gets an ellipticity (``draw_psf_anisotropy``, seeded by the injection's
seed), each component N(0, sigma_e) clipped to |e| <= 0.3, with sigma_e *calibrated* on the real
DECam PSFEx models shipped with the package (``imaging.psfex.packaged_psfex``, one CCD each in g, r
and z): the rms of the ellipticity components of those models over a 5 x 5 grid of positions
spanning each model's fitted CCD range (POLZERO +- POLSCAL/2, Bertin 2011), measured by
Gaussian-weighted second moments corrected for the weight (exact for a Gaussian PSF: the weighted
covariance is (C^-1 + W^-1)^-1), in lenstronomy's convention e = (1 - q)/(1 + q) (cos 2phi, sin 2phi).
The spread so measured includes each exposure's mean ellipticity, which is what varies between the
exposures a coadd stacks.

The pixel-level artefacts of ``randomize.apply_artifacts`` (band jitter, saturation wings, cosmic
rays, background plane) act on a whole stamp and must hit an injection and its paired control
alike (``randomize_pair``); the bank's controls are the host stamps themselves, which carry their
real survey's artefacts, so ``survey`` does not add them to the arcs.
"""

from __future__ import annotations

import functools

import numpy as np

from ..constants import BANDS
from ..errors import InputError
from .randomize import RandomizationConfig

#: The named nuisance models.
NUISANCE_MODELS = ("none", "survey")
#: The default: no randomisation (the engine as before).
DEFAULT_NUISANCE = "none"
#: Positions per CCD axis at which the PSFEx models are measured.
PSFEX_GRID = 5
#: Size [image pixels] of the PSFEx stamp the moments are measured on.
PSFEX_STAMP = 31


def check_nuisance(name: str) -> None:
    """InputError naming ``name`` and the known names unless it is a nuisance model."""
    if name not in NUISANCE_MODELS:
        raise InputError(f"unknown nuisance model {name!r}; known: {list(NUISANCE_MODELS)}")


def psf_ellipticity(psf: np.ndarray) -> tuple[float, float]:
    """(e1, e2) of a PSF image (lenstronomy convention, x along columns, y along rows) from
    second moments weighted by a circular Gaussian of the PSF's own size, corrected for the weight."""
    img = np.asarray(psf, dtype=np.float64)
    ny, nx = img.shape
    y, x = np.mgrid[0:ny, 0:nx].astype(np.float64)
    total = img.sum()
    xc, yc = (img * x).sum() / total, (img * y).sum() / total
    dx, dy = x - xc, y - yc
    r2 = (img * (dx * dx + dy * dy)).sum() / total
    s2 = max(0.5 * r2, 0.25)  # the weight's variance per axis [pix^2], the PSF's unweighted size
    for _ in range(3):  # the weight tracks the (weight-corrected) PSF size
        wimg = img * np.exp(-0.5 * (dx * dx + dy * dy) / s2)
        wt = wimg.sum()
        m = np.array(
            [
                [(wimg * dx * dx).sum() / wt, (wimg * dx * dy).sum() / wt],
                [(wimg * dx * dy).sum() / wt, (wimg * dy * dy).sum() / wt],
            ]
        )
        c = np.linalg.inv(np.linalg.inv(m) - np.eye(2) / s2)
        s2 = 0.5 * float(np.trace(c))
    qxx, qyy, qxy = c[0, 0], c[1, 1], c[0, 1]
    denom = qxx + qyy + 2.0 * np.sqrt(max(qxx * qyy - qxy * qxy, 0.0))
    return float((qxx - qyy) / denom), float(2.0 * qxy / denom)


def psfex_ellipticities(models) -> np.ndarray:
    """(n, 2) PSF ellipticities of PSFEx ``models`` on a PSFEX_GRID^2 grid of CCD positions each."""
    out = []
    for m in models:
        xs = m.zero[0] + m.scale[0] * (np.linspace(0.0, 1.0, PSFEX_GRID) - 0.5)
        ys = m.zero[1] + m.scale[1] * (np.linspace(0.0, 1.0, PSFEX_GRID) - 0.5)
        for yy in ys:
            for xx in xs:
                out.append(psf_ellipticity(m.image_psf(float(xx), float(yy), PSFEX_STAMP)))
    return np.asarray(out)


@functools.lru_cache(maxsize=1)
def psfex_ellipticity_sigma() -> float:
    """sigma_e: rms of the ellipticity components of the shipped PSFEx models (module docstring)."""
    from ..imaging.psfex import packaged_psfex

    e = psfex_ellipticities([packaged_psfex(b) for b in BANDS])
    return float(np.sqrt(np.mean(e * e)))


def randomization(name: str) -> RandomizationConfig | None:
    """The randomisation of nuisance model ``name``: None for ``none``; for ``survey`` the
    RandomizationConfig with ``psf_e_sigma`` calibrated on the PSFEx models (module docstring)."""
    check_nuisance(name)
    if name == "none":
        return None
    return RandomizationConfig(psf_e_sigma=psfex_ellipticity_sigma())


def arc_psf_anisotropy(name: str, seeds, device, dtype):
    """(psf_e1, psf_e2), each (n, 3), of task ``seeds`` under nuisance model ``name``, or (None,
    None) when it leaves the PSF round (``render_lensed_sources``' arguments)."""
    from .randomize import draw_psf_anisotropy

    cfg = randomization(name)
    if cfg is None:
        return None, None
    if len(np.asarray(seeds)) == 0:
        raise InputError("no task seeds to draw PSF anisotropy for")
    return draw_psf_anisotropy(np.asarray(seeds), cfg, device=device, dtype=dtype)
