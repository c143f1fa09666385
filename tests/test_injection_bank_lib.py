"""Injection-bank planning, rendering into hosts, priors and known-lens arcs (library level)."""

import numpy as np
import pyarrow as pa
import pytest

from darkhaloscope.errors import InputError
from darkhaloscope.lensing.bank import (
    InjectionConfig,
    host_psf_fwhm,
    injection_config,
    paint_known_lens_arcs,
    plan_injection_grid,
    plan_summary,
    render_injection_batch,
)
from darkhaloscope.lensing.cosmology import sigma_v_from_theta_e
from darkhaloscope.lensing.priors import DEFAULT_PRIORS, Prior, PriorRegistry, draw_clumps
from darkhaloscope.lensing.render import RenderConfig
from darkhaloscope.seeding import stable_hash64

SMALL = RenderConfig(n_pix=61)


def _ipc_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def _hosts(n=12, psf_z=1.1):
    return pa.table(
        {
            "object_id": np.arange(n, dtype=np.int64) * 7 + 100,
            "ra": np.linspace(150, 151, n),
            "dec": np.zeros(n),
            "split": (["train", "val", "test"] * n)[:n],
            "type": ["DEV"] * n,
            "psfsize_g": np.full(n, 1.4),
            "psfsize_r": np.full(n, 1.25),
            "psfsize_z": np.full(n, psf_z),
            "psfdepth_g": np.full(n, 2e3),
            "psfdepth_r": np.full(n, 1e3),
            "psfdepth_z": np.full(n, 2e2),
            "dx_pix": np.zeros(n, np.float32),
            "dy_pix": np.zeros(n, np.float32),
        }
    )


def test_every_prior_draw_lies_in_its_range():
    seeds = np.arange(20000, dtype=np.int64) * 977 + 3
    for name, prior in DEFAULT_PRIORS.priors.items():
        v = DEFAULT_PRIORS.draw(name, seeds)
        assert np.all((v >= prior.lo) & (v <= prior.hi)), name
        assert v.std() > 0.05 * (prior.hi - prior.lo) / 3.5, name  # a real spread, not a constant
    beta = DEFAULT_PRIORS.draw("src_beta_frac", seeds)
    # Area-weighted: beta^2 is uniform on [lo^2, hi^2].
    assert np.mean(beta**2) == pytest.approx((0.1**2 + 0.4**2) / 2, rel=0.02)
    gr = DEFAULT_PRIORS.draw("src_g_minus_r", seeds)
    assert np.median(gr) == pytest.approx(0.3, abs=0.02)
    for k in range(200):
        frac, x, y, sig, w = draw_clumps(k, 0.3, PriorRegistry(clump_prob=0.5))
        if frac:
            assert 0.05 <= frac <= 0.25 and 2 <= len(x) <= 6 and np.all(np.hypot(x, y) <= 0.45 + 1e-12)
            assert np.all((sig >= 0.05) & (sig <= 0.12))
    with pytest.raises(InputError):
        Prior("uniform", 2.0, 1.0)
    with pytest.raises(InputError):
        DEFAULT_PRIORS.with_overrides(nope=("uniform", 0, 1))


def test_plan_grid_counts_skips_and_seeds():
    cfg = InjectionConfig(per_cell=3, batch_size=100)
    tasks = plan_injection_grid(_hosts(), cfg)
    s = plan_summary(tasks)
    assert s["n_cells"] == 11 * 9 and s["n_candidates"] == 11 * 9 * 3
    assert s["n_tasks"] == tasks.num_rows == s["n_candidates"] - sum(s["skipped_tasks"].values())
    assert s["skipped_tasks"].get("sigma_v_above_range", 0) > 0  # theta_E = 3" at z_l = 0.9 needs > 500 km/s
    d = tasks.to_pydict()
    sv = np.array(d["sigma_v_kms"])
    assert np.all((sv >= 50) & (sv <= 500))
    np.testing.assert_allclose(sigma_v_from_theta_e(d["theta_e_arcsec"], d["z_l"], d["z_s"]), sv, rtol=1e-12)
    assert np.all(np.array(d["z_s"]) > np.array(d["z_l"]))
    for b, i, seed in zip(d["batch"][:5], d["index_in_batch"][:5], d["seed"][:5]):
        assert seed == stable_hash64(cfg.salt, "selection", b, i) & 0x7FFF_FFFF_FFFF_FFFF
    assert len(set(d["injection_id"])) == tasks.num_rows
    assert max(np.bincount(d["batch"])) <= 100
    for c in s["skipped_cells"]:
        assert not any(t == c["theta_e_arcsec"] and z == c["z_l"] for t, z in zip(d["theta_e_arcsec"], d["z_l"]))
    # Hosts are shared out evenly and deterministically, whatever the input row order.
    counts = np.unique(d["host_object_id"], return_counts=True)[1]
    assert counts.max() - counts.min() <= 1 + s["n_candidates"] - s["n_tasks"]
    shuffled = _hosts().take(pa.array(np.random.default_rng(1).permutation(12)))
    assert plan_injection_grid(shuffled, cfg).equals(tasks)


