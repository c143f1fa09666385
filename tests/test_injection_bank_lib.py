"""Injection-bank planning, rendering into hosts, priors and known-lens arcs (library level)."""

import numpy as np
import pyarrow as pa
import pytest

from darkhaloscope.errors import InputError
from darkhaloscope.lensing.bank import (
    InjectionConfig,
    host_psf_fwhm,
    hosts_outside_bins,
    injection_config,
    plan_injection_grid,
    plan_summary,
    render_injection_batch,
)
from darkhaloscope.lensing.cosmology import sigma_v_from_theta_e
from darkhaloscope.lensing.priors import DEFAULT_PRIORS, Prior, PriorRegistry, draw_clumps
from darkhaloscope.lensing.render import RenderConfig

SMALL = RenderConfig(n_pix=61)


def _ipc_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def _hosts(n=12, psf_z=1.1, z=None, log_sigma=None):
    """Hosts spread over the z_l bins (or at redshifts ``z``), σ_v from log10 σ = ``log_sigma``
    (default 2.3–2.5) with 0.08 dex scatter."""
    z = np.resize(np.linspace(0.08, 0.92, 9), n) if z is None else np.asarray(z, float)
    mu = np.resize(np.linspace(2.3, 2.5, 5), n) if log_sigma is None else np.asarray(log_sigma, float)
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
            "host_z": z,
            "host_z_source": ["spec", "phot"] * (n // 2) + ["phot"] * (n % 2),
            "sigma_v_source": ["measured", "relation"] * (n // 2) + ["relation"] * (n % 2),
            "log_sigma_mu": mu,
            "log_sigma_sd": np.full(n, 0.08),
            "lens_mag_z": np.linspace(17.0, 19.5, n),
            "host_q": np.full(n, 0.8),
            "host_phi_rad": np.linspace(0.1, 3.0, n),
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


def test_plan_grid_hosts_at_their_redshift_with_their_own_sigma():
    cfg = InjectionConfig(per_cell=3, batch_size=100, host_splits=None)
    hosts = _hosts(27, log_sigma=np.full(27, 2.2))
    tasks = plan_injection_grid(hosts, cfg)
    s = plan_summary(tasks)
    d = tasks.to_pydict()
    assert s["n_cells"] == 11 * 9 and s["n_tasks"] == tasks.num_rows and s["hosts"]["per_bin"] == [3] * 9
    # every host in its z_l bin, and the task's z_l is the host's redshift
    assert np.all(np.abs(np.array(d["host_z"]) - np.array(d["z_l_bin"])) <= 0.05 + 1e-9)
    assert d["z_l"] == d["host_z"]
    zmap = dict(zip(hosts.column("object_id").to_pylist(), hosts.column("host_z").to_pylist()))
    assert [zmap[h] for h in d["host_object_id"]] == d["host_z"]
    assert hosts_outside_bins(tasks, s["z_l_values"])["n_outside"] == 0
    sv = np.array(d["sigma_v_kms"])
    np.testing.assert_allclose(sigma_v_from_theta_e(d["theta_e_arcsec"], d["z_l"], d["z_s"]), sv, rtol=1e-12)
    assert set(d["theta_e_arcsec"]) <= set(cfg.theta_e_values())
    assert np.all(np.array(d["z_s"]) > np.array(d["z_l"]))
    # θ_E follows from the host's σ_v at the host's redshift, as lenstronomy's LensCosmo has it
    from lenstronomy.Cosmo.lens_cosmo import LensCosmo

    from darkhaloscope.lensing.cosmology import get_cosmology

    for i in range(0, tasks.num_rows, max(1, tasks.num_rows // 7)):
        lc = LensCosmo(z_lens=d["host_z"][i], z_source=d["z_s"][i], cosmo=get_cosmology("planck18"))
        assert lc.sis_sigma_v2theta_E(d["sigma_v_kms"][i]) == pytest.approx(d["theta_e_arcsec"][i], rel=1e-6)
    # the lens follows the host light: q within the offset prior of 0.8, angle near the host's
    assert np.all(np.abs(np.array(d["lens_q"]) - 0.8) <= 0.3 + 1e-9) and np.std(d["lens_q"]) < 0.15
    # theta_E = 3" at z_l = 0.9 needs sigma_v ~ 400 km/s, 5 sd above every host's 160: insufficient
    bad = {(c["theta_e_arcsec"], c["z_l"]) for c in s["insufficient_cells"]}
    assert (3.0, 0.9) in bad and (1.0, 0.3) not in bad
    assert len(set(d["injection_id"])) == tasks.num_rows and max(np.bincount(d["batch"])) <= 100
    # deterministic, whatever the input row order
    shuffled = hosts.take(pa.array(np.random.default_rng(1).permutation(27)))
    assert plan_injection_grid(shuffled, cfg).equals(tasks)


def test_hosts_are_weighted_by_the_sigma_the_cell_needs():
    # two hosts at z = 0.3: one of sigma_v ~ 200 km/s, one ~ 300; theta_E = 0.75" needs ~ 190-210 km/s
    hosts = _hosts(6, z=[0.3] * 6, log_sigma=[np.log10(200)] * 3 + [np.log10(300)] * 3)
    cfg = InjectionConfig(
        per_cell=60, theta_e_grid=(0.75, 2.0, 1.25), z_l_grid=(0.3, 0.3, 0.1), host_splits=None, batch_size=1000
    )
    d = plan_injection_grid(hosts, cfg).to_pydict()
    small = np.array(d["host_object_id"]) < 100 + 3 * 7
    te = np.array(d["theta_e_arcsec"])
    assert small[te == 0.75].mean() > 0.85  # the 200 km/s hosts carry the small Einstein radius
    assert small[te == 2.0].mean() < 0.15  # and the 300 km/s ones the large


def test_too_few_hosts_leave_cells_insufficient_never_filled_from_other_redshifts():
    hosts = _hosts(4, z=[0.3, 0.31, 0.32, 0.5])
    cfg = InjectionConfig(per_cell=4, theta_e_grid=(1.0, 1.0, 0.5), z_l_grid=(0.3, 0.5, 0.2), host_splits=None)
    tasks = plan_injection_grid(hosts, cfg)
    s = plan_summary(tasks)
    assert {(c["z_l"], c["reason"]) for c in s["insufficient_cells"]} == {(0.5, "too_few_hosts_in_bin")}
    assert set(tasks.column("z_l_bin").to_pylist()) == {0.3}
    assert max(tasks.column("host_z").to_pylist()) <= 0.32
    tampered = tasks.set_column(tasks.schema.get_field_index("z_l_bin"), "z_l_bin", pa.array([0.5] * tasks.num_rows))
    out = hosts_outside_bins(tampered, [0.3, 0.5])
    assert out["n_outside"] == tasks.num_rows and out["injection_ids"]
    with pytest.raises(InputError, match="host-as-lens"):
        plan_injection_grid(hosts.drop(["host_z"]), cfg)


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
    sd, sa = plan_summary(default), plan_summary(again)
    assert sa["n_cells"] == sd["n_cells"] and sa["n_tasks"] == pytest.approx(sd["n_tasks"], rel=0.1)
    assert set(a["host_object_id"]) <= set(hosts.column("object_id").to_pylist())
    assert not set(a["seed"]) & set(d["seed"])
    for name in ("src_mag_r", "z_s", "src_x_arcsec", "lens_q_offset"):
        assert not set(a[name]) & set(d[name]), name
    for bad in (-1, 1.5, True, "1"):
        with pytest.raises(InputError, match="realisation"):
            injection_config("demo", realisation=bad)


def test_plan_filters_splits_and_needs_psf():
    cfg = InjectionConfig(theta_e_grid=(1.0, 1.0, 0.5), z_l_grid=(0.3, 0.7, 0.2), per_cell=4, host_splits=("test",))
    tasks = plan_injection_grid(_hosts(30), cfg)
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
    tasks = plan_injection_grid(_hosts(27), cfg).slice(20, 5)
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


def test_the_lens_is_centred_on_the_host_not_on_the_stamp_pixel():
    """Cutouts are cut at the nearest pixel, so a host sits (dx_pix, dy_pix) from its stamp's centre
    pixel (+x West, +y North); its lens is centred there. Fractional offsets go into the lens
    centre (engine x East); a one-pixel host offset moves the rendered arc by exactly one pixel."""

    def plan(dx, dy):
        hosts = (
            _hosts(3, z=[0.3] * 3)
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
    # shift); any other direction is off by 15 % of the peak or more
    def residual(shift):
        return np.abs(arcs[1.0] - np.roll(arcs[0.0], shift, axis=(1, 2)))[:, 10:-10, 10:-10].max() / arcs[0.0].max()

    assert residual((-1, 1)) < 0.1
    assert min(residual(s) for s in ((1, -1), (1, 1), (-1, -1), (0, 1), (-1, 0))) > 0.15
