"""The mock's truth renderer against a direct lenstronomy ImageModel render, its determinism, its
source mix and its refusals."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from darkhaloscope.constants import PIXEL_SCALE_ARCSEC
from darkhaloscope.errors import InputError
from darkhaloscope.lensing.source import band_fluxes
from mock_survey.truth_render import (
    MAX_SUPERSAMPLING,
    SOURCE_MODEL_MIX,
    SUPERSAMPLING,
    TRUTH_RENDER_FIELDS,
    band_psf_kernels,
    draw_truth_render,
    lenstronomy_system,
    render_size,
    render_truth_arcs,
    render_unconvolved,
    supersampling_factor,
    truth_render_columns,
)

N = 6
PSFSIZE = np.array([1.45, 1.3, 1.2])


def _truth(models=None, seed=11) -> pa.Table:
    rng = np.random.default_rng(seed)
    theta = rng.uniform(0.8, 2.0, N)
    e1, e2 = rng.uniform(-0.15, 0.15, N), rng.uniform(-0.15, 0.15, N)
    draw = draw_truth_render(list(range(N)), seed, e1, e2)
    if models is not None:
        draw["source_model"] = np.array(models)
        draw["source_ident"] = np.where(draw["source_model"] == "cosmos", 141190, 0)
    cols = {
        "theta_e_arcsec": theta,
        "lens_e1": e1,
        "lens_e2": e2,
        "shear_g1": rng.normal(0, 0.03, N),
        "shear_g2": rng.normal(0, 0.03, N),
        "src_mag_r": rng.uniform(21.5, 23.0, N),
        "src_r_sersic_arcsec": rng.uniform(0.15, 0.35, N),
        "src_n_sersic": rng.uniform(0.7, 1.8, N),
        "src_e1": rng.uniform(-0.2, 0.2, N),
        "src_e2": rng.uniform(-0.2, 0.2, N),
        "src_x_arcsec": rng.uniform(-0.3, 0.3, N),
        "src_y_arcsec": rng.uniform(-0.3, 0.3, N),
        "src_g_minus_r": rng.uniform(0.0, 0.4, N),
        "src_r_minus_z": rng.uniform(0.0, 0.4, N),
    }
    return pa.table({**cols, **truth_render_columns(draw, theta)})


def _direct(row: dict, band: int, kernel: np.ndarray, flux: float, n: int) -> np.ndarray:
    """The same system written out directly as one lenstronomy ImageModel with a PIXEL PSF."""
    import lenstronomy.Util.util as lutil
    from lenstronomy.Data.pixel_grid import PixelGrid
    from lenstronomy.Data.psf import PSF
    from lenstronomy.ImSim.image_model import ImageModel
    from lenstronomy.LensModel.lens_model import LensModel
    from lenstronomy.LightModel.light_model import LightModel

    transform = np.array([[-PIXEL_SCALE_ARCSEC, 0.0], [0.0, PIXEL_SCALE_ARCSEC]])
    grid = PixelGrid(nx=n, ny=n, **lutil.centered_coordinate_system(n, transform))
    kw_lens = [
        {"theta_E": row["theta_e_arcsec"], "gamma": row["lens_gamma"], "e1": row["lens_e1"], "e2": row["lens_e2"]}
        | {"center_x": 0.0, "center_y": 0.0},
        {"m": 3, "a_m": row["lens_a3"], "phi_m": row["lens_phi3_rad"], "center_x": 0.0, "center_y": 0.0},
        {"m": 4, "a_m": row["lens_a4"], "phi_m": row["lens_phi4_rad"], "center_x": 0.0, "center_y": 0.0},
        {"gamma1": row["shear_g1"], "gamma2": row["shear_g2"], "ra_0": 0.0, "dec_0": 0.0},
    ]
    light = LightModel(["SERSIC_ELLIPSE"])
    kw_src = [
        {"amp": 1.0, "R_sersic": row["src_r_sersic_arcsec"], "n_sersic": row["src_n_sersic"]}
        | {"e1": row["src_e1"], "e2": row["src_e2"], "center_x": row["src_x_arcsec"], "center_y": row["src_y_arcsec"]}
    ]
    kw_src[0]["amp"] = flux / light.total_flux(kw_src, norm=True)[0]
    model = ImageModel(
        grid,
        PSF(psf_type="PIXEL", kernel_point_source=kernel),
        lens_model_class=LensModel(["EPL", "MULTIPOLE", "MULTIPOLE", "SHEAR"]),
        source_model_class=light,
        kwargs_numerics={
            "supersampling_factor": supersampling_factor(["SERSIC_ELLIPSE"], kw_src, row["src_r_sersic_arcsec"]),
            "supersampling_convolution": False,
        },
    )
    return np.asarray(model.image(kwargs_lens=kw_lens, kwargs_source=kw_src))


def test_render_matches_a_direct_lenstronomy_render_to_1e4_of_peak():
    truth = _truth(models=["sersic"] * N)
    psf = np.tile(PSFSIZE, (N, 1))
    arcs = render_truth_arcs(truth, psf, stamp_size=101, poisson=False)
    assert np.array_equal(arcs.stamps, arcs.noise_free)
    flux = band_fluxes(
        truth["src_mag_r"].to_numpy(), truth["src_g_minus_r"].to_numpy(), truth["src_r_minus_z"].to_numpy()
    )
    for i, row in enumerate(truth.to_pylist()[:3]):
        n = render_size(row)
        kernels = band_psf_kernels(row["source_seed"], PSFSIZE)
        lo = (101 - n) // 2
        for b in range(3):
            ref = _direct(row, b, kernels[b], flux[i, b], n)
            got = arcs.noise_free[i, b, lo : lo + n, lo : lo + n].astype(np.float64)
            assert np.abs(got - ref).max() <= 1e-4 * ref.max()
        outside = arcs.noise_free[i].copy()
        outside[:, lo : lo + n, lo : lo + n] = 0
        assert not outside.any()


def test_psfex_kernels_have_the_row_psfsize():
    from scipy.ndimage import zoom

    kernels = band_psf_kernels(123, PSFSIZE)
    assert kernels.shape[0] == 3 and np.allclose(kernels.sum(axis=(1, 2)), 1.0)
    for b in range(3):
        fine = zoom(kernels[b], 8, order=3)
        fwhm = 2 * np.sqrt((fine > 0.5 * fine.max()).sum() / 64 / np.pi) * PIXEL_SCALE_ARCSEC
        assert abs(fwhm - PSFSIZE[b]) < 0.05 * PSFSIZE[b]


def test_same_seed_same_bytes_every_source_model():
    truth = _truth(models=["cosmos", "cosmos", "sersic_clumps", "sersic_clumps", "sersic", "cosmos"])
    psf = np.tile(PSFSIZE, (N, 1))
    a, b = render_truth_arcs(truth, psf), render_truth_arcs(truth, psf)
    assert a.stamps.tobytes() == b.stamps.tobytes() and a.noise_free.tobytes() == b.noise_free.tobytes()
    assert not np.array_equal(a.stamps, a.noise_free)  # the arc's Poisson noise
    flux = band_fluxes(
        truth["src_mag_r"].to_numpy(), truth["src_g_minus_r"].to_numpy(), truth["src_r_minus_z"].to_numpy()
    )
    mu = a.noise_free.sum(axis=(2, 3)) / flux
    # one magnification across bands (same morphology), a lensed source is magnified
    assert np.allclose(mu, mu[:, 1:2], rtol=0.02) and (mu > 1.5).all()
    # clumps and COSMOS morphologies differ from the plain Sérsic of the same row
    plain = render_truth_arcs(_truth(models=["sersic"] * N), psf, poisson=False).noise_free
    assert all(not np.allclose(a.noise_free[i], plain[i], rtol=1e-3) for i in (0, 1, 2, 3, 5))
    assert np.array_equal(a.noise_free[4], plain[4])
    flipped = truth.set_column(
        truth.schema.get_field_index("source_flip"),
        "source_flip",
        pa.array([not f for f in truth["source_flip"].to_pylist()]),
    )
    assert not np.allclose(render_truth_arcs(flipped, psf).noise_free[0], a.noise_free[0])


def test_draws_follow_the_stated_mix_and_are_per_key():
    d = draw_truth_render(list(range(2000)), 5, np.zeros(2000), np.zeros(2000))
    for model, p in SOURCE_MODEL_MIX.items():
        assert abs((d["source_model"] == model).mean() - p) < 0.04
    assert 2.0 < d["lens_gamma"].mean() < 2.15 and d["lens_gamma"].min() >= 1.7 and d["lens_gamma"].max() <= 2.4
    one = draw_truth_render([7], 5, np.zeros(1), np.zeros(1))
    assert one["source_seed"][0] == d["source_seed"][7] and one["source_model"][0] == d["source_model"][7]
    assert (d["source_ident"][d["source_model"] != "cosmos"] == 0).all()
    assert (d["source_ident"][d["source_model"] == "cosmos"] > 0).all()
    assert [f.name for f in TRUTH_RENDER_FIELDS][:2] == ["source_model", "truth_engine"]


def test_refusals():
    truth = _truth()
    psf = np.tile(PSFSIZE, (N, 1))
    with pytest.raises(InputError, match=r"lacks the truth renderer's columns \['source_model'\]"):
        render_truth_arcs(truth.drop(["source_model"]), psf)
    bad = truth.set_column(truth.schema.get_field_index("source_model"), "source_model", pa.array(["shapelets"] * N))
    with pytest.raises(InputError, match="source_model 'shapelets'"):
        render_truth_arcs(bad, psf)
    bad = truth.set_column(truth.schema.get_field_index("source_model"), "source_model", pa.array(["cosmos"] * N))
    bad = bad.set_column(bad.schema.get_field_index("source_ident"), "source_ident", pa.array([1] * N, pa.int64()))
    with pytest.raises(InputError, match="source_ident 1 is not a shipped COSMOS galaxy"):
        render_truth_arcs(bad, psf)
    with pytest.raises(InputError, match="psfsize"):
        render_truth_arcs(truth, np.zeros((N, 3)))


def test_every_source_model_renders_its_lenstronomy_kwargs():
    """Clumpy and COSMOS sources: the render is the ImageModel of ``lenstronomy_system``'s kwargs
    with the band's PIXEL PSF, the source normalised to unit flux."""
    import lenstronomy.Util.util as lutil
    from lenstronomy.Data.pixel_grid import PixelGrid
    from lenstronomy.Data.psf import PSF
    from lenstronomy.ImSim.image_model import ImageModel
    from lenstronomy.LensModel.lens_model import LensModel
    from lenstronomy.LightModel.light_model import LightModel

    truth = _truth(models=["cosmos", "sersic_clumps", "cosmos", "sersic_clumps", "sersic", "sersic"])
    arcs = render_truth_arcs(truth, np.tile(PSFSIZE, (N, 1)), poisson=False)
    flux = band_fluxes(
        truth["src_mag_r"].to_numpy(), truth["src_g_minus_r"].to_numpy(), truth["src_r_minus_z"].to_numpy()
    )
    transform = np.array([[-PIXEL_SCALE_ARCSEC, 0.0], [0.0, PIXEL_SCALE_ARCSEC]])
    for i, row in enumerate(truth.to_pylist()[:4]):
        lens_names, kw_lens, src_names, kw_src = lenstronomy_system(row)
        assert abs(sum(LightModel(src_names).total_flux(kw_src)) - 1.0) < 1e-6
        n = render_size(row)
        lo = (101 - n) // 2
        grid = PixelGrid(nx=n, ny=n, **lutil.centered_coordinate_system(n, transform))
        kernel = band_psf_kernels(row["source_seed"], PSFSIZE)[1]
        model = ImageModel(
            grid,
            PSF(psf_type="PIXEL", kernel_point_source=kernel),
            lens_model_class=LensModel(lens_names),
            source_model_class=LightModel(src_names),
            kwargs_numerics={
                "supersampling_factor": supersampling_factor(src_names, kw_src, row["src_r_sersic_arcsec"])
            },
        )
        ref = flux[i, 1] * np.asarray(model.image(kwargs_lens=kw_lens, kwargs_source=kw_src))
        got = arcs.noise_free[i, 1, lo : lo + n, lo : lo + n].astype(np.float64)
        assert np.abs(got - ref).max() <= 1e-4 * ref.max()


