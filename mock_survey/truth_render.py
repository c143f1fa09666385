"""The mock's truth renderer: the known and hidden lenses' arcs drawn by lenstronomy, independently
of the injection engine the finder trains on (``darkhaloscope.lensing``: SIE + shear, Sérsic
sources, Moffat PSF, white noise).

Model (units: arcsec, nanomaggies; frame x East, y North as the engine's truth columns; images
[y, x] with pixel x towards West, the brick grids' layout):
- Mass: lenstronomy EPL (Tessore & Metcalf 2015) with the truth's θ_E and (e1, e2) and a slope
  γ ~ N(2.078, 0.16) clipped to [1.7, 2.4] — the SLACS total-density slopes (Auger et al. 2010,
  ApJ 724, 511: ⟨γ'⟩ = 2.078, intrinsic scatter 0.16; Koopmans et al. 2009, ApJ 703, L51) — plus
  circular MULTIPOLE m = 3 and m = 4 (Xu et al. 2013 convention, lenstronomy) of strength
  a_m = ε_m θ_E, ε_3 ~ N(0, 0.005), ε_4 ~ N(0, 0.01), φ_4 along the mass's major axis (ε_4 > 0 disky,
  < 0 boxy), φ_3 uniform: the percent-level isophote multipoles of massive ellipticals (Hao et al.
  2006, MNRAS 370, 1339) as lens-mass multipoles (Van de Vyvere et al. 2022, A&A 659, A127) —
  plus the truth's external SHEAR.
- Sources, a stated mix (SOURCE_MODEL_MIX): ``cosmos`` — a real HST F814W COSMOS galaxy (the
  shipped GalSim real-galaxy set, ``darkhaloscope.lensing.cosmos_sources``) as lenstronomy INTERPOL,
  drawn uniformly, rotated uniformly, mirrored with probability 1/2 and rescaled so that its
  half-light radius is the truth's drawn source size (which is the size at z_s: the hidden lenses'
  come from a size–luminosity relation); ``sersic_clumps`` — the truth's Sérsic plus 2–6 Gaussian
  clumps holding 5–25 % of the flux, σ 0.05–0.12″, area-uniform within 1.5 R_sersic (the injection
  priors' clump model, ``lensing.priors``); ``sersic`` — the truth's plain Sérsic. Every band has
  the same morphology scaled to the truth's r magnitude and g − r, r − z colours.
- PSF: a real DECam PSFEx model per band (``darkhaloscope.imaging.psfex``; the shipped CCDs),
  evaluated at a drawn CCD position and stretched about its centre so its FWHM is the lens row's
  PSFSIZE (so the lens galaxy and its arcs share the seeing), as lenstronomy PSF 'PIXEL'. The PSFEx
  image contains the pixel response, which the pixel-averaged supersampling applies once more (a
  ≲0.5 % of peak effect at DR10 seeing; mejiro issue #19).
- Noise: the arc's Poisson noise with an effective gain per band, EXPOSURE_S · 10^{0.4 (ZP0 − 22.5)}
  e⁻/nmgy (ZP0: DECam's nominal zero points for 1 e⁻/s, legacyzpts; three 90 s exposures, the
  DECaLS design, Dey et al. 2019, AJ 157, 168). The sky's own noise is added by the mock sky.

Every draw of a lens comes from ``rng_for("mock-truth-render", seed, <lens key>)``; the rendering
is a pure function of the truth row (TRUTH_RENDER_FIELDS record every draw, ``source_seed`` seeds the
clumps, the CCD position and the Poisson noise), so the same truth gives the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pyarrow as pa

from darkhaloscope.constants import BANDS, PIXEL_SCALE_ARCSEC, STAMP_SIZE
from darkhaloscope.errors import InputError
from darkhaloscope.imaging.psfex import packaged_psfex
from darkhaloscope.lensing.bank import host_psf_fwhm
from darkhaloscope.lensing.cosmos_sources import packaged_real_galaxies
from darkhaloscope.lensing.source import band_fluxes
from darkhaloscope.seeding import rng_for

#: Source models and their probabilities (cosmos, sersic_clumps, sersic).
SOURCE_MODEL_MIX = {"cosmos": 0.5, "sersic_clumps": 0.25, "sersic": 0.25}
#: EPL slope: mean, scatter, clip (Auger et al. 2010).
GAMMA_MEAN, GAMMA_SIGMA, GAMMA_CLIP = 2.078, 0.16, (1.7, 2.4)
#: Multipole strengths a_m / θ_E: Gaussian σ for m = 3 and m = 4.
MULTIPOLE_SIGMA = {3: 0.005, 4: 0.01}
#: Clumps of ``sersic_clumps`` sources: count range, total flux fraction, Gaussian σ [arcsec].
N_CLUMPS, CLUMP_FLUX_FRAC, CLUMP_SIGMA_ARCSEC, CLUMP_RADIUS_RSERSIC = (2, 6), (0.05, 0.25), (0.05, 0.12), 1.5
#: DECam CCD size [pixels] (x, y), over which the PSFEx position is drawn.
CCD_SHAPE = (2046, 4094)
#: Nominal DECam zero points [AB mag for 1 e⁻/s] and the effective exposure [s] of the arc's Poisson noise.
ZP0 = {"g": 26.610, "r": 26.818, "z": 26.484}
EXPOSURE_S = 270.0
#: Supersampling of the surface brightness per pixel side (the least, and the most a compact source
#: raises it to), sub-pixels per the source's narrowest feature (``supersampling_factor``), and the
#: PSF kernel side [pixels].
SUPERSAMPLING, MAX_SUPERSAMPLING, SUBPIXELS_PER_FEATURE, PSF_KERNEL_PIX = 3, 32, 2.0, 31
#: Half-side of the rendered region beyond the images [arcsec]: the PSF's extent.
RENDER_MARGIN_ARCSEC = 2.5
#: HST pixels below this many σ of the image's noise (after a 1-pixel Gaussian smoothing) are set to 0,
#: so that the COSMOS sky noise is not lensed into the arcs.
COSMOS_MASK_NSIGMA = 1.0


def truth_engine() -> str:
    """The ``truth_engine`` value: the renderer and its version."""
    import lenstronomy

    return f"lenstronomy {lenstronomy.__version__} EPL+MULTIPOLE(3,4)+SHEAR, PSFEx PIXEL PSF, arc Poisson"


def _f(name: str, unit: str, description: str, kind=pa.float64()) -> pa.Field:
    return pa.field(name, kind, metadata={"unit": unit, "description": description})


#: The truth renderer's columns of every lens truth table (after the lensing truth).
TRUTH_RENDER_FIELDS = [
    _f(
        "source_model", "", "source model: cosmos, sersic_clumps or sersic (truth_render.SOURCE_MODEL_MIX)", pa.string()
    ),
    _f("truth_engine", "", "what drew the arc (truth_render.truth_engine)", pa.string()),
    _f("lens_gamma", "", "EPL logarithmic slope of the total density (2 = isothermal)"),
    _f("lens_a3", "arcsec", "m = 3 multipole strength a_3 (lenstronomy MULTIPOLE)"),
    _f("lens_phi3_rad", "rad", "m = 3 multipole angle, engine frame"),
    _f("lens_a4", "arcsec", "m = 4 multipole strength a_4 (> 0 disky, < 0 boxy)"),
    _f("lens_phi4_rad", "rad", "m = 4 multipole angle, engine frame (the mass's major axis)"),
    _f("source_ident", "", "COSMOS IDENT of a cosmos source (0 otherwise)", pa.int64()),
    _f("source_rot_rad", "rad", "rotation of a cosmos source image"),
    _f("source_flip", "", "whether a cosmos source image is mirrored", pa.bool_()),
    _f("source_seed", "", "seed of the clumps, the PSFEx CCD position and the arc's Poisson noise", pa.int64()),
]
#: The engine-named lensing truth a render reads.
RENDER_INPUT_COLUMNS = (
    "theta_e_arcsec",
    "lens_e1",
    "lens_e2",
    "shear_g1",
    "shear_g2",
    "src_mag_r",
    "src_r_sersic_arcsec",
    "src_n_sersic",
    "src_e1",
    "src_e2",
    "src_x_arcsec",
    "src_y_arcsec",
    "src_g_minus_r",
    "src_r_minus_z",
)


@dataclass(frozen=True)
class TruthArcs:
    """Arcs (N, 3, S, S) float32 [nmgy/pixel]: ``stamps`` as painted (with the arc's Poisson noise)
    and ``noise_free``."""

    stamps: np.ndarray
    noise_free: np.ndarray


@lru_cache(maxsize=1)
def _galaxies() -> tuple:
    """The shipped COSMOS galaxies as (ident, surface brightness image normalised to unit flux per
    unit-scale pixel, hlr [arcsec], pixel scale [arcsec])."""
    from scipy.ndimage import gaussian_filter

    out = []
    for g in packaged_real_galaxies():
        keep = gaussian_filter(g.image, 1.0) > COSMOS_MASK_NSIGMA * np.sqrt(g.noise_variance)
        img = np.where(keep, np.clip(g.image, 0.0, None), 0.0)
        out.append((g.ident, img / img.sum(), g.hlr_arcsec, g.pixel_scale))
    return tuple(out)


def draw_truth_render(keys, seed: int, lens_e1: np.ndarray, lens_e2: np.ndarray) -> dict[str, np.ndarray]:
    """The truth renderer's draws (TRUTH_RENDER_FIELDS but ``truth_engine``, and the multipole
    strengths as ε_m = a_m / θ_E under ``eps3``/``eps4``) of lenses ``keys`` (names or object ids), each
    from ``rng_for("mock-truth-render", seed, key)``; the m = 4 angle follows the mass (lens_e1, lens_e2)."""
    models, cum = list(SOURCE_MODEL_MIX), np.cumsum(list(SOURCE_MODEL_MIX.values()))
    idents = [g[0] for g in _galaxies()]
    rows = []
    for i, key in enumerate(keys):
        rng = rng_for("mock-truth-render", seed, key)
        u = rng.uniform(size=6)
        z = rng.standard_normal(3)
        model = models[min(int(np.searchsorted(cum, u[0] * cum[-1], side="right")), len(models) - 1)]
        rows.append(
            {
                "source_model": model,
                "lens_gamma": float(np.clip(GAMMA_MEAN + GAMMA_SIGMA * z[0], *GAMMA_CLIP)),
                "eps3": MULTIPOLE_SIGMA[3] * z[1],
                "lens_phi3_rad": 2.0 * np.pi / 3.0 * u[1],
                "eps4": MULTIPOLE_SIGMA[4] * z[2],
                "lens_phi4_rad": float(np.mod(0.5 * np.arctan2(lens_e2[i], lens_e1[i]), np.pi)),
                "source_ident": idents[int(u[2] * len(idents))] if model == "cosmos" else 0,
                "source_rot_rad": 2.0 * np.pi * u[3] if model == "cosmos" else 0.0,
                "source_flip": bool(u[4] < 0.5) if model == "cosmos" else False,
                "source_seed": int(rng.integers(0, 2**62)),
            }
        )
    names = ["source_model", "lens_gamma", "eps3", "lens_phi3_rad", "eps4", "lens_phi4_rad"]
    names += ["source_ident", "source_rot_rad", "source_flip", "source_seed"]
    return {k: np.array([r[k] for r in rows]) if rows else np.zeros(0) for k in names}


def truth_render_columns(draw: dict, theta_e: np.ndarray) -> dict[str, pa.Array]:
    """TRUTH_RENDER_FIELDS columns from ``draw_truth_render`` and the lenses' θ_E [arcsec]."""
    n = len(theta_e)
    cols = {
        "source_model": pa.array(draw["source_model"].tolist(), pa.string()),
        "truth_engine": pa.array([truth_engine()] * n, pa.string()),
        "lens_gamma": draw["lens_gamma"],
        "lens_a3": draw["eps3"] * theta_e,
        "lens_phi3_rad": draw["lens_phi3_rad"],
        "lens_a4": draw["eps4"] * theta_e,
        "lens_phi4_rad": draw["lens_phi4_rad"],
        "source_ident": draw["source_ident"],
        "source_rot_rad": draw["source_rot_rad"],
        "source_flip": draw["source_flip"],
        "source_seed": draw["source_seed"],
    }
    return {f.name: pa.array(np.asarray(cols[f.name]).tolist(), f.type) for f in TRUTH_RENDER_FIELDS}


