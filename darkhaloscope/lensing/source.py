"""Lensed-source light: an elliptical Sérsic (lenstronomy convention) plus optional Gaussian clumps.

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
from dataclasses import dataclass, fields

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
        for f in fields(self):
            v = getattr(self, f.name)
            if not torch.all(torch.isfinite(v)):
                raise InputError(f"source parameter {f.name} has non-finite values")
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
                    f"source parameter {name} shape {tuple(getattr(self, name).shape)} != clump_x {tuple(self.clump_x.shape)}"
                )
        if k and torch.any((self.clump_flux_frac > 0) & (self.clump_weight.sum(1) <= 0)):
            raise InputError("sources with clump_flux_frac > 0 need a positive clump_weight sum")

    def index(self, idx: torch.Tensor) -> "SourceBatch":
        """Gather rows ``idx`` (any integer tensor shape)."""
        return SourceBatch(**{f.name: getattr(self, f.name)[idx] for f in fields(self)})

    def to(self, device=None, dtype=None) -> "SourceBatch":
        return SourceBatch(**{f.name: getattr(self, f.name).to(device=device, dtype=dtype) for f in fields(self)})

    def __len__(self) -> int:
        return int(self.flux.shape[0])

    def extent_arcsec(self) -> torch.Tensor:
        """(B,) source-plane radius [arcsec] of the Sérsic major axis (r_sersic/sqrt(q))."""
        c = torch.clamp(torch.sqrt(self.e1**2 + self.e2**2), max=0.9999)
        q = (1.0 - c) / (1.0 + c)
        return self.r_sersic / torch.sqrt(q)

    def clump_extent_arcsec(self) -> torch.Tensor:
        """(B,) largest distance [arcsec] of any clump's 4-sigma edge from the source centre (0 if none)."""
        if self.clump_x.shape[1] == 0:
            return torch.zeros_like(self.r_sersic)
        d = torch.sqrt(self.clump_x**2 + self.clump_y**2) + 4.0 * self.clump_sigma
        d = torch.where(self.clump_weight > 0, d, torch.zeros_like(d))
        return torch.where(self.clump_flux_frac > 0, d.max(dim=1).values, torch.zeros_like(self.r_sersic))


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
    return sb