def test_supersampling_follows_the_narrowest_source_feature():
    sersic = {"R_sersic": 0.3, "e1": 0.0, "e2": 0.0}
    assert supersampling_factor(["SERSIC_ELLIPSE"], [sersic], 0.3) == SUPERSAMPLING
    # a 0.03" clump's FWHM is 0.071": 2 sub-pixels across it need ceil(2 x 0.262 / 0.071) = 8
    clumps = supersampling_factor(["SERSIC_ELLIPSE", "GAUSSIAN"], [sersic, {"sigma": 0.03}], 0.3)
    assert clumps == int(np.ceil(2 * PIXEL_SCALE_ARCSEC / (2 * np.sqrt(2 * np.log(2)) * 0.03)))
    assert supersampling_factor(["INTERPOL"], [{"scale": 0.002}], 0.05) == int(np.ceil(2 * PIXEL_SCALE_ARCSEC / 0.05))
    assert (
        supersampling_factor(["SERSIC_ELLIPSE"], [{"R_sersic": 0.005, "e1": 0.0, "e2": 0.0}], 0.005)
        == MAX_SUPERSAMPLING
    )


def test_a_compact_source_keeps_the_point_source_magnification():
    """A 0.033" (q 0.22) source at 0.8 θ_E, far narrower than a 3 x 3 sub-pixel (0.087"): its
    rendered flux fraction is lenstronomy's lens-equation-solver magnification Σ|μ_i|."""
    from lenstronomy.LensModel.lens_model import LensModel
    from lenstronomy.LensModel.Solver.lens_equation_solver import LensEquationSolver
    from lenstronomy.Util.param_util import phi_q2_ellipticity

    row = _truth(models=["sersic"] * N).to_pylist()[0]
    e1, e2 = phi_q2_ellipticity(0.4, 0.22)
    beta = 0.8 * row["theta_e_arcsec"]
    row |= {"src_r_sersic_arcsec": 0.033, "src_n_sersic": 1.7, "src_e1": e1, "src_e2": e2}
    row |= {"src_x_arcsec": beta * np.cos(1.0), "src_y_arcsec": beta * np.sin(1.0)}
    lens_names, kw_lens, _, _ = lenstronomy_system(row)
    model = LensModel(lens_names)
    x, y = LensEquationSolver(model).image_position_from_source(row["src_x_arcsec"], row["src_y_arcsec"], kw_lens)
    mu_point = float(np.abs(model.magnification(x, y, kw_lens)).sum())
    mu = render_unconvolved(row, render_size(row)).sum()
    assert mu == pytest.approx(mu_point, rel=0.03)
