"""Stamp preprocessing for the lens finder: the one place that turns nanomaggy stamps into network input.

A :class:`PreprocessSpec` is stored in every checkpoint and is the only thing scoring uses, so a model
is always fed exactly what it was trained on (scoring with another normalisation annulus than the
one trained with shifts every score and costs recall).

Pipeline per stamp and band, vectorised over the batch:

1. robust background and scale from an outer annulus sized to the stamp (default 0.65–0.9 of the
   half-width, i.e. r in [32.5, 45) px on a 101 px stamp, outside most galaxy light):
   ``(x - median) / (1.4826 * MAD)``; NaN pixels are ignored by the statistics;
2. optional centre crop, then optional residual channels: the azimuthal-median radial profile
   (1 px bins) of the cropped stamp is subtracted, which removes the smooth host light that
   carries the "bright core" shortcut;
3. optional colour-difference channel ``g - α z`` (Gavazzi et al. 2014, ApJ 785, 144: the lens
   galaxy's light cancels where a blue source's does not), α the g/z flux ratio of the
   azimuthal-median profile in the core r < 5 px, in units of its noise ``hypot(σ_g, α σ_z)``:
   an arc inside the PSF is nearly round, so the radial profile absorbs it and the residual
   channels lose it, while its colour still differs from the host's;
4. optional antisymmetric channels ``(I - R₁₈₀ I) / √2`` per band, R₁₈₀ the 180° rotation about the
   host's light centre: an elliptical lens galaxy seen through a point-symmetric PSF is symmetric
   under that rotation (the rotational asymmetry of Abraham et al. 1996, MNRAS 279, L47; Conselice
   2003, ApJS 147, 1), so it cancels to its sub-pixel centring, with its ellipticity, its
   off-centre light and its colour gradient, all of which the radial profile leaves; an arc and its
   counter-image are not each other's rotation, so they stay; the noise keeps unit sigma;
5. NaN -> 0 (the annulus median) and a stretch: ``clip`` to ``±clip`` or ``asinh``,
   ``softening * asinh(z / softening)``, linear for faint pixels and logarithmic for bright ones,
   so an arc on top of a bright host core keeps its flux instead of being cut at the clip (a
   ±10σ clip removed a median 15 % of the arc flux, 40 % for θ_E < 1″, where host cores exceed
   it out to r ≈ 5–11 px).

Radial geometry helpers (radius grid, core mask, radial bins) live here too so every stage uses the
same definition of "the centre" (pixel ((H-1)/2, (W-1)/2), i.e. (50, 50) on a 101 px stamp), and
so does the stamp's symmetry group (:func:`dihedral`: the 8 flips and 90° rotations about that
centre), which training draws augmentations from and scoring averages over.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from functools import lru_cache

import numpy as np
import torch

from ..constants import PIXEL_SCALE_ARCSEC
from ..errors import InputError

#: Consistency factor turning a median absolute deviation into a Gaussian sigma.
MAD_TO_SIGMA = 1.4826

RESIDUAL_MODES = ("none", "append", "replace")
STRETCHES = ("clip", "asinh")


@dataclass(frozen=True)
class PreprocessSpec:
    """How stamps become network input. Frozen, hashable and JSON round-trippable.

    annulus_frac: (inner, outer) radii of the normalisation annulus as fractions of the stamp
        half-width (H-1)/2, in pixels; the annulus is inner <= r < outer.
    clip: symmetric clip of the normalised values (units of the annulus sigma), stretch 'clip'.
    crop: side in pixels of an odd centre crop applied last, or None for the full stamp.
    residual: 'none' (3 channels), 'append' (3 normalised + 3 residual channels) or 'replace'
        (3 residual channels only).
    stretch: 'clip' (clip to ±clip) or 'asinh' (softening * asinh(z / softening), no clip).
    softening: scale of the asinh stretch (units of the annulus sigma).
    colour_difference: append the ``g - α z`` channel (one more channel).
    antisymmetric: append the stamp's antisymmetric part about the host's light centre (three more
        channels, :func:`antisymmetric_part`).
    """

    annulus_frac: tuple[float, float] = (0.65, 0.9)
    clip: float = 10.0
    crop: int | None = None
    residual: str = "none"
    stretch: str = "clip"
    softening: float = 3.0
    colour_difference: bool = False
    antisymmetric: bool = False

    def __post_init__(self) -> None:
        lo, hi = (float(v) for v in self.annulus_frac)
        object.__setattr__(self, "annulus_frac", (lo, hi))
        if not 0.0 <= lo < hi <= 1.5:
            raise InputError(
                f"PreprocessSpec.annulus_frac must satisfy 0 <= inner < outer <= 1.5, got {self.annulus_frac}"
            )
        if not (np.isfinite(self.clip) and self.clip > 0):
            raise InputError(f"PreprocessSpec.clip must be a positive finite number, got {self.clip!r}")
        if self.crop is not None and (int(self.crop) != self.crop or self.crop < 1 or self.crop % 2 == 0):
            raise InputError(f"PreprocessSpec.crop must be None or an odd positive integer, got {self.crop!r}")
        if self.residual not in RESIDUAL_MODES:
            raise InputError(f"PreprocessSpec.residual must be one of {RESIDUAL_MODES}, got {self.residual!r}")
        if self.stretch not in STRETCHES:
            raise InputError(f"PreprocessSpec.stretch must be one of {STRETCHES}, got {self.stretch!r}")
        if not (np.isfinite(self.softening) and self.softening > 0):
            raise InputError(f"PreprocessSpec.softening must be a positive finite number, got {self.softening!r}")

    def out_channels(self, in_channels: int = 3) -> int:
        """Number of channels produced from ``in_channels`` input bands."""
        base = 2 * in_channels if self.residual == "append" else in_channels
        return base + int(self.colour_difference) + in_channels * int(self.antisymmetric)

    def antisymmetric_channels(self, in_channels: int = 3) -> slice:
        """The output channels :func:`antisymmetric_part` fills: the last ``in_channels``, or none."""
        n = self.out_channels(in_channels)
        return slice(n - in_channels * int(self.antisymmetric), n)

    def out_size(self, size: int) -> int:
        """Output side in pixels for an input stamp of side ``size``."""
        return size if self.crop is None else int(self.crop)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["annulus_frac"] = list(self.annulus_frac)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "PreprocessSpec":
        if not isinstance(d, dict):
            raise InputError(f"preprocessing spec must be a JSON object, got {type(d).__name__}")
        unknown = set(d) - {
            "annulus_frac",
            "clip",
            "crop",
            "residual",
            "stretch",
            "softening",
            "colour_difference",
            "antisymmetric",
        }
        if unknown:
            raise InputError(f"preprocessing spec has unknown fields {sorted(unknown)}")
        kw = dict(d)
        if "annulus_frac" in kw:
            kw["annulus_frac"] = tuple(kw["annulus_frac"])
        return cls(**kw)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "PreprocessSpec":
        try:
            d = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"preprocessing spec is not valid JSON: {exc}") from exc
        return cls.from_dict(d)


# ----------------------------------------------------------------------------- radial geometry


@lru_cache(maxsize=16)
def _radius_np(h: int, w: int) -> np.ndarray:
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    r = np.hypot(yy - (h - 1) / 2.0, xx - (w - 1) / 2.0)
    r.setflags(write=False)
    return r


def radius_grid(h: int, w: int) -> np.ndarray:
    """(H, W) float64 distance in pixels of each pixel from the stamp centre ((H-1)/2, (W-1)/2). Read-only."""
    return _radius_np(int(h), int(w))


def core_mask(h: int, w: int, radius: float = 5.0) -> np.ndarray:
    """(H, W) bool mask of the core r < radius px (69 pixels for radius 5)."""
    return radius_grid(h, w) < radius


def arc_clears_core(theta_e_arcsec, psf_fwhm_arcsec, radius: float = 5.0) -> np.ndarray:
    """Whether masking the r < ``radius`` px core leaves a lens's arc: its Einstein radius [arcsec]
    exceeds the core's radius by one PSF FWHM [arcsec] (NaN θ_E: False). With radius 0: whether the
    PSF resolves the arc at all (an Einstein radius below the FWHM is a brightening of the core)."""
    return np.asarray(theta_e_arcsec) >= radius * PIXEL_SCALE_ARCSEC + np.asarray(psf_fwhm_arcsec)


def radial_bins(h: int, w: int, width: float = 1.0) -> np.ndarray:
    """(H, W) int64 radial bin index floor(r / width) for bins of ``width`` px."""
    if width <= 0:
        raise InputError(f"radial bin width must be positive, got {width}")
    return np.floor(radius_grid(h, w) / width).astype(np.int64)


@lru_cache(maxsize=16)
def _bin_gather_index(h: int, w: int, width: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Padded gather index (B, Kmax) of the flat pixels in each radial bin (pad -> h*w, a NaN slot)
    and the (H*W,) bin of each pixel, for vectorised per-bin statistics."""
    b = radial_bins(h, w, width).ravel()
    nb = int(b.max()) + 1
    counts = np.bincount(b, minlength=nb)
    kmax = int(counts.max())
    idx = np.full((nb, kmax), h * w, dtype=np.int64)
    order = np.argsort(b, kind="stable")
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    pos = np.arange(h * w) - np.repeat(starts, counts)
    idx[b[order], pos] = order
    return torch.from_numpy(idx), torch.from_numpy(b)


