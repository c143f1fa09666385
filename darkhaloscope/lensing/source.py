"""Lensed-source light: an elliptical Sérsic (lenstronomy convention) plus optional Gaussian clumps,
or a pixelised image (a real galaxy, ``source_models``) sampled bilinearly like lenstronomy's INTERPOL.

Units: positions in arcsec (source plane), fluxes in nanomaggies (AB ZP 22.5), surface brightness
in nanomaggies/arcsec^2.

Flux semantics (chosen so a source's magnitude is its total flux whatever its clumps: clumps added
on top of a full-flux Sérsic would make clumpy sources brighter than their magnitude says):
``clump_flux_frac`` is the fraction of the source's *total* flux that sits in clumps. The Sérsic is
normalised to (1 - clump_flux_frac) of the total and the clumps share clump_flux_frac according to
their ``clump_weight`` (normalised to sum 1 per source), so the analytic total flux is exactly the
band flux for every clump setting. Clumps share the Sérsic's colours, so the morphology is the same
in g, r, z and one evaluation serves all three bands.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

import numpy as np
import torch

from ..constants import BANDS, mag_to_flux
from ..errors import InputError
from ..profiles import sersic_amp_for_flux, sersic_surface_brightness


def band_fluxes(mag_r, g_minus_r, r_minus_z) -> np.ndarray:
    """(N, 3) g, r, z fluxes [nanomaggies] from r magnitude and colours g-r, r-z [mag]."""
    mag_r = np.asarray(mag_r, dtype=np.float64)
    gr = np.broadcast_to(np.asarray(g_minus_r, dtype=np.float64), mag_r.shape)
    rz = np.broadcast_to(np.asarray(r_minus_z, dtype=np.float64), mag_r.shape)
    for name, v in (("mag_r", mag_r), ("g_minus_r", gr), ("r_minus_z", rz)):
        if not np.all(np.isfinite(v)):
            raise InputError(f"source {name} has non-finite values: {v[~np.isfinite(v)][:4]}")
    out = np.stack([mag_to_flux(mag_r + gr), mag_to_flux(mag_r), mag_to_flux(mag_r - rz)], axis=-1)
    assert out.shape[-1] == len(BANDS)
    return out


@dataclass
class SourceBatch:
    """B Sérsic(+clumps) sources.

    flux: (B, 3) total g, r, z flux [nmgy]; r_sersic: (B,) product-average half-light radius
    [arcsec]; n_sersic: (B,); e1, e2: (B,) ellipticity; center_x, center_y: (B,) source-plane
    position [arcsec]; clump_flux_frac: (B,) in [0, 1); clump_x, clump_y: (B, K) clump centres
    [arcsec, relative to the source centre]; clump_sigma: (B, K) Gaussian sigma [arcsec];
    clump_weight: (B, K) >= 0 relative clump fluxes (K may be 0).

    Image sources (all None for analytic batches): images: tuple of G unit-sum templates (H_g, W_g),
    shared by the batch (never indexed by row); image_index: (B,) template of each row (-1: the
    analytic Sérsic + clumps); image_scale: (B,) [arcsec per template pixel]; image_phi: (B,)
    rotation [rad]; image_flip: (B,) 1 mirrors the template's columns, 0 not.
    """

    flux: torch.Tensor
    r_sersic: torch.Tensor
    n_sersic: torch.Tensor
    e1: torch.Tensor
    e2: torch.Tensor
    center_x: torch.Tensor
    center_y: torch.Tensor
    clump_flux_frac: torch.Tensor
    clump_x: torch.Tensor
    clump_y: torch.Tensor
    clump_sigma: torch.Tensor
    clump_weight: torch.Tensor
    image_index: torch.Tensor | None = None
    image_scale: torch.Tensor | None = None
    image_phi: torch.Tensor | None = None
    image_flip: torch.Tensor | None = None
    images: tuple | None = field(default=None, metadata={"shared": True})

    def _row_fields(self):
        """(name, tensor) of the per-row parameters that are set."""
        for f in fields(self):
            v = getattr(self, f.name)
            if v is not None and not f.metadata.get("shared"):
                yield f.name, v

    def with_images(self, images, index, scale, phi, flip) -> "SourceBatch":
        """This batch with image sources (class docstring): ``images`` a sequence of 2-d arrays
        (unit sum), the rest (B,) array-likes; rows with index -1 stay analytic."""
        dtype, device = self.r_sersic.dtype, self.r_sersic.device

        def vec(v):
            return torch.as_tensor(np.array(v, dtype=np.float64), dtype=dtype, device=device).reshape(len(self))

        kw = {name: v for name, v in self._row_fields()}
        ims = tuple(torch.as_tensor(np.array(im, dtype=np.float64), dtype=dtype, device=device) for im in images)
        out = SourceBatch(
            **kw, image_index=vec(index), image_scale=vec(scale), image_phi=vec(phi), image_flip=vec(flip), images=ims
        )
        out.validate()
        return out

    @classmethod
    def from_arrays(
        cls,
        flux,
        r_sersic,
        n_sersic,
        e1=0.0,
        e2=0.0,
        center_x=0.0,
        center_y=0.0,
        clump_flux_frac=0.0,
        clump_x=None,
        clump_y=None,
        clump_sigma=None,
        clump_weight=None,
        device="cpu",
        dtype=torch.float32,
    ) -> "SourceBatch":
        """Build from array-likes; scalars broadcast to the batch, clumps default to none."""
        flux_t = torch.as_tensor(np.array(flux, dtype=np.float64), dtype=dtype, device=device).reshape(-1, len(BANDS))
        b = flux_t.shape[0]

        def vec(v):
            return (
                torch.as_tensor(np.array(v, dtype=np.float64), dtype=dtype, device=device).reshape(-1).expand(b).clone()
            )

        def mat(v):
            if v is None:
                return torch.zeros((b, 0), dtype=dtype, device=device)
            return torch.as_tensor(np.array(v, dtype=np.float64), dtype=dtype, device=device).reshape(b, -1)

        src = cls(
            flux_t,
            vec(r_sersic),
            vec(n_sersic),
            vec(e1),
            vec(e2),
            vec(center_x),
            vec(center_y),
            vec(clump_flux_frac),
            mat(clump_x),
            mat(clump_y),
            mat(clump_sigma),
            mat(clump_weight),
        )
        src.validate()
        return src

    def validate(self) -> None:
        """Raise InputError on non-finite or out-of-range parameters."""
        for name, v in self._row_fields():
            if not torch.all(torch.isfinite(v)):
                raise InputError(f"source parameter {name} has non-finite values")
        checks = (
            ("r_sersic", self.r_sersic <= 0, "> 0 arcsec"),
            ("n_sersic", (self.n_sersic < 0.2) | (self.n_sersic > 8), "in [0.2, 8]"),
            ("flux", self.flux < 0, ">= 0 nmgy"),
            ("clump_flux_frac", (self.clump_flux_frac < 0) | (self.clump_flux_frac >= 1), "in [0, 1)"),
            ("clump_sigma", self.clump_sigma <= 0, "> 0 arcsec"),
            ("clump_weight", self.clump_weight < 0, ">= 0"),
        )
        for name, bad, want in checks:
            if torch.any(bad):
                raise InputError(f"source parameter {name} must be {want}, got {getattr(self, name)[bad][:4].tolist()}")
        k = self.clump_x.shape[1]
        for name in ("clump_y", "clump_sigma", "clump_weight"):
            if getattr(self, name).shape != self.clump_x.shape:
                raise InputError(
                    f"source parameter {name} shape {tuple(getattr(self, name).shape)} != clump_x "
                    f"{tuple(self.clump_x.shape)}"
                )
        if k and torch.any((self.clump_flux_frac > 0) & (self.clump_weight.sum(1) <= 0)):
            raise InputError("sources with clump_flux_frac > 0 need a positive clump_weight sum")
        if self.images is not None:
            idx = self.image_index
            if torch.any((idx < -1) | (idx >= len(self.images)) | (idx != torch.round(idx))):
                raise InputError(f"source image_index must be -1 or a template index < {len(self.images)}")
            if torch.any((idx >= 0) & ~(self.image_scale > 0)):
                raise InputError("source image_scale must be > 0 arcsec per template pixel")
            for g, im in enumerate(self.images):
                if im.ndim != 2 or not torch.all(torch.isfinite(im)):
                    raise InputError(f"source template {g} must be a finite 2-d image, got shape {tuple(im.shape)}")

    def index(self, idx: torch.Tensor) -> "SourceBatch":
        """Gather rows ``idx`` (any integer tensor shape)."""
        return SourceBatch(**{name: v[idx] for name, v in self._row_fields()}, images=self.images)

    def to(self, device=None, dtype=None) -> "SourceBatch":
        ims = None if self.images is None else tuple(im.to(device=device, dtype=dtype) for im in self.images)
        kw = {name: v.to(device=device, dtype=dtype) for name, v in self._row_fields()}
        return SourceBatch(**kw, images=ims)

    def __len__(self) -> int:
        return int(self.flux.shape[0])

    def extent_arcsec(self) -> torch.Tensor:
        """(B,) source-plane radius [arcsec] of the Sérsic major axis (r_sersic/sqrt(q))."""
        c = torch.clamp(torch.sqrt(self.e1**2 + self.e2**2), max=0.9999)
        q = (1.0 - c) / (1.0 + c)
        return self.r_sersic / torch.sqrt(q)

    def narrowest_feature_arcsec(self) -> torch.Tensor:
        """(B,) width [arcsec] of each row's narrowest light feature, which a render's sub-pixels
        must resolve. A Sérsic's cusp holds light between sub-pixel centres, so its width is its
        minor-axis half-light radius r_sersic*sqrt(q); the smooth profiles are sampled well at about
        two sub-pixels per full width at half maximum: a clump's 2 sqrt(2 ln 2) sigma, if narrower,
        and an image source's half-light radius r_sersic (a template is smooth on its own pixels,
        which the HST PSF spans several of)."""
        c = torch.clamp(torch.sqrt(self.e1**2 + self.e2**2), max=0.9999)
        out = self.r_sersic * torch.sqrt((1.0 - c) / (1.0 + c))
        if self.clump_x.shape[1]:
            lit = (self.clump_weight > 0) & (self.clump_flux_frac[:, None] > 0)
            sigma = torch.where(lit, self.clump_sigma, torch.full_like(self.clump_sigma, math.inf))
            out = torch.minimum(out, 2.0 * math.sqrt(2.0 * math.log(2.0)) * sigma.min(dim=1).values)
        if self.images is not None:
            out = torch.where(self.image_index >= 0, self.r_sersic, out)
        return out

    def clump_extent_arcsec(self) -> torch.Tensor:
        """(B,) largest distance [arcsec] of any clump's 4-sigma edge from the source centre (0 if none)."""
        if self.clump_x.shape[1] == 0:
            return torch.zeros_like(self.r_sersic)
        d = torch.sqrt(self.clump_x**2 + self.clump_y**2) + 4.0 * self.clump_sigma
        d = torch.where(self.clump_weight > 0, d, torch.zeros_like(d))
        return torch.where(self.clump_flux_frac > 0, d.max(dim=1).values, torch.zeros_like(self.r_sersic))

    def image_extent_arcsec(self) -> torch.Tensor:
        """(B,) half-diagonal [arcsec] of each row's rescaled template (0 for analytic rows)."""
        out = torch.zeros_like(self.r_sersic)
        if self.images is None:
            return out
        for g, im in enumerate(self.images):
            half = 0.5 * math.hypot(im.shape[0] + 1, im.shape[1] + 1)
            out = torch.where(self.image_index == g, half * self.image_scale, out)
        return out