def band_psf_kernels(source_seed: int, fwhm: np.ndarray) -> np.ndarray:
    """(3, K, K) PSFEx kernels (sum 1) of one lens: each band's model at the CCD position drawn from
    ``source_seed``, stretched to FWHM ``fwhm`` (3,) [arcsec], its slightly negative pixels (PSFEx's
    fitting noise in the wings, and the spline's ringing) set to 0."""
    xy = rng_for("truth-psfex-position", int(source_seed)).uniform(size=2) * np.array(CCD_SHAPE) + 0.5
    out = []
    for b, band in enumerate(BANDS):
        model = packaged_psfex(band)
        stretch = fwhm[b] / (model.fwhm_pix * PIXEL_SCALE_ARCSEC)
        psf = np.clip(model.image_psf(xy[0], xy[1], PSF_KERNEL_PIX, stretch=stretch), 0.0, None)
        out.append(psf / psf.sum())
    return np.stack(out)


def render_size(row: dict, stamp_size: int = STAMP_SIZE) -> int:
    """Odd side [pixels] of the region rendered for one lens: the images (out to θ_E + |β| plus three
    source radii) and the PSF's margin, at most the stamp."""
    reach = row["theta_e_arcsec"] + np.hypot(row["src_x_arcsec"], row["src_y_arcsec"])
    reach += 3.0 * row["src_r_sersic_arcsec"] + RENDER_MARGIN_ARCSEC
    return int(min(stamp_size, 2 * int(np.ceil(reach / PIXEL_SCALE_ARCSEC)) + 1))