def test_another_realisation_redraws_every_injection_on_the_same_grid_and_hosts():
    hosts = _hosts(30)
    default = plan_injection_grid(hosts, injection_config("demo", per_cell=3, host_splits=("train", "val", "test")))
    assert plan_injection_grid(
        hosts, injection_config("demo", per_cell=3, host_splits=("train", "val", "test"), realisation=0)
    ).equals(default)
    again = plan_injection_grid(
        hosts, injection_config("demo", per_cell=3, host_splits=("train", "val", "test"), realisation=1)
    )
    d, a = default.to_pydict(), again.to_pydict()
    # the same grid and candidates over the same hosts (which tasks a draw skips, z_s behind the
    # lens or σ_v out of range, differs) ...
    sd, sa = plan_summary(default), plan_summary(again)
    assert (sa["n_cells"], sa["n_candidates"]) == (sd["n_cells"], sd["n_candidates"])
    assert sa["n_tasks"] == pytest.approx(sd["n_tasks"], rel=0.1)
    assert set(a["host_object_id"]) == set(d["host_object_id"])
    # ... and no source, lens or host assignment in common
    assert not set(a["seed"]) & set(d["seed"])
    for name in ("src_mag_r", "z_s", "src_x_arcsec", "lens_q"):
        assert not set(a[name]) & set(d[name]), name
    assert np.mean(np.array(a["host_object_id"][:50]) == np.array(d["host_object_id"][:50])) < 0.2
    for bad in (-1, 1.5, True, "1"):
        with pytest.raises(InputError, match="realisation"):
            injection_config("demo", realisation=bad)


def test_plan_skips_cells_with_source_behind_lens_and_filters_splits():
    reg = DEFAULT_PRIORS.with_overrides(z_s=("uniform", 0.51, 0.52))
    cfg = InjectionConfig(
        theta_e_grid=(1.0, 1.0, 0.5), z_l_grid=(0.3, 0.7, 0.2), per_cell=4, priors=reg, host_splits=("test",)
    )
    tasks = plan_injection_grid(_hosts(), cfg)
    s = plan_summary(tasks)
    assert s["skipped_tasks"]["z_s_le_z_l"] == 4  # z_l = 0.7 lies behind every z_s
    # z_l = 0.5 just in front of z_s 0.51-0.52 needs sigma_v > 500 km/s for theta_E = 1"; z_l = 0.3 does not.
    assert s["skipped_tasks"]["sigma_v_above_range"] == 4
    assert {c["z_l"] for c in s["skipped_cells"]} == {0.5, 0.7}
    assert set(tasks.column("z_l").to_pylist()) == {0.3}
    assert set(tasks.column("host_split").to_pylist()) == {"test"}
    with pytest.raises(InputError, match="split"):
        plan_injection_grid(_hosts(), InjectionConfig(host_splits=("nope",)))
    with pytest.raises(InputError, match="psfsize_r"):
        plan_injection_grid(_hosts().drop(["psfsize_r"]))


def test_psf_fallback_for_missing_bands():
    fwhm, ok = host_psf_fwhm(np.array([[0.0, 1.2, np.nan], [1.3, 0.0, 1.0]]))
    np.testing.assert_allclose(fwhm[0], [1.26, 1.2, 1.128])
    assert ok.tolist() == [True, False] and np.all(np.isnan(fwhm[1]))


def test_render_injection_batch_bytes_failures_and_params():
    cfg = InjectionConfig(per_cell=1, render=SMALL, poisson_gain=150.0, render_chunk=3)
    tasks = plan_injection_grid(_hosts(), cfg).slice(20, 5)
    rng = np.random.default_rng(0)
    host = rng.normal(0, 0.005, (5, 3, 61, 61)).astype(np.float32)
    iv = np.full_like(host, 1 / 0.005**2)
    host[3, 0, 4, 4] = np.nan
    inj, arc, params = render_injection_batch(tasks, host, iv, config=cfg)
    inj2, arc2, params2 = render_injection_batch(tasks, host, iv, config=cfg)
    assert inj.tobytes() == inj2.tobytes() and arc.tobytes() == arc2.tobytes()
    assert _ipc_bytes(params) == _ipc_bytes(params2)
    p = params.to_pydict()
    assert p["success"] == [True, True, True, False, True] and p["failure_reason"][3] == "host_nonfinite"
    assert np.array_equal(inj[3], host[3], equal_nan=True) and not arc[3].any()
    ok = np.array(p["success"])
    np.testing.assert_array_equal(inj[ok], host[ok] + arc[ok])
    mu = np.array(p["magnification"])[ok]
    assert np.all(mu > 1)
    assert np.all(np.array(p["arc_snr"])[ok] >= 0) and np.array(p["arc_snr"])[ok].max() > 0
    # Lensed magnitude = source magnitude - 2.5 log10(mu) (stamp catches all the lensed flux).
    src_r = np.array(tasks.column("src_mag_r").to_pylist())[ok]
    np.testing.assert_allclose(np.array(p["lensed_mag_r"])[ok], src_r - 2.5 * np.log10(mu), atol=0.01)
    assert p["psf_fwhm_z"][0] == pytest.approx(1.1)
    # Changing the chunking does not change the pixels beyond float32 round-off of the FFT.
    inj3, _, _ = render_injection_batch(
        tasks, host, iv, config=InjectionConfig(per_cell=1, render=SMALL, poisson_gain=150.0, render_chunk=5)
    )
    np.testing.assert_allclose(inj3, inj, atol=1e-6, equal_nan=True)
    with pytest.raises(InputError, match="host_images"):
        render_injection_batch(tasks, host[:2], iv[:2], config=cfg)