def unit_flux_surface_brightness(bx: torch.Tensor, by: torch.Tensor, src: SourceBatch) -> torch.Tensor:
    """Source surface brightness for unit total flux [1/arcsec^2] at source-plane points (bx, by).

    bx, by: (B, ...) with B == len(src) (parameters broadcast over trailing dims).
    Multiply by ``src.flux[:, band]`` to get nmgy/arcsec^2 in that band.
    """

    def ex(p):
        return p.reshape(p.shape + (1,) * (bx.ndim - p.ndim))

    frac = src.clump_flux_frac
    one = torch.ones_like(src.r_sersic)
    amp = sersic_amp_for_flux(one - frac, src.r_sersic, src.n_sersic)
    sb = sersic_surface_brightness(
        bx, by, ex(amp), ex(src.r_sersic), ex(src.n_sersic), ex(src.e1), ex(src.e2), ex(src.center_x), ex(src.center_y)
    )
    k = src.clump_x.shape[1]
    if k:
        wsum = torch.clamp(src.clump_weight.sum(dim=1, keepdim=True), min=torch.finfo(bx.dtype).tiny)
        clump_flux = frac[:, None] * src.clump_weight / wsum  # (B, K)
        for j in range(k):
            s2 = ex(src.clump_sigma[:, j]) ** 2
            dx = bx - ex(src.center_x + src.clump_x[:, j])
            dy = by - ex(src.center_y + src.clump_y[:, j])
            sb = sb + ex(clump_flux[:, j]) / (2.0 * math.pi * s2) * torch.exp(-0.5 * (dx * dx + dy * dy) / s2)
    if src.images is not None:
        sb = _with_image_sources(sb, bx, by, src)
    return sb