def radial_profile(x: torch.Tensor, width: float = 1.0, statistic: str = "median") -> torch.Tensor:
    """Azimuthal profile of (N, C, H, W) images in radial bins of ``width`` px, ignoring NaN.

    Returns (N, C, B) with B = number of bins out to the stamp corner; statistic 'median' or 'mean'.
    """
    n, c, h, w = x.shape
    idx, _ = _bin_gather_index(h, w, float(width))
    idx = idx.to(x.device)
    flat = torch.cat([x.reshape(n, c, h * w), x.new_full((n, c, 1), float("nan"))], dim=-1)
    g = flat[:, :, idx.reshape(-1)].reshape(n, c, *idx.shape)
    if statistic == "median":
        return torch.nanmedian(g, dim=-1).values
    if statistic == "mean":
        return torch.nanmean(g, dim=-1)
    raise InputError(f"radial_profile statistic must be 'median' or 'mean', got {statistic!r}")


def subtract_radial_profile(x: torch.Tensor, width: float = 1.0, prof: torch.Tensor | None = None) -> torch.Tensor:
    """(N, C, H, W) images minus their azimuthal-median radial profile (1 px bins by default);
    ``prof``: that profile if already computed (``radial_profile(x, width)``)."""
    n, c, h, w = x.shape
    if prof is None:
        prof = radial_profile(x, width, "median")
    _, b = _bin_gather_index(h, w, float(width))
    return x - prof[:, :, b.to(x.device)].reshape(n, c, h, w)