def lenstronomy_system(row: dict) -> tuple[list[str], list[dict], list[str], list[dict]]:
    """One lens as lenstronomy (lens model names, lens kwargs, source light names, source kwargs)
    with unit total source flux; ``row``: RENDER_INPUT_COLUMNS and TRUTH_RENDER_FIELDS values."""
    lens_names = ["EPL", "MULTIPOLE", "MULTIPOLE", "SHEAR"]
    kw_lens = [
        {"theta_E": row["theta_e_arcsec"], "gamma": row["lens_gamma"], "e1": row["lens_e1"], "e2": row["lens_e2"]},
        {"m": 3, "a_m": row["lens_a3"], "phi_m": row["lens_phi3_rad"]},
        {"m": 4, "a_m": row["lens_a4"], "phi_m": row["lens_phi4_rad"]},
        {"gamma1": row["shear_g1"], "gamma2": row["shear_g2"], "ra_0": 0.0, "dec_0": 0.0},
    ]
    for k in kw_lens[:3]:
        k.update(center_x=0.0, center_y=0.0)
    cx, cy, r_src = row["src_x_arcsec"], row["src_y_arcsec"], row["src_r_sersic_arcsec"]
    model = row["source_model"]
    if model == "cosmos":
        match = [g for g in _galaxies() if g[0] == row["source_ident"]]
        if not match:
            raise InputError(f"truth source_ident {row['source_ident']} is not a shipped COSMOS galaxy")
        _, img, hlr, scale = match[0]
        img = img[:, ::-1] if row["source_flip"] else img
        s = scale * r_src / hlr
        src = {"image": img / s**2, "amp": 1.0, "center_x": cx, "center_y": cy, "phi_G": row["source_rot_rad"]}
        return lens_names, kw_lens, ["INTERPOL"], [{**src, "scale": s}]
    if model not in SOURCE_MODEL_MIX:
        raise InputError(f"truth source_model {model!r} is not one of {list(SOURCE_MODEL_MIX)}")
    sersic = {"R_sersic": r_src, "n_sersic": row["src_n_sersic"], "e1": row["src_e1"], "e2": row["src_e2"]}
    names, kws = ["SERSIC_ELLIPSE"], [{"amp": 1.0, **sersic, "center_x": cx, "center_y": cy}]
    frac = 0.0
    if model == "sersic_clumps":
        rng = rng_for("truth-clumps", int(row["source_seed"]))
        k = int(rng.integers(N_CLUMPS[0], N_CLUMPS[1] + 1))
        frac = CLUMP_FLUX_FRAC[0] + (CLUMP_FLUX_FRAC[1] - CLUMP_FLUX_FRAC[0]) * rng.random()
        rad, ang = CLUMP_RADIUS_RSERSIC * r_src * np.sqrt(rng.random(k)), 2.0 * np.pi * rng.random(k)
        sig = CLUMP_SIGMA_ARCSEC[0] + (CLUMP_SIGMA_ARCSEC[1] - CLUMP_SIGMA_ARCSEC[0]) * rng.random(k)
        w = 0.5 + rng.random(k)
        for j in range(k):
            # lenstronomy's GAUSSIAN amp is the profile's total flux
            names.append("GAUSSIAN")
            kws.append(
                {"amp": frac * w[j] / w.sum(), "sigma": sig[j], "center_x": cx + rad[j] * np.cos(ang[j])}
                | {"center_y": cy + rad[j] * np.sin(ang[j])}
            )
    from lenstronomy.LightModel.light_model import LightModel

    kws[0]["amp"] = (1.0 - frac) / LightModel(["SERSIC_ELLIPSE"]).total_flux(kws[:1], norm=True)[0]
    return lens_names, kw_lens, names, kws


