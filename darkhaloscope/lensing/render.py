"""Batched renderer of lensed Sérsic(+clump) sources in g, r, z, in lenstronomy's ImageModel convention.

Pixel grid (matches lenstronomy ``ImageModel`` with transform [[-pix, 0], [0, pix]] centred on the
stamp; the tests compare the two pixel by pixel): array index [y, x] = [row j, column i]; the pixel
centre is at x = -(i - c) pix (RA-like, East left), y = (j - c) pix (North up), c = (n - 1)/2, in arcsec.
Sub-pixel centres sit at ((k + 0.5)/ss - 0.5) pix around each pixel centre; the pixel value is the
mean surface brightness over the ss x ss sub-pixels times pix^2, so an ``amp`` in nmgy/arcsec^2
gives nmgy/pixel and the sum of an image is its flux.

Speed (evaluate the source only where it matters): every pixel gets the trapezoid mean of the
surface brightness at its 4 ray-shot corners; pixels whose corner footprint in the source plane comes
within ``cut_radius`` source extents of the source (plus a one-pixel margin), and pixels within two
pixels of the lens centre (where a pixel's source-plane image is not bounded by its corners), are
recomputed with ss x ss sub-pixels, ss the row's ``row_supersample`` (``supersample``, or more for
a source narrower than a sub-pixel). Far from the source the profile is smooth on the footprint scale,
so the trapezoid mean differs from the ss x ss mean by far less than the test tolerances;
``adaptive=False`` supersamples every pixel (exact lenstronomy semantics).

PSF: per system and band, a Gaussian or Moffat (beta = 3.5) kernel from ``darkhaloscope.psf`` with
radius ``kernel_radius_pix(fwhm)`` (3 FWHM, capped at 31 px), applied by zero-padded FFT with the
kernel centre wrapped to index (0, 0), so the convolved arc is not shifted (a kernel whose centre
sits elsewhere in the padded array shifts the arc by that offset). Flux that the kernel spreads beyond the
stamp edge is lost, exactly as in lenstronomy's 'same' convolution.

Arc S/N (the one definition used everywhere): in each band, the matched-filter S/N of the noise-free,
PSF-convolved arc against the host's per-pixel inverse variance, S/N = sqrt(sum(arc^2 * invvar)) over
the pixels with invvar > 0. It is the S/N with which a detector that knew the arc's shape would see
it, so it bounds every aperture S/N sum(arc)/sqrt(sum(1/invvar)) from above (Cauchy-Schwarz): an
arc of S/N < 2 is invisible to any finder. It is linear in the source flux, so an arc spread
thinly over many pixels below 1 sigma each counts with all its light (a sum over the pixels above
1 sigma gave such arcs exactly 0, whatever their flux: BENCHMARKS.md, *The arc S/N as a matched
filter*).

Magnification: extended-source mu = lensed flux inside the stamp (no PSF) / the source's total flux,
which the unit-flux profile makes exactly 1, so mu is the lensed image's flux fraction. The ratio to
the unlensed source rendered on the same grid (lenstronomy's
image(unconvolved)/source_surface_brightness(de_lensed)) carries that render's quadrature error into
mu: a source under a pixel across is sampled near its cusp by a few sub-pixels only, while its
images, stretched by mu, are sampled finely. For a compact source near the caustic the ratio falls
short of lenstronomy at a fine supersampling and this definition agrees with it
(``test_magnification_of_a_compact_source_near_the_caustic`` in tests/test_lensing_vs_lenstronomy.py;
BENCHMARKS.md, *The bank's magnification for compact sources*).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch

from ..constants import PIXEL_SCALE_ARCSEC, STAMP_SIZE
from ..errors import InputError
from ..psf import MAX_KERNEL_RADIUS_PIX, MOFFAT_BETA, SURVEY_PSF_PROFILE, kernel_radius_pix, psf_kernels
from .profiles import DEFAULT_PROFILES, get_profile
from .sie import LensBatch, ray_shoot
from .source import SourceBatch, unit_flux_surface_brightness

#: Points per elementwise chunk, by device type: on a CPU ~64k float32 temporaries stay in cache
#: instead of streaming (B, 404, 404) arrays through memory; on a GPU a chunk must hold millions of
#: points for its kernels to fill the device (at 64k a chunk's render is kernel launches), and it
#: bounds memory. On a CPU the chunk changes the arcs by float32 round-off (the vectorised and
#: scalar tails of torch's kernels), so each device's chunk is fixed (BENCHMARKS.md, *The catalog
#: rows preprocessed once* and *The GPU check*, time other sizes).
_CHUNK_POINTS = {"cpu": 65536, "cuda": 1 << 22}


def _chunk_points(device: torch.device) -> int:
    """Points per elementwise chunk on ``device`` (the CPU's size for other device types)."""
    return _CHUNK_POINTS.get(device.type, _CHUNK_POINTS["cpu"])


@dataclass(frozen=True)
class RenderConfig:
    """Numerics of a render: stamp size [pixels], pixel scale [arcsec/pixel], supersampling factor
    (the least, per pixel side) and the sub-pixels [per narrowest source feature] that raise it for
    compact sources up to ``max_supersample`` (:func:`row_supersample`; 0 keeps ``supersample``
    for every row), PSF profile ('gaussian' | 'moffat') and Moffat beta, kernel extent [FWHM units],
    adaptive refinement and its cut radius [source major-axis radii]."""

    n_pix: int = STAMP_SIZE
    pixel_scale: float = PIXEL_SCALE_ARCSEC
    supersample: int = 4
    subpixels_per_feature: float = 2.0
    max_supersample: int = 32
    psf_profile: str = SURVEY_PSF_PROFILE
    moffat_beta: float = MOFFAT_BETA
    psf_n_fwhm: float = 3.0
    adaptive: bool = True
    cut_radius: float = 6.0

    def validate(self) -> None:
        if self.n_pix < 3 or self.n_pix % 2 == 0:
            raise InputError(f"n_pix must be odd and >= 3, got {self.n_pix}")
        if not 1 <= self.supersample <= self.max_supersample:
            raise InputError(
                f"supersample must be in [1, max_supersample={self.max_supersample}], got {self.supersample}"
            )
        if not self.subpixels_per_feature >= 0:
            raise InputError(f"subpixels_per_feature must be >= 0, got {self.subpixels_per_feature}")
        if self.psf_profile not in ("gaussian", "moffat"):
            raise InputError(f"psf_profile must be 'gaussian' or 'moffat', got {self.psf_profile!r}")
        if not self.pixel_scale > 0 or not self.cut_radius > 0:
            raise InputError(f"pixel_scale and cut_radius must be > 0, got {self.pixel_scale}, {self.cut_radius}")


@dataclass
class RenderResult:
    """Output of ``render_lensed_sources`` (torch tensors on the render device).

    arc: (B, 3, n, n) PSF-convolved lensed source [nmgy/pixel]; unconvolved: (B, 3, n, n) before
    the PSF [nmgy/pixel]; magnification: (B,) extended-source mu; lensed_flux: (B, 3) flux of the
    unconvolved lensed image inside the stamp [nmgy]; n_refined: (B,) number of supersampled pixels.
    """

    arc: torch.Tensor
    unconvolved: torch.Tensor
    magnification: torch.Tensor
    lensed_flux: torch.Tensor
    n_refined: torch.Tensor


def pixel_coordinates(n_pix: int, pixel_scale: float, dtype=torch.float64, device="cpu"):
    """(x_col, y_row): 1-d arcsec coordinates of pixel centres along columns (x, East left) and rows."""
    u = torch.arange(n_pix, dtype=dtype, device=device) - (n_pix - 1) / 2.0
    return -u * pixel_scale, u * pixel_scale


def _min2x2(a: torch.Tensor) -> torch.Tensor:
    return torch.minimum(torch.minimum(a[:, :-1, :-1], a[:, :-1, 1:]), torch.minimum(a[:, 1:, :-1], a[:, 1:, 1:]))


def _max2x2(a: torch.Tensor) -> torch.Tensor:
    return torch.maximum(torch.maximum(a[:, :-1, :-1], a[:, :-1, 1:]), torch.maximum(a[:, 1:, :-1], a[:, 1:, 1:]))


def row_supersample(src: SourceBatch, cfg: RenderConfig) -> torch.Tensor:
    """(B,) int64 supersampling factor of each row: enough sub-pixels that ``cfg.subpixels_per_feature``
    of them span the source's narrowest feature (``SourceBatch.narrowest_feature_arcsec``), at least
    ``cfg.supersample`` and at most ``cfg.max_supersample``. An image is no narrower than its source
    radially (an SIE's radial magnification is about 1), so a source narrower than a sub-pixel
    falls between the sub-pixel centres and its flux, hence mu, is mis-sampled (BENCHMARKS.md,
    *Supersampling compact sources*)."""
    need = torch.ceil(cfg.subpixels_per_feature * cfg.pixel_scale / src.narrowest_feature_arcsec())
    return torch.clamp(need, min=cfg.supersample, max=cfg.max_supersample).to(torch.int64)


def pixel_flux_fraction(lens: LensBatch, src: SourceBatch, cfg: RenderConfig):
    """Fraction of the source's total flux in each pixel (B, n, n) [dimensionless], and the number of
    supersampled pixels per system (B,).

    Equals mean(unit-flux surface brightness over ss x ss sub-pixels) x pix^2 (see module docstring),
    ss the row's :func:`row_supersample`.
    """
    dtype, device = src.r_sersic.dtype, src.r_sersic.device
    n, pix = cfg.n_pix, cfg.pixel_scale
    b = len(src)
    c = (n - 1) / 2.0
    # Ray-shoot pixel corners once for the trapezoid estimate and the footprint bounds.
    uc = torch.arange(n + 1, dtype=dtype, device=device) - c - 0.5
    bx = torch.empty((b, n + 1, n + 1), dtype=dtype, device=device)
    by = torch.empty_like(bx)
    sb_c = torch.empty_like(bx)
    step = max(1, _chunk_points(device) // (n + 1) ** 2)
    for s0 in range(0, b, step):
        s1 = min(b, s0 + step)
        m = s1 - s0
        xc = (-uc * pix).reshape(1, 1, n + 1).expand(m, n + 1, n + 1)
        yc = (uc * pix).reshape(1, n + 1, 1).expand(m, n + 1, n + 1)
        rows = torch.arange(s0, s1, device=device)
        bx[s0:s1], by[s0:s1] = ray_shoot(xc, yc, lens.index(rows))
        sb_c[s0:s1] = unit_flux_surface_brightness(bx[s0:s1], by[s0:s1], src.index(rows))
    out = 0.25 * (sb_c[:, :-1, :-1] + sb_c[:, :-1, 1:] + sb_c[:, 1:, :-1] + sb_c[:, 1:, 1:]) * pix * pix

    if cfg.adaptive:
        r_cut = (cfg.cut_radius * src.extent_arcsec()).maximum(src.clump_extent_arcsec())
        if src.images is not None:
            # a template's light ends at its edge: refine wherever its footprint may reach
            r_cut = r_cut.maximum(src.image_extent_arcsec())
        r_cut = r_cut + pix
        ex = lambda p: p.reshape(-1, 1, 1)  # noqa: E731
        dx = torch.clamp(torch.maximum(_min2x2(bx) - ex(src.center_x), ex(src.center_x) - _max2x2(bx)), min=0)
        dy = torch.clamp(torch.maximum(_min2x2(by) - ex(src.center_y), ex(src.center_y) - _max2x2(by)), min=0)
        active = dx * dx + dy * dy < ex(r_cut) ** 2
        xp, yp = pixel_coordinates(n, pix, dtype, device)
        rx = xp.reshape(1, 1, n) - ex(lens.center_x)
        ry = yp.reshape(1, n, 1) - ex(lens.center_y)
        active |= rx * rx + ry * ry < (2.0 * pix) ** 2
    else:
        active = torch.ones((b, n, n), dtype=torch.bool, device=device)
    active_idx = active.nonzero()  # (M, 3) rows of (b, j, i), in a fixed order
    ss_of_pixel = row_supersample(src, cfg)[active_idx[:, 0]]
    flat = out.reshape(-1)
    for ss in torch.unique(ss_of_pixel).tolist():
        idx = active_idx[ss_of_pixel == ss]
        o = (torch.arange(ss, dtype=dtype, device=device) + 0.5) / ss - 0.5
        oy, ox = torch.meshgrid(o, o, indexing="ij")
        ox = ox.reshape(1, -1)
        oy = oy.reshape(1, -1)
        step = max(1, _chunk_points(device) // (ss * ss))
        for start in range(0, idx.shape[0], step):
            sel = idx[start : start + step]
            bi, j, i = sel[:, 0], sel[:, 1].to(dtype), sel[:, 2].to(dtype)
            x = -((i - c)[:, None] + ox) * pix
            y = ((j - c)[:, None] + oy) * pix
            sx, sy = ray_shoot(x, y, lens.index(bi))
            sb = unit_flux_surface_brightness(sx, sy, src.index(bi))
            flat[(sel[:, 0] * n + sel[:, 1]) * n + sel[:, 2]] = sb.mean(dim=1) * (pix * pix)
    return out, active.sum(dim=(1, 2))


@functools.lru_cache(maxsize=None)
def _fft_size(n_pix: int) -> int:
    import scipy.fft

    # L >= n + r_max keeps the circular wrap of a 'same' convolution off the stamp.
    return int(scipy.fft.next_fast_len(n_pix + MAX_KERNEL_RADIUS_PIX, real=True))


def psf_kernel_stack(
    fwhm: torch.Tensor, cfg: RenderConfig, e1=None, e2=None
) -> list[tuple[torch.Tensor, int, torch.Tensor]]:
    """Kernels grouped by radius: list of (row indices into fwhm.reshape(-1), radius [pix], kernels).

    Each kernel's radius depends only on its own FWHM [arcsec], so a system renders to the same
    bytes whatever batch it is in.
    """
    flat = fwhm.reshape(-1)
    if not torch.all(torch.isfinite(flat) & (flat > 0)):
        bad = flat[~(torch.isfinite(flat) & (flat > 0))]
        raise InputError(f"PSF FWHM must be finite and > 0 arcsec, got {bad[:4].tolist()}")
    radii = np.array([kernel_radius_pix(float(f), cfg.pixel_scale, cfg.psf_n_fwhm) for f in flat.tolist()])
    groups = []
    for r in np.unique(radii):
        rows = torch.as_tensor(np.flatnonzero(radii == r), device=flat.device)
        ge1 = None if e1 is None else e1.reshape(-1)[rows]
        ge2 = None if e2 is None else e2.reshape(-1)[rows]
        k = psf_kernels(
            flat[rows],
            int(r),
            profile=cfg.psf_profile,
            beta=cfg.moffat_beta,
            e1=ge1,
            e2=ge2,
            pixel_scale=cfg.pixel_scale,
        )
        groups.append((rows, int(r), k))
    return groups


def convolve_psf(images: torch.Tensor, fwhm: torch.Tensor, cfg: RenderConfig, e1=None, e2=None) -> torch.Tensor:
    """Convolve images [nmgy/pixel] with per-system, per-band PSFs of FWHM (B, nb) [arcsec].

    images: (B, nb, n, n), or (B, 1, n, n) to convolve one image with each of the nb kernels
    (one forward FFT serves all bands when the morphology is shared). Returns (B, nb, n, n).
    Optional e1, e2 (B, nb) make the kernels elliptical (PSF anisotropy). Flux inside the stamp is
    preserved up to what the kernel spreads past the edge.
    """
    b, nb_img, n, _ = images.shape
    nb = fwhm.shape[1]
    if nb_img not in (1, nb):
        raise InputError(f"images have {nb_img} bands but {nb} PSFs were given")
    L = _fft_size(n)
    kern = torch.zeros((b * nb, L, L), dtype=images.dtype, device=images.device)
    for rows, r, k in psf_kernel_stack(fwhm.to(images.dtype), cfg, e1, e2):
        block = torch.zeros((k.shape[0], L, L), dtype=images.dtype, device=images.device)
        block[:, : 2 * r + 1, : 2 * r + 1] = k.to(images.dtype)
        kern[rows] = torch.roll(block, shifts=(-r, -r), dims=(1, 2))
    fk = torch.fft.rfft2(kern).reshape(b, nb, L, L // 2 + 1)
    fi = torch.fft.rfft2(images, s=(L, L))
    return torch.fft.irfft2(fi * fk, s=(L, L))[..., :n, :n]


def render_lensed_sources(
    lens: LensBatch, src: SourceBatch, psf_fwhm, cfg: RenderConfig = RenderConfig(), psf_e1=None, psf_e2=None
) -> RenderResult:
    """Render B lensed sources in g, r, z: PSF-convolved arcs [nmgy/pixel], mu and fluxes.

    lens, src: batches on the render device and dtype (float32 default; float64 for reference
    work). psf_fwhm: (B, 3) per-band FWHM [arcsec]. psf_e1/psf_e2: optional (B, 3) PSF ellipticity.
    """
    cfg.validate()
    if len(lens) != len(src):
        raise InputError(f"lens batch has {len(lens)} systems but source batch has {len(src)}")
    dtype, device = src.r_sersic.dtype, src.r_sersic.device
    fwhm = torch.as_tensor(psf_fwhm, dtype=dtype, device=device).reshape(len(src), -1)
    if fwhm.shape[1] != src.flux.shape[1]:
        raise InputError(f"psf_fwhm has {fwhm.shape[1]} bands, expected {src.flux.shape[1]}")
    lensed, n_ref = pixel_flux_fraction(lens, src, cfg)
    mu = lensed.sum(dim=(1, 2))
    flux = src.flux[:, :, None, None]
    unconv = lensed[:, None] * flux
    # The morphology is the same in every band, so convolve it once per kernel and scale by flux.
    arc = convolve_psf(lensed[:, None], fwhm, cfg, psf_e1, psf_e2) * flux
    return RenderResult(
        arc=arc, unconvolved=unconv, magnification=mu, lensed_flux=mu[:, None] * src.flux, n_refined=n_ref
    )


def arc_snr(arc: torch.Tensor, invvar: torch.Tensor) -> torch.Tensor:
    """Matched-filter arc S/N per band (module docstring): arc, invvar (B, 3, n, n) [nmgy/pixel,
    1/nmgy^2], the arc without noise. Returns (B, 3): sqrt(sum(arc^2 * invvar)) over pixels with a
    finite invvar > 0."""
    if arc.shape != invvar.shape:
        raise InputError(f"arc shape {tuple(arc.shape)} != invvar shape {tuple(invvar.shape)}")
    good = (invvar > 0) & torch.isfinite(invvar)
    return torch.sqrt((arc * arc * torch.where(good, invvar, torch.zeros_like(invvar))).sum(dim=(-2, -1)))


def add_poisson_noise(arc: torch.Tensor, gain_e_per_nmgy: float, generators) -> torch.Tensor:
    """Arc with source Poisson noise: Poisson(arc * gain) / gain [nmgy/pixel], one generator per system.

    The rate is arc * gain with negative FFT round-off set to 0, so pixels without arc flux get
    exactly 0 noise (clamping the rate to at least 1 e- would add spurious noise to every arc-free
    pixel of the host, whose own noise is already in its image). ``generators``: a sequence of B torch.Generators
    on the arc's device, each seeded from its injection (seeding.torch_generator_for).
    """
    if not gain_e_per_nmgy > 0:
        raise InputError(f"Poisson gain must be > 0 e-/nmgy, got {gain_e_per_nmgy}")
    if len(generators) != arc.shape[0]:
        raise InputError(f"need one generator per system: {len(generators)} for {arc.shape[0]} systems")
    rate = torch.clamp(arc, min=0.0) * gain_e_per_nmgy
    return torch.stack([torch.poisson(rate[i], generator=g) for i, g in enumerate(generators)]) / gain_e_per_nmgy


def _lenstronomy_source_kwargs(light, src: dict, band_flux: float, image: dict | None) -> list[dict]:
    """lenstronomy's source kwargs of ``lenstronomy_reference``: its INTERPOL ``image`` or the Sérsic ``src``,
    normalised to ``band_flux`` [nmgy]."""
    if image is not None:
        # INTERPOL's image is a surface brightness: the unit-sum template over the pixel area
        kw_src = [
            {
                "image": np.asarray(image["template"], dtype=np.float64) / image["scale"] ** 2,
                "amp": band_flux,
                "center_x": image["center_x"],
                "center_y": image["center_y"],
                "phi_G": image["phi"],
                "scale": image["scale"],
            }
        ]
    else:
        kw_src = [
            {
                "amp": 1.0,
                "R_sersic": src["r_sersic"],
                "n_sersic": src["n_sersic"],
                "e1": src["e1"],
                "e2": src["e2"],
                "center_x": src["center_x"],
                "center_y": src["center_y"],
            }
        ]
        clumps = src.get("clumps", ())
        # lenstronomy's GAUSSIAN takes its total flux as amp
        kw_src += [
            {"amp": c["flux_frac"] * band_flux, "sigma": c["sigma"], "center_x": c["x"], "center_y": c["y"]}
            for c in clumps
        ]
        frac = sum(c["flux_frac"] for c in clumps)
        kw_src[0]["amp"] = (1.0 - frac) * band_flux / light.total_flux(kw_src, norm=True)[0]
    return kw_src


def _reference_supersample(src: dict, image: dict | None, cfg: RenderConfig) -> int:
    """The supersampling factor this engine gives the source of ``lenstronomy_reference`` (its
    ``row_supersample``), which lenstronomy then applies to every pixel."""
    clumps = src.get("clumps", ())
    one = SourceBatch.from_arrays(
        flux=[[1.0] * 3],
        r_sersic=src["r_sersic"] if image is None else image["r_sersic"],
        n_sersic=src["n_sersic"] if image is None else 1.0,
        e1=src.get("e1", 0.0) if image is None else 0.0,
        e2=src.get("e2", 0.0) if image is None else 0.0,
        clump_flux_frac=sum(c["flux_frac"] for c in clumps),
        clump_x=[[c["x"] for c in clumps]] if clumps else None,
        clump_y=[[c["y"] for c in clumps]] if clumps else None,
        clump_sigma=[[c["sigma"] for c in clumps]] if clumps else None,
        clump_weight=[[c["flux_frac"] for c in clumps]] if clumps else None,
        dtype=torch.float64,
    )
    if image is not None:
        one = one.with_images([image["template"]], [0], [image["scale"]], [image["phi"]], [0])
    return int(row_supersample(one, cfg)[0])


def lenstronomy_reference(
    lens: dict,
    src: dict,
    psf_fwhm: float,
    band_flux: float,
    cfg: RenderConfig = RenderConfig(),
    psf_kernel: np.ndarray | None = None,
    with_mu: bool = True,
    profiles: tuple[str, ...] = DEFAULT_PROFILES,
    image: dict | None = None,
) -> tuple[np.ndarray, float]:
    """The same system rendered by lenstronomy ImageModel (the reference this engine is tested against).

    lens: the parameters of the composition ``profiles`` (floats, the profiles' units; by default
    theta_e, e1, e2, center_x, center_y, gamma1, gamma2), each profile given to lenstronomy as its
    ``to_lenstronomy`` says; src: r_sersic,
    n_sersic, e1, e2, center_x, center_y and optional clumps (a list of dicts flux_frac, x, y [arcsec,
    absolute], sigma [arcsec]: Gaussians holding those fractions of the flux); band_flux [nmgy];
    psf_fwhm [arcsec]. The PSF is lenstronomy's
    GAUSSIAN with truncation set so its radius equals ``kernel_radius_pix``, or ``psf_kernel`` as a
    PIXEL kernel when given. ``image``: instead of the Sérsic, lenstronomy's INTERPOL source with
    keys template (a unit-sum 2-d array, already mirrored if the source is flipped), scale [arcsec
    per template pixel], r_sersic (the half-light radius it is rescaled to [arcsec]), phi [rad],
    center_x, center_y (``src`` is then unused). Returns (image
    [nmgy/pixel] in this module's [y, x] layout, extended mu as this module defines it, the
    unconvolved lensed image's flux over ``band_flux``, the source's total flux; NaN when
    ``with_mu`` is False).
    """
    import lenstronomy.Util.util as lutil
    from lenstronomy.Data.pixel_grid import PixelGrid
    from lenstronomy.Data.psf import PSF
    from lenstronomy.ImSim.image_model import ImageModel
    from lenstronomy.LensModel.lens_model import LensModel
    from lenstronomy.LightModel.light_model import LightModel

    n, pix = cfg.n_pix, cfg.pixel_scale
    transform = np.array([[-pix, 0.0], [0.0, pix]])
    grid = PixelGrid(nx=n, ny=n, **lutil.centered_coordinate_system(n, transform))
    if psf_kernel is not None:
        psf = PSF(psf_type="PIXEL", kernel_point_source=np.asarray(psf_kernel, dtype=np.float64))
    else:
        r = kernel_radius_pix(psf_fwhm, pix, cfg.psf_n_fwhm)
        sigma = psf_fwhm / (2.0 * np.sqrt(2.0 * np.log(2.0)))
        psf = PSF(psf_type="GAUSSIAN", fwhm=psf_fwhm, truncation=r * pix / sigma, pixel_size=pix)
    names, kw_lens = zip(*(get_profile(name).to_lenstronomy(lens) for name in profiles))
    lens_model = LensModel(list(names))
    light = LightModel(
        ["INTERPOL"] if image is not None else ["SERSIC_ELLIPSE"] + ["GAUSSIAN"] * len(src.get("clumps", ()))
    )
    im = ImageModel(
        grid,
        psf,
        lens_model_class=lens_model,
        source_model_class=light,
        kwargs_numerics={"supersampling_factor": _reference_supersample(src, image, cfg)},
    )
    kw_src = _lenstronomy_source_kwargs(light, src, band_flux, image)
    img = im.image(kwargs_lens=list(kw_lens), kwargs_source=kw_src)
    if not with_mu:
        return np.asarray(img), float("nan")
    unconv = im.image(kwargs_lens=list(kw_lens), kwargs_source=kw_src, unconvolved=True)
    return np.asarray(img), float(unconv.sum() / band_flux)