#: Radii [px] of the g/z flux ratio α of the colour-difference channel: the core, so that the
#: channel's core depends on the core's light alone (a ratio taken where resolved arcs lie, 6-12 px,
#: would carry their colour into the whole channel, its core included: BENCHMARKS.md); and the
#: bounds α is clamped to (a negative or absurdly blue ratio is noise).
COLOUR_RATIO_RADII_PX = (0, 5)
COLOUR_RATIO_RANGE = (0.0, 2.0)


def colour_difference(z: torch.Tensor, scale: torch.Tensor, prof: torch.Tensor) -> torch.Tensor:
    """(N, 1, H, W) ``g - α z`` in units of its noise ``hypot(σ_g, α σ_z)``.

    z: (N, 3, H, W) stamps normalised per band (``(x - median) / scale``, bands g, r, z); scale:
    (N, 3, 1, 1) the bands' annulus sigma [nanomaggies]; prof: z's azimuthal-median profile in 1 px
    bins (N, 3, B). α = Σ n_b s_g prof_g / Σ n_b s_z prof_z over the bins of
    :data:`COLOUR_RATIO_RADII_PX` (n_b pixels each): the core's flux ratio, the host's where no
    arc lies in the core."""
    n, _, h, w = z.shape
    _, b = _bin_gather_index(h, w, 1.0)
    counts = torch.bincount(b, minlength=prof.shape[-1]).to(z.device, z.dtype)
    lo, hi = COLOUR_RATIO_RADII_PX
    sg, sz = scale[:, 0, 0, 0], scale[:, 2, 0, 0]
    fg = sg * torch.nansum(prof[:, 0, lo:hi] * counts[lo:hi], dim=-1)
    fz = sz * torch.nansum(prof[:, 2, lo:hi] * counts[lo:hi], dim=-1)
    alpha = torch.where(fz > 0, fg / fz, torch.zeros_like(fz)).clamp_(*COLOUR_RATIO_RANGE)
    d = (sg[:, None, None] * z[:, 0] - (alpha * sz)[:, None, None] * z[:, 2]) / torch.hypot(sg, alpha * sz)[
        :, None, None
    ]
    return d.unsqueeze(1)