def supersampling_factor(src_names: list[str], kw_src: list[dict], r_half_arcsec: float) -> int:
    """Sub-pixels per pixel side for one source: SUBPIXELS_PER_FEATURE across its narrowest
    feature, between SUPERSAMPLING and MAX_SUPERSAMPLING. A Sérsic's cusp holds light between
    sub-pixel centres, so its width is its minor-axis half-light radius R_sersic √q; the smooth
    profiles are sampled well at about two sub-pixels per full width at half maximum: a Gaussian
    clump's 2 √(2 ln 2) σ, and an INTERPOL image's half-light radius ``r_half_arcsec`` (a COSMOS
    template is smooth on its own pixels, which the HST PSF spans several of). A source narrower
    than a sub-pixel falls between the sub-pixel centres, and its images' flux is mis-sampled."""
    from lenstronomy.Util.param_util import ellipticity2phi_q

    widths = []
    for name, kw in zip(src_names, kw_src):
        if name == "SERSIC_ELLIPSE":
            widths.append(kw["R_sersic"] * np.sqrt(ellipticity2phi_q(kw["e1"], kw["e2"])[1]))
        elif name == "GAUSSIAN":
            widths.append(2.0 * np.sqrt(2.0 * np.log(2.0)) * kw["sigma"])
        else:
            widths.append(r_half_arcsec)
    need = int(np.ceil(SUBPIXELS_PER_FEATURE * PIXEL_SCALE_ARCSEC / min(widths)))
    return int(np.clip(need, SUPERSAMPLING, MAX_SUPERSAMPLING))