def _with_image_sources(sb: torch.Tensor, bx: torch.Tensor, by: torch.Tensor, src: SourceBatch) -> torch.Tensor:
    """``sb`` with the rows of image sources replaced by their templates' bilinear interpolation.

    lenstronomy INTERPOL's convention: template pixel (row j, column i) sits at u = i - (W-1)/2,
    v = j - (H-1)/2 template pixels, where (u, v) = R(phi) (x - x_c, y - y_c) / scale with
    R(phi) = [[cos, sin], [-sin, cos]] (lenstronomy ``util.rotate``); a flip mirrors u. Outside the
    template the light falls linearly to 0 over one pixel (INTERPOL's zero border, grid_sample's
    zero padding with align_corners). Unit flux: a unit-sum template over scale^2 [1/arcsec^2].
    """
    import torch.nn.functional as F

    out = sb.clone()
    b = len(src)
    flat_x, flat_y = bx.reshape(b, -1), by.reshape(b, -1)
    flat_out = out.reshape(b, -1)
    for g, im in enumerate(src.images):
        rows = (src.image_index == g).nonzero().reshape(-1)
        if rows.numel() == 0:
            continue
        h, w = im.shape
        scale, phi = src.image_scale[rows, None], src.image_phi[rows, None]
        dx, dy = flat_x[rows] - src.center_x[rows, None], flat_y[rows] - src.center_y[rows, None]
        c, s = torch.cos(phi), torch.sin(phi)
        u = (c * dx + s * dy) / scale
        v = (-s * dx + c * dy) / scale
        u = torch.where(src.image_flip[rows, None] > 0.5, -u, u)
        # align_corners=True maps -1 and +1 to the centres of the first and last pixels
        grid = torch.stack([2.0 * u / max(w - 1, 1), 2.0 * v / max(h - 1, 1)], dim=-1).reshape(1, 1, -1, 2)
        val = F.grid_sample(im[None, None], grid, mode="bilinear", padding_mode="zeros", align_corners=True)
        flat_out[rows] = val.reshape(rows.numel(), -1) / (scale * scale)
    return out