def test_paint_known_lens_arcs_centred_and_flux():
    truth = pa.table(
        {
            "theta_e_arcsec": [1.5, 0.8],
            "lens_e1": [0.1, 0.0],
            "lens_e2": [0.0, 0.05],
            "shear_g1": [0.02, 0.0],
            "shear_g2": [0.0, -0.01],
            "src_mag_r": [21.0, 22.0],
            "src_r_sersic_arcsec": [0.3, 0.2],
            "src_n_sersic": [1.0, 1.5],
            "src_e1": [0.1, 0.0],
            "src_e2": [0.0, 0.1],
            "src_x_arcsec": [0.05, 0.1],
            "src_y_arcsec": [0.0, -0.05],
            "src_g_minus_r": [0.3, 0.4],
            "src_r_minus_z": [0.2, 0.1],
        }
    )
    arcs = paint_known_lens_arcs(truth, np.array([[1.3, 1.2, 1.1], [1.5, 1.4, 0.0]]), stamp_size=61)
    assert arcs.shape == (2, 3, 61, 61) and arcs.dtype == np.float32
    yy, xx = np.mgrid[:61, :61]
    for k in range(2):
        r = arcs[k, 1]
        # Near-ring arcs around the lens at pixel (30, 30): light-weighted centroid within ~2 pixels.
        assert abs((r * xx).sum() / r.sum() - 30) < 2.5 and abs((r * yy).sum() / r.sum() - 30) < 2.5
        assert r.sum() > 10 ** (-0.4 * (truth["src_mag_r"][k].as_py() - 22.5))  # magnified
    assert arcs[0, 0].sum() < arcs[0, 1].sum() < arcs[0, 2].sum()  # g-r > 0, r-z > 0
    with pytest.raises(InputError, match="src_mag_r"):
        paint_known_lens_arcs(truth.drop(["src_mag_r"]), np.ones((2, 3)), stamp_size=61)


def test_the_lens_is_centred_on_the_host_not_on_the_stamp_pixel():
    """Cutouts are cut at the nearest pixel, so a host sits (dx_pix, dy_pix) from its stamp's centre
    pixel (+x West, +y North); its lens is centred there. Fractional offsets go into the lens
    centre (engine x East); a one-pixel host offset moves the rendered arc by exactly one pixel."""

    def plan(dx, dy):
        hosts = (
            _hosts(3)
            .set_column(11, "dx_pix", pa.array(np.full(3, dx, np.float32)))
            .set_column(12, "dy_pix", pa.array(np.full(3, dy, np.float32)))
        )
        cfg = InjectionConfig(per_cell=1, batch_size=100, theta_e_grid=(1.5, 1.5, 0.25), z_l_grid=(0.3, 0.3, 0.1))
        return plan_injection_grid(hosts, cfg), cfg

    tasks, _ = plan(0.4, -0.3)
    offset = np.array([tasks.column(f"lens_offset_{a}_arcsec").to_numpy() for a in "xy"])
    np.testing.assert_allclose(tasks.column("lens_center_x_arcsec").to_numpy(), offset[0] - 0.4 * 0.262, atol=1e-7)
    np.testing.assert_allclose(tasks.column("lens_center_y_arcsec").to_numpy(), offset[1] - 0.3 * 0.262, atol=1e-7)
    host = np.zeros((1, 3, 101, 101), np.float32)
    arcs = {}
    for d in (0.0, 1.0):
        t, cfg = plan(d, -d)
        arcs[d] = render_injection_batch(t, host, np.full_like(host, 1e6), config=cfg)[1][0]

    # one pixel West (+x) and South (-y): the arc moved by (+1, -1) pixels, to the sampling error of
    # ss = 4 near the caustic (lenstronomy's own ImageModel differs by 2-6% of the peak after such a
    # shift); any other direction is off by tens of percent
    def residual(shift):
        return np.abs(arcs[1.0] - np.roll(arcs[0.0], shift, axis=(1, 2)))[:, 10:-10, 10:-10].max() / arcs[0.0].max()

    assert residual((-1, 1)) < 0.1
    assert min(residual(s) for s in ((1, -1), (1, 1), (-1, -1), (0, 1), (-1, 0))) > 0.2