def render_unconvolved(row: dict, n_pix: int, supersampling: int | None = None) -> np.ndarray:
    """The lensed source of unit flux, pixel-averaged over ``supersampling``² sub-pixels (default
    its ``supersampling_factor``), not PSF-convolved: (n_pix, n_pix) [flux/pixel], the lens at the
    centre pixel."""
    import lenstronomy.Util.util as lutil
    from lenstronomy.Data.pixel_grid import PixelGrid
    from lenstronomy.Data.psf import PSF
    from lenstronomy.ImSim.image_model import ImageModel
    from lenstronomy.LensModel.lens_model import LensModel
    from lenstronomy.LightModel.light_model import LightModel

    lens_names, kw_lens, src_names, kw_src = lenstronomy_system(row)
    if supersampling is None:
        supersampling = supersampling_factor(src_names, kw_src, row["src_r_sersic_arcsec"])
    transform = np.array([[-PIXEL_SCALE_ARCSEC, 0.0], [0.0, PIXEL_SCALE_ARCSEC]])
    grid = PixelGrid(nx=n_pix, ny=n_pix, **lutil.centered_coordinate_system(n_pix, transform))
    model = ImageModel(
        grid,
        PSF(psf_type="NONE"),
        lens_model_class=LensModel(lens_names),
        source_model_class=LightModel(src_names),
        kwargs_numerics={"supersampling_factor": supersampling},
    )
    # an odd supersampling puts a sub-pixel centre on the lens centre, where lenstronomy's EPL
    # deflection divides 0 by 0 inside a term it then discards: the image is checked finite instead
    with np.errstate(divide="ignore", invalid="ignore"):
        image = np.asarray(model.image(kwargs_lens=kw_lens, kwargs_source=kw_src, unconvolved=True), dtype=np.float64)
    if not np.isfinite(image).all():
        raise InputError(f"truth lens {row.get('object_id')}: non-finite pixels in its lenstronomy render")
    return image