#: The light centre the antisymmetric channels rotate about: the centroid of the r + z light (the
#: bands where a lens galaxy outshines a blue source) in a Gaussian window of this sigma [px],
#: re-centred this many times from the stamp centre and held within this many pixels of it, so
#: that a neighbour cannot pull it away (cutouts are centred on the catalog position, to 0.3 px
#: in the median on the mock).
CENTROID_WINDOW_SIGMA_PX = 2.0
CENTROID_ITERATIONS = 5
CENTROID_MAX_OFFSET_PX = 3.0


@lru_cache(maxsize=8)
def _centred_axis(size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Offsets [px] of a (size, size) stamp's pixels from its centre pixel along one axis, and the
    axis's full and real-input FFT frequencies [cycles/px]; float32 on the CPU."""
    off = torch.arange(size, dtype=torch.float32) - (size - 1) / 2
    return off, torch.fft.fftfreq(size, dtype=torch.float32), torch.fft.rfftfreq(size, dtype=torch.float32)


def light_centre(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, y) offsets [px] of the host's light centre from the stamp centre, each (N, 1, 1), for
    normalised stamps z (N, 3, H, W) square, NaN-free (see :data:`CENTROID_WINDOW_SIGMA_PX`). The
    Gaussian window is the product of its x and y factors, so each iteration takes 2 H
    exponentials per stamp, not H²."""
    n, _, h, _ = z.shape
    off = _centred_axis(h)[0].to(z.device, z.dtype)
    xx, yy = off.view(1, 1, h), off.view(1, h, 1)
    light = (z[:, 1] + z[:, 2]).clamp(min=0)
    cx = torch.zeros(n, 1, 1, dtype=z.dtype, device=z.device)
    cy = torch.zeros_like(cx)
    for _ in range(CENTROID_ITERATIONS):
        weight = (
            light
            * torch.exp(-((yy - cy) ** 2) / (2 * CENTROID_WINDOW_SIGMA_PX**2))
            * torch.exp(-((xx - cx) ** 2) / (2 * CENTROID_WINDOW_SIGMA_PX**2))
        )
        total = weight.sum((1, 2), keepdim=True) + 1e-9
        cx = ((weight * xx).sum((1, 2), keepdim=True) / total).clamp(-CENTROID_MAX_OFFSET_PX, CENTROID_MAX_OFFSET_PX)
        cy = ((weight * yy).sum((1, 2), keepdim=True) / total).clamp(-CENTROID_MAX_OFFSET_PX, CENTROID_MAX_OFFSET_PX)
    return cx, cy


def antisymmetric_part(z: torch.Tensor) -> torch.Tensor:
    """(N, 3, H, W) ``(I - R₁₈₀ I) / √2`` of normalised stamps z (N, 3, H, W) square, in the same
    units (a band's noise keeps unit sigma), with R₁₈₀ the 180° rotation about the host's
    :func:`light_centre`: the stamp is shifted by the Fourier shift theorem so that centre falls on
    the centre pixel, then rotated there. NaN pixels count as 0 (the annulus median)."""
    z = torch.nan_to_num(z, nan=0.0, posinf=0.0, neginf=0.0)
    h, w = z.shape[-2:]
    _, ky, kx = (t.to(z.device, z.dtype) for t in _centred_axis(h))
    cx, cy = light_centre(z)
    # a shift by (-cx, -cy): the spectrum times exp(2πi (kx cx + ky cy)), one factor per axis
    phase = torch.exp(2j * math.pi * ky.view(1, h, 1) * cy) * torch.exp(2j * math.pi * kx.view(1, 1, -1) * cx)
    shifted = torch.fft.irfft2(torch.fft.rfft2(z) * phase[:, None], s=(h, w))
    return (shifted - torch.flip(shifted, dims=(-2, -1))) / math.sqrt(2)


# ----------------------------------------------------------------------------- preprocessing


def _as_tensor(batch) -> torch.Tensor:
    if isinstance(batch, np.ndarray):
        t = torch.from_numpy(np.ascontiguousarray(batch, dtype=np.float32))
    elif isinstance(batch, torch.Tensor):
        t = batch.to(torch.float32)
    else:
        raise InputError(f"stamps must be a numpy array or torch tensor, got {type(batch).__name__}")
    if t.ndim != 4:
        raise InputError(f"stamps must have shape (N, bands, H, W), got {tuple(t.shape)}")
    return t


def annulus_stats(x: torch.Tensor, spec: PreprocessSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """Per image and band (median, 1.4826*MAD) over the spec's annulus, ignoring NaN. Shapes (N, C, 1, 1).

    A band whose annulus is all NaN gets median 0; a zero or undefined MAD gets scale 1 so that
    constant bands stay finite (scoring flags such stamps as invalid before they reach a model).
    """
    n, c, h, w = x.shape
    half = (min(h, w) - 1) / 2.0
    r = radius_grid(h, w)
    sel = np.flatnonzero(((r >= spec.annulus_frac[0] * half) & (r < spec.annulus_frac[1] * half)).ravel())
    if sel.size == 0:
        raise InputError(f"normalisation annulus {spec.annulus_frac} holds no pixels on a {h}x{w} stamp")
    ann = x.reshape(n, c, h * w)[:, :, torch.from_numpy(sel).to(x.device)]
    med = torch.nanmedian(ann, dim=-1).values
    mad = MAD_TO_SIGMA * torch.nanmedian((ann - med.unsqueeze(-1)).abs(), dim=-1).values
    med = torch.nan_to_num(med, nan=0.0)
    scale = torch.where(torch.isfinite(mad) & (mad > 0), mad, torch.ones_like(mad))
    return med[..., None, None], scale[..., None, None]


def asinh(x: torch.Tensor) -> torch.Tensor:
    """Inverse hyperbolic sine, ``sign(x) * log(|x| + hypot(|x|, 1))`` with |x| capped at 1e30:
    torch.asinh to float32 round-off below the cap (absolute 3e-7, relative 1e-6), asinh(1e30) above.

    torch.asinh on the CPU costs 4x this form on noise-like input (52 ms against 12 ms for 256
    six-channel 49 px stamps, one idle thread), and the stretch runs on every stamp of training and
    of the search. The cap is the one nan_to_num sets for infinite pixels (a stamp scoring flags)."""
    a = x.abs().clamp_(max=1e30)
    return torch.copysign(torch.log(a + torch.hypot(a, torch.ones((), dtype=a.dtype, device=a.device))), x)


def preprocess(batch, spec: PreprocessSpec) -> torch.Tensor:
    """Stamps (N, 3, H, W) in nanomaggies (numpy or torch) -> float32 torch (N, C, H', W') network input.

    C = spec.out_channels(3); H' = spec.crop or H. Runs on the input tensor's device.
    """
    x = _as_tensor(batch)
    n, c, h, w = x.shape
    if spec.crop is not None and spec.crop > min(h, w):
        raise InputError(f"crop {spec.crop} is larger than the {h}x{w} stamp")
    med, scale = annulus_stats(x, spec)
    if spec.crop is not None:
        # crop before the radial profile: the residual's profile is that of the network's input
        # (bins beyond crop/2 hold only its corners), at a fraction of the full stamp's cost
        y0, x0 = (h - spec.crop) // 2, (w - spec.crop) // 2
        x = x[:, :, y0 : y0 + spec.crop, x0 : x0 + spec.crop]
    z = (x - med) / scale
    prof = radial_profile(z, 1.0, "median") if spec.residual != "none" or spec.colour_difference else None
    extra = [colour_difference(z, scale, prof)] if spec.colour_difference else []
    if spec.antisymmetric:
        extra.append(antisymmetric_part(z))
    if spec.residual == "append":
        z = torch.cat([z, subtract_radial_profile(z, prof=prof)], dim=1)
    elif spec.residual == "replace":
        z = subtract_radial_profile(z, prof=prof)
    if extra:
        z = torch.cat([z, *extra], dim=1)
    if spec.stretch == "asinh":
        z = spec.softening * asinh(torch.nan_to_num(z, nan=0.0, posinf=1e30, neginf=-1e30) / spec.softening)
    else:
        z = torch.nan_to_num(z, nan=0.0, posinf=spec.clip, neginf=-spec.clip).clamp_(-spec.clip, spec.clip)
    return z.contiguous()


def preprocess_in_batches(images, spec: PreprocessSpec, batch_size: int = 512) -> torch.Tensor:
    """:func:`preprocess` of (N, 3, H, W) stamps ``batch_size`` at a time (bounded temporaries), as one
    (N, C, H', W') tensor; each stamp's result does not depend on the batch it is in."""
    return torch.cat([preprocess(images[i : i + batch_size], spec) for i in range(0, len(images), batch_size)])


#: Subgroups of the stamp's dihedral group by their size, as :func:`dihedral` codes: the stamp as
#: is; with its 180° rotation; with its two mirror images about the axes too (the Klein four-group);
#: all 8 flips and rotations. Scoring averages over one (``CheckpointSpec.dihedral_views``).
DIHEDRAL_SUBGROUPS = {1: (0,), 2: (0, 2), 4: (0, 2, 4, 6), 8: tuple(range(8))}
DIHEDRAL_SUBGROUP_NAMES = {
    1: "the stamp as it is",
    2: "the stamp and its 180° rotation",
    4: "the stamp, its 180° rotation and its mirror images about both axes",
    8: "all 8 flips and 90° rotations of the stamp",
}


def dihedral_view(x: torch.Tensor, code: int) -> torch.Tensor:
    """One of the 8 flips/90° rotations, the same for every image of x (N, C, H, W) square; code in
    0..7 (bits 0-1: number of 90° rotations, bit 2: horizontal flip, applied first). Code 0 returns
    x itself."""
    if code & 4:
        x = torch.flip(x, dims=(-1,))
    return torch.rot90(x, k=code & 3, dims=(-2, -1)) if code & 3 else x


def dihedral(x: torch.Tensor, code: torch.Tensor) -> torch.Tensor:
    """:func:`dihedral_view` per image: x (N, C, H, W) square; code (N,) int in 0..7."""
    out = x.clone()
    for c in range(1, 8):
        sel = torch.nonzero(code == c).flatten()
        if sel.numel():
            out[sel] = dihedral_view(x[sel], c)
    return out
