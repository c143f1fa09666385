"""Independent verification of an injection bank table (the logic behind its audits).

:func:`lenstronomy_agreement` re-renders a sample of the bank's arcs with lenstronomy's
``ImageModel`` from the parameters recorded in each row (:func:`lenstronomy_arguments`) and
compares pixels and flux with the arc in the stamp (injected image − paired control: a table of
stamps, ``bank.bank_table``). :func:`physics_problems` checks a bank's rows, stamps or none:
every prior-drawn parameter's range, the magnification, that the rendered pixels are finite, and
the arc flux measured on them (``arc_flux_r``) against the source flux × μ recorded for it.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..constants import mag_to_flux
from ..stamps import from_tensor_column
from .priors import DEFAULT_PRIORS, PriorRegistry
from .profiles import DEFAULT_PROFILES, lens_parameters_from_columns
from .render import RenderConfig

#: Stamp-flux bookkeeping tolerance: at most FLUX_TAIL_FRACTION of systems beyond FLUX_TOL, none
#: beyond FLUX_TOL_MAX. μ is the lensed flux itself (render module docstring), so what scatters single
#: systems is Poisson noise on faint arcs and PSF light past the stamp edge; the bulk and the tail are
#: bounded separately.
FLUX_TOL, FLUX_TAIL_FRACTION, FLUX_TOL_MAX = 0.02, 0.05, 0.10
#: Agreement with lenstronomy required of the re-rendered sample: max pixel error over the peak, total flux.
MAX_PIXEL_ERR_OVER_PEAK, MAX_FLUX_REL_ERR = 0.01, 0.005


def lenstronomy_arguments(row: dict, profiles: tuple[str, ...] = DEFAULT_PROFILES) -> tuple[dict, dict, float, float]:
    """(lens kwargs, source kwargs, r-band PSF FWHM [arcsec], r-band source flux [nmgy]) of one
    bank row, in the form :func:`render.lenstronomy_reference` takes (source centre absolute); the
    lens parameters of the composition ``profiles`` are read from the columns its profiles declare."""
    lens = lens_parameters_from_columns(row, profiles, where=f"bank row {row.get('injection_id')}")
    src = dict(
        r_sersic=row["src_r_sersic_arcsec"],
        n_sersic=row["src_n_sersic"],
        e1=row["src_e1"],
        e2=row["src_e2"],
        center_x=row["lens_center_x_arcsec"] + row["src_x_arcsec"],
        center_y=row["lens_center_y_arcsec"] + row["src_y_arcsec"],
    )
    return lens, src, float(row["psf_fwhm_r"]), float(mag_to_flux(row["src_mag_r"]))


def source_reference(row: dict, src: dict, source_model: str, priors: PriorRegistry) -> tuple[dict, dict | None]:
    """(``src`` with the row's clumps, its INTERPOL image or None) of one bank row drawn under
    ``source_model``, re-drawn from its seed as the bank drew them (``bank._source_model_arrays``),
    in the form :func:`render.lenstronomy_reference` takes."""
    from .priors import draw_clumps
    from .source_models import assign_source_models, cosmos_draws, packaged_templates

    seed = np.array([int(row["seed"])], dtype=np.int64)
    model = assign_source_models(seed, source_model)[0]
    if model == "cosmos":
        t = packaged_templates()
        idx, flip, scale = cosmos_draws(seed, np.array([row["src_r_sersic_arcsec"]]), t)
        tmpl = t.images[int(idx[0])]
        image = dict(
            template=tmpl[:, ::-1] if flip[0] else tmpl,
            scale=float(scale[0]),
            r_sersic=float(row["src_r_sersic_arcsec"]),
            phi=float(row["src_phi_rad"]),
            center_x=src["center_x"],
            center_y=src["center_y"],
        )
        return src, image
    registry = replace(priors, clump_prob=1.0) if model == "sersic_clumps" else priors
    frac, x, y, sig, w = draw_clumps(int(seed[0]), float(row["src_r_sersic_arcsec"]), registry)
    if frac > 0:
        share = frac * np.asarray(w) / np.sum(w)
        src = dict(src)
        src["clumps"] = [
            dict(flux_frac=float(f), x=src["center_x"] + float(cx), y=src["center_y"] + float(cy), sigma=float(s))
            for f, cx, cy, s in zip(share, x, y, sig)
        ]
    return src, None


def lenstronomy_agreement(
    bank: pa.Table, n_sample: int = 3, cfg: RenderConfig = RenderConfig(), priors: PriorRegistry = DEFAULT_PRIORS
) -> dict:
    """Re-render ``n_sample`` successful rows (evenly spread) with lenstronomy and compare, the lens
    being the composition its plan records (``bank.plan_lens_profiles``), each source the model its
    plan's source model gave it (:func:`source_reference`; ``priors``: the clumps' priors the bank
    rendered with) and the PSF made anisotropic as its nuisance model made it.

    Returns {"max_pixel_err_over_peak", "flux_rel_err" (worst cases), "cases": per row, "ok"}.
    ``ok`` is False when no row could be compared.
    """
    import torch

    from ..psf import kernel_radius_pix, psf_kernels
    from .bank import InjectionConfig, plan_lens_profiles, plan_source_models
    from .nuisance import arc_psf_anisotropy
    from .render import lenstronomy_reference

    profiles = plan_lens_profiles(bank)
    source_model, nuisance = plan_source_models(bank, InjectionConfig())
    ok_rows = bank.filter(pc.field("success"))
    take = np.linspace(0, ok_rows.num_rows - 1, min(n_sample, ok_rows.num_rows)).astype(int) if ok_rows.num_rows else []
    sample = ok_rows.take(pa.array(take, pa.int64()))
    arcs = (
        from_tensor_column(sample.column("image")) - from_tensor_column(sample.column("control"))
        if sample.num_rows
        else []
    )
    worst_pix, worst_flux, cases = 0.0, 0.0, []
    for i, row in enumerate(sample.drop_columns(["image", "control"]).to_pylist()):
        lens, src, fwhm, flux_r = lenstronomy_arguments(row, profiles)
        src, image = source_reference(row, src, source_model, priors)
        e1, e2 = arc_psf_anisotropy(nuisance, np.array([int(row["seed"])]), "cpu", torch.float64)
        radius = kernel_radius_pix(fwhm, cfg.pixel_scale, cfg.psf_n_fwhm)
        kernel = psf_kernels(
            torch.tensor([fwhm], dtype=torch.float64),
            radius,
            profile=cfg.psf_profile,
            e1=None if e1 is None else e1[:, 1],
            e2=None if e2 is None else e2[:, 1],
            pixel_scale=cfg.pixel_scale,
        )[0].numpy()
        ref, _ = lenstronomy_reference(
            lens, src, fwhm, flux_r, cfg, psf_kernel=kernel, with_mu=False, profiles=profiles, image=image
        )
        ours = arcs[i, 1].astype(np.float64)
        pix = float(np.abs(ours - ref).max() / ref.max())
        flux = float(abs(ours.sum() - ref.sum()) / ref.sum())
        worst_pix, worst_flux = max(worst_pix, pix), max(worst_flux, flux)
        cases.append({"injection_id": row["injection_id"], "max_pixel_err_over_peak": pix, "flux_rel_err": flux})
    ok = bool(cases) and worst_pix <= MAX_PIXEL_ERR_OVER_PEAK and worst_flux <= MAX_FLUX_REL_ERR
    return {"max_pixel_err_over_peak": worst_pix, "flux_rel_err": worst_flux, "cases": cases, "ok": ok}


def prior_range_problems(
    bank: pa.Table, priors: PriorRegistry = DEFAULT_PRIORS, skip: tuple[str, ...] = ()
) -> tuple[list[str], list[str]]:
    """(problems, names checked): every prior-drawn parameter present must lie in its prior's range;
    ``skip``: columns named like a prior that the rows did not draw from it (e.g. a lens's axis
    ratio taken from its host's light)."""
    problems = []
    checked = [name for name in priors.priors if name in bank.column_names and name not in skip]
    for name in checked:
        prior = priors[name]
        v = bank.column(name).to_numpy(zero_copy_only=False)
        bad = ~((v >= prior.lo - 1e-9) & (v <= prior.hi + 1e-9))
        if np.any(bad):
            problems.append(
                f"{name}: {int(bad.sum())} value(s) outside [{prior.lo}, {prior.hi}], e.g. {v[bad][:3].tolist()}"
            )
    return problems, checked


def stamp_flux_errors(bank: pa.Table) -> np.ndarray:
    """|arc flux in the stamp − source flux × μ| / (source flux × μ), r band, successful rows: the
    arc flux is ``arc_flux_r``, the rendered arc's pixels summed over the stamp
    (``bank.RenderTally``), independent of the renderer's own bookkeeping of μ."""
    ok = bank.column("success").to_numpy(zero_copy_only=False)
    mu = bank.column("magnification").to_numpy(zero_copy_only=False)[ok]
    arc_flux = bank.column("arc_flux_r").to_numpy(zero_copy_only=False)[ok]
    src_flux = mag_to_flux(bank.column("src_mag_r").to_numpy()[ok])
    return np.abs(arc_flux - src_flux * mu) / (src_flux * mu)


def physics_problems(
    bank: pa.Table,
    priors: PriorRegistry = DEFAULT_PRIORS,
    flux_tol: float | None = None,
    tail_fraction: float | None = None,
    flux_tol_max: float | None = None,
    skip: tuple[str, ...] = (),
) -> dict:
    """Prior ranges (but ``skip``, see :func:`prior_range_problems`), μ >= 1 (successful rows), finite
    pixels, stamp flux = source flux × μ
    (tolerances default to FLUX_TOL, FLUX_TAIL_FRACTION, FLUX_TOL_MAX).

    Returns {"problems": [...], "ranges_checked", "n_rows", "median_rel_stamp_flux_err",
    "max_rel_stamp_flux_err", "ok"}."""
    flux_tol = FLUX_TOL if flux_tol is None else flux_tol
    tail_fraction = FLUX_TAIL_FRACTION if tail_fraction is None else tail_fraction
    flux_tol_max = FLUX_TOL_MAX if flux_tol_max is None else flux_tol_max
    problems, checked = prior_range_problems(bank, priors, skip)
    ok = bank.column("success").to_numpy(zero_copy_only=False)
    # a source inside the Einstein radius is multiply imaged, so its total magnification exceeds 1;
    # one beyond it (the proposal reaches 1.2 θ_E) has a single image, magnified by about 1 + θ_E/β
    # by the SIS part and by less than 1 where the external shear and the ellipticity demagnify it
    inner = ok
    if "src_beta_frac" in bank.column_names:
        inner = ok & (bank.column("src_beta_frac").to_numpy(zero_copy_only=False) < 1.0)
    mu = bank.column("magnification").to_numpy(zero_copy_only=False)[inner]
    if np.any(~(mu >= 1.0 - 1e-3)):
        problems.append(f"magnification below 1 for a source inside θ_E: {np.sort(mu)[:3].tolist()}")
    finite = bank.column("arc_pixels_finite").to_numpy(zero_copy_only=False)
    if not finite[ok].all():
        problems.append(f"non-finite pixels in {int((~finite[ok]).sum())} rendered arc(s)")
    rel = stamp_flux_errors(bank)
    if rel.size and (np.mean(rel > flux_tol) > tail_fraction or rel.max() > flux_tol_max):
        problems.append(
            f"stamp arc flux vs source flux × μ: {np.mean(rel > flux_tol):.1%} of rows beyond {flux_tol:.0%} "
            f"(allowed {tail_fraction:.0%}), worst {rel.max():.3g} (allowed {flux_tol_max})"
        )
    return {
        "problems": problems,
        "ranges_checked": checked,
        "n_rows": bank.num_rows,
        "median_rel_stamp_flux_err": float(np.median(rel)) if rel.size else 0.0,
        "max_rel_stamp_flux_err": float(rel.max()) if rel.size else 0.0,
        "ok": not problems,
    }