def poisson_gain() -> np.ndarray:
    """Effective gain [e⁻/nmgy] per band (g, r, z) of the arc's Poisson noise."""
    return np.array([EXPOSURE_S * 10 ** (0.4 * (ZP0[b] - 22.5)) for b in BANDS])


def render_truth_arcs(
    truth: pa.Table, psfsize: np.ndarray, stamp_size: int = STAMP_SIZE, poisson: bool = True
) -> TruthArcs:
    """Arcs of truth rows (RENDER_INPUT_COLUMNS, TRUTH_RENDER_FIELDS) -> TruthArcs (N, 3, S, S)
    [nmgy/pixel], the lens at pixel ((S−1)/2, (S−1)/2), with per-band FWHM ``psfsize`` (N, 3) [arcsec]
    (the lens rows' PSFSIZE; missing g/z from r). ``poisson``: add the arc's Poisson noise to ``stamps``."""
    from scipy.signal import fftconvolve

    missing = [
        c for c in (*RENDER_INPUT_COLUMNS, *(f.name for f in TRUTH_RENDER_FIELDS)) if c not in truth.column_names
    ]
    if missing:
        raise InputError(f"lens truth lacks the truth renderer's columns {missing}")
    n = truth.num_rows
    fwhm, ok = host_psf_fwhm(psfsize)
    if fwhm.shape[0] != n or not ok.all():
        raise InputError(f"psfsize must be (N={n}, 3) with a valid r band (rows {np.flatnonzero(~ok)[:8].tolist()})")
    rows = truth.select([*RENDER_INPUT_COLUMNS, *(f.name for f in TRUTH_RENDER_FIELDS)]).to_pylist()
    flux = band_fluxes(
        [r["src_mag_r"] for r in rows], [r["src_g_minus_r"] for r in rows], [r["src_r_minus_z"] for r in rows]
    )
    clean = np.zeros((n, 3, stamp_size, stamp_size), np.float32)
    noisy = np.zeros_like(clean)
    gain = poisson_gain()
    for i, row in enumerate(rows):
        m = render_size(row, stamp_size)
        lensed = render_unconvolved(row, m)
        kernels = band_psf_kernels(row["source_seed"], fwhm[i])
        rng = rng_for("truth-arc-poisson", int(row["source_seed"]))
        lo = (stamp_size - m) // 2
        for b in range(3):
            arc = flux[i, b] * fftconvolve(lensed, kernels[b], mode="same")
            clean[i, b, lo : lo + m, lo : lo + m] = arc
            shot = rng.poisson(np.clip(arc, 0.0, None) * gain[b]) / gain[b] if poisson else arc
            noisy[i, b, lo : lo + m, lo : lo + m] = shot
    return TruthArcs(stamps=noisy, noise_free=clean)
