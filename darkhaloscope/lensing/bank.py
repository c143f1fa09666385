"""Library part of the ``injection_bank`` asset: plan injection tasks, render them into host
cutouts, and paint the arcs of the mock survey's known lenses. No dagster here.

Units: angles in arcsec, fluxes in nanomaggies (AB ZP 22.5), velocity dispersion in km/s, images
float32 [band, y, x] in nmgy/pixel (bands g, r, z), host centred at pixel ((S-1)/2, (S-1)/2).

Determinism: every random quantity of a task comes from its ``seed`` = a stable hash of (salt,
cell, candidate number) (priors by ``unit_hash_array(seed, salt=parameter)``, clumps and Poisson noise by generators
seeded from the seed), and all physical parameters are frozen into the task table at planning
time, so rendering is a pure function of (task row, host pixels) and reruns give the same bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa
import torch

from ..constants import BANDS, PIXEL_SCALE_ARCSEC, flux_to_mag
from ..errors import InputError
from ..seeding import torch_generator_for, unit_hash_array
from .cosmology import DEFAULT_COSMOLOGY, sigma_v_from_theta_e
from .nuisance import DEFAULT_NUISANCE, arc_psf_anisotropy, check_nuisance
from .priors import (
    DEFAULT_PRIORS,
    PriorRegistry,
    draw_clumps,
    draw_system_parameters,
    lens_profile_priors,
    proposal,
)
from .profiles import DEFAULT_PROFILES, lens_model, lens_parameters_from_columns
from .render import RenderConfig, add_poisson_noise, arc_snr, render_lensed_sources
from .sie import LensBatch, ellipticity_from_phi_q
from .source import SourceBatch, band_fluxes
from .source_models import (
    DEFAULT_SOURCE_MODEL,
    assign_source_models,
    canonical_source_model,
    cosmos_draws,
    packaged_templates,
)

#: Kolmogorov scaling of the seeing FWHM (lambda^-1/5) used when a band's psfsize is missing
#: (DR10 bricks without g coverage carry psfsize_g = 0, which would render an unblurred arc):
#: g = 1.05 r, z = 0.94 r, the ratios of the DECam g, r, z effective wavelengths to the -1/5.
PSF_BAND_SCALE_FROM_R = {"g": 1.05, "r": 1.0, "z": 0.94}
#: Range of the lens's axis ratio taken from its host's light (the ``lens_q`` prior's range).
LENS_Q_RANGE = (0.5, 1.0)
#: Metadata key holding the planning summary (JSON) on a task table's schema.
PLAN_SUMMARY_KEY = b"dhs_plan_summary"
#: Metadata key holding what a selection function is conditioned on (JSON), on the plan and its products.
CONDITIONING_KEY = b"dhs_conditioning"
#: Host columns a plan reads; dx_pix, dy_pix: the host's sub-pixel offset from its stamp's centre
#: pixel (cutouts are cut at the nearest pixel), where the lens is centred.
HOST_COLUMNS = (
    "object_id",
    "ra",
    "dec",
    "split",
    "type",
    "psfsize_g",
    "psfsize_r",
    "psfsize_z",
    "psfdepth_g",
    "psfdepth_r",
    "psfdepth_z",
    "dx_pix",
    "dy_pix",
)
#: Host columns the selection plan reads besides HOST_COLUMNS: the host as a lens
#: (``lensing.hosts.HOST_LENS_FIELDS``).
HOST_LENS_COLUMNS = (
    "host_z",
    "host_z_source",
    "sigma_v_source",
    "log_sigma_mu",
    "log_sigma_sd",
    "lens_mag_z",
    "host_q",
    "host_phi_rad",
)
#: Task columns named like a prior that the selection plan takes from the host, not from the prior.
HOST_DERIVED = ("lens_q", "lens_phi_rad", "z_l", "theta_e_arcsec")


def _grid(start: float, stop: float, step: float) -> tuple[float, ...]:
    if not (step > 0 and stop >= start):
        raise InputError(f"grid ({start}, {stop}, step {step}) is empty or has step <= 0")
    k = int(np.floor((stop - start) / step + 1e-9)) + 1
    return tuple(float(np.round(start + i * step, 10)) for i in range(k))


@dataclass(frozen=True)
class InjectionConfig:
    """Planning and rendering settings of the injection bank.

    theta_e_grid [arcsec] and z_l_grid: (start, stop, step), inclusive; per_cell: injections per
    (theta_E, z_l) cell; batch_size: tasks per ``batch`` key; sigma_v_range [km/s]: tasks needing
    sigma_v outside it are skipped; cosmology: name for ``cosmology.get_cosmology``; host_splits:
    only hosts whose ``split`` is listed (None = all); poisson_gain [e-/nmgy]: source Poisson noise
    on the arc (None = off); render: numerics (supersampling, PSF profile, S/N threshold);
    render_chunk: systems per render call (memory bound; results do not depend on it);
    min_hosts_per_cell: a z_l bin with fewer hosts leaves its cells insufficient (empty);
    max_tries_per_injection: candidate (host, z_s) pairs tried per injection of a cell before the
    cell is left insufficient (``plan_injection_grid``); proposal_name: the name of ``priors`` in
    ``priors.PROPOSALS`` (recorded with every selection table); lens_profiles: the lens's composition
    of mass profiles (``lensing.profiles``), its parameters beyond SIE + shear drawn from
    the priors the profiles declare (``priors.lens_profile_priors``) and recorded with the plan;
    source_model: the sources' model (``source_models``: sersic | sersic_clumps | cosmos | a mix
    name:weight,...); nuisance: the imaging nuisance (``nuisance``: none | survey); both recorded
    with every table they shape.
    """

    theta_e_grid: tuple[float, float, float] = (0.5, 3.0, 0.25)
    z_l_grid: tuple[float, float, float] = (0.1, 0.9, 0.1)
    per_cell: int = 10
    batch_size: int = 2048
    sigma_v_range: tuple[float, float] = (50.0, 500.0)
    cosmology: str = DEFAULT_COSMOLOGY
    host_splits: tuple[str, ...] | None = None
    priors: PriorRegistry = field(default_factory=lambda: DEFAULT_PRIORS)
    poisson_gain: float | None = None
    render: RenderConfig = field(default_factory=RenderConfig)
    render_chunk: int = 128
    salt: str = "injection_bank/v2"
    min_hosts_per_cell: int = 3
    max_tries_per_injection: int = 400
    proposal_name: str = "training"
    lens_profiles: tuple[str, ...] = DEFAULT_PROFILES
    source_model: str = DEFAULT_SOURCE_MODEL
    nuisance: str = DEFAULT_NUISANCE

    def __post_init__(self) -> None:
        # checked before any work: an unknown name fails here, not after a plan was drawn
        object.__setattr__(self, "source_model", canonical_source_model(self.source_model))
        check_nuisance(self.nuisance)

    def theta_e_values(self) -> tuple[float, ...]:
        return _grid(*self.theta_e_grid)

    def z_l_values(self) -> tuple[float, ...]:
        return _grid(*self.z_l_grid)


#: Injections per (θ_E, z_l) cell and tasks per batch, by profile: ``demo`` is sized for the demo on
#: 2 CPU cores, ``full`` for survey-scale selection functions on a GPU.
PROFILE_SIZES = {"demo": {"per_cell": 40, "batch_size": 1000}, "full": {"per_cell": 500, "batch_size": 4096}}


def injection_config(
    profile: str,
    per_cell: int = 0,
    batch_size: int = 0,
    theta_e_grid=None,
    z_l_grid=None,
    host_splits=("test",),
    realisation: int = 0,
    min_hosts_per_cell: int = 0,
    proposal_name: str = "broad",
    lens_profiles: tuple[str, ...] = DEFAULT_PROFILES,
    source_model: str = DEFAULT_SOURCE_MODEL,
    nuisance: str = DEFAULT_NUISANCE,
) -> InjectionConfig:
    """The injection settings of a profile (``demo`` or ``full``); 0 / None keep the profile's
    size and :class:`InjectionConfig`'s grids. ``realisation`` n > 0 draws every source, lens and
    host assignment afresh (its own seed salt), so the selection function can be measured again on
    independent injections into the same hosts; 0 is the default draw. ``proposal_name``: the
    selection proposal q(ψ) the sources are drawn from (``priors.PROPOSALS``); ``lens_profiles``: the
    lens's composition of mass profiles (default SIE + SHEAR); ``source_model``, ``nuisance``: the
    sources' and the imaging nuisance's models (:class:`InjectionConfig`)."""
    if isinstance(realisation, bool) or not isinstance(realisation, (int, np.integer)) or realisation < 0:
        raise InputError(f"injection realisation must be an integer >= 0, got {realisation!r}")
    sizes = PROFILE_SIZES.get(profile, PROFILE_SIZES["demo"])
    base = InjectionConfig()
    return InjectionConfig(
        theta_e_grid=tuple(theta_e_grid) if theta_e_grid else base.theta_e_grid,
        z_l_grid=tuple(z_l_grid) if z_l_grid else base.z_l_grid,
        per_cell=per_cell or sizes["per_cell"],
        batch_size=batch_size or sizes["batch_size"],
        host_splits=tuple(host_splits),
        salt=base.salt if realisation == 0 else f"{base.salt}/realisation-{int(realisation)}",
        min_hosts_per_cell=min_hosts_per_cell or base.min_hosts_per_cell,
        priors=proposal(proposal_name),
        proposal_name=proposal_name,
        lens_profiles=tuple(lens_model(tuple(lens_profiles)).names),
        source_model=source_model,
        nuisance=nuisance,
    )


def selection_hosts(cutouts, host_types, graded_lens_ids=()) -> pa.Table:
    """Injection hosts from the cutouts table (a dataset or table): negatives passing the quality
    gate whose TYPE is in ``host_types``, less the objects visual inspection graded a lens
    (``graded_lens_ids``: the control of an injection into a lens is a lens, not the bare host the
    selection function compares against), with :data:`HOST_COLUMNS`."""
    import pyarrow.compute as pc

    cols = list(HOST_COLUMNS) + ["label", "quality_ok"]
    hosts = cutouts.to_table(columns=cols) if hasattr(cutouts, "to_table") else cutouts.select(cols)
    mask = pc.and_(
        pc.and_(pc.equal(hosts.column("label"), 0), hosts.column("quality_ok")),
        pc.is_in(hosts.column("type"), pa.array(list(host_types))),
    )
    mask = pc.and_(
        mask, pc.invert(pc.is_in(hosts.column("object_id"), pa.array(np.asarray(graded_lens_ids, dtype=np.int64))))
    )
    return hosts.filter(mask).select(list(HOST_COLUMNS))


def bank_table(tasks: pa.Table, params: pa.Table, injected: np.ndarray, controls: np.ndarray) -> pa.Table:
    """The injection bank rows of one batch: every task column, the rendering's parameters not
    already in the task, the injected stamp (``image``) and its paired control (the bare host)."""
    from ..stamps import to_tensor_array

    out = bank_columns(tasks, params)
    return out.append_column("image", to_tensor_array(injected)).append_column("control", to_tensor_array(controls))


def bank_columns(tasks: pa.Table, params: pa.Table) -> pa.Table:
    """The injection bank's columns but its stamps: every task column, then the rendering's
    parameters not already in the task."""
    out = tasks
    for name in params.column_names:
        if name not in out.column_names:
            out = out.append_column(name, params.column(name))
    return out


def host_psf_fwhm(psfsize: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-band PSF FWHM [arcsec] (N, 3) from host psfsize_g/r/z (N, 3), with missing (<= 0 or
    non-finite) g or z replaced by r x (1.05, 0.94). Returns (fwhm, ok) where ok is False when r
    itself is missing (fwhm NaN there)."""
    p = np.asarray(psfsize, dtype=np.float64).reshape(-1, 3)
    good = np.isfinite(p) & (p > 0)
    out = p.copy()
    for b, name in enumerate(BANDS):
        out[:, b] = np.where(good[:, b], p[:, b], p[:, 1] * PSF_BAND_SCALE_FROM_R[name])
    ok = good[:, 1]
    out[~ok] = np.nan
    return out, ok


def _validate_hosts(hosts: pa.Table) -> None:
    missing = [c for c in HOST_COLUMNS if c not in hosts.column_names]
    if missing:
        raise InputError(f"hosts table lacks columns {missing}")
    if hosts.num_rows == 0:
        raise InputError("hosts table is empty")


def _col(t: pa.Table, name: str, dtype=np.float64) -> np.ndarray:
    return np.asarray(t.column(name).to_numpy(zero_copy_only=False), dtype=dtype)


def _hosts_in_splits(hosts: pa.Table, host_splits) -> pa.Table:
    """The validated hosts whose split is in ``host_splits`` (all of them when it is None)."""
    _validate_hosts(hosts)
    if host_splits is None:
        return hosts
    keep = np.isin(_col(hosts, "split", object), np.asarray(host_splits, dtype=object))
    hosts = hosts.filter(pa.array(keep))
    if hosts.num_rows == 0:
        raise InputError(f"no host has split in {host_splits}")
    return hosts


def _skip_reasons(
    theta_e: np.ndarray, z_l: np.ndarray, z_s: np.ndarray, host_psf_ok: np.ndarray, cfg: InjectionConfig
) -> tuple[np.ndarray, np.ndarray]:
    """(skip reason per candidate, '' = kept; its SIS velocity dispersion [km/s], NaN where z_s <= z_l).

    A candidate is skipped when its source is not behind the lens, when the velocity dispersion
    that its (theta_E, z_l, z_s) implies lies outside ``cfg.sigma_v_range``, or when its host has no
    usable PSF size; the first reason that applies is kept."""
    reason = np.full(len(theta_e), "", dtype=object)
    reason[z_s <= z_l] = "z_s_le_z_l"
    sigma_v = np.full(len(theta_e), np.nan)
    okz = reason == ""
    if okz.any():
        sigma_v[okz] = sigma_v_from_theta_e(theta_e[okz], z_l[okz], z_s[okz], cfg.cosmology)
    lo, hi = cfg.sigma_v_range
    reason[okz & (sigma_v < lo)] = "sigma_v_below_range"
    reason[okz & (sigma_v > hi)] = "sigma_v_above_range"
    reason[(reason == "") & ~host_psf_ok] = "host_psfsize_r_missing"
    return reason, sigma_v


def _build_tasks(
    hosts: pa.Table,
    theta_e: np.ndarray,
    z_l: np.ndarray,
    seeds: np.ndarray,
    batch: np.ndarray,
    index: np.ndarray,
    cell: np.ndarray,
    profile: str,
    cfg: InjectionConfig,
    params: dict[str, np.ndarray],
    host_row: np.ndarray | None = None,
    extra: dict[str, np.ndarray] | None = None,
):
    """Rows for candidate tasks that pass the physical cuts, and each candidate's skip reason ('' = kept).

    host_row: the row of ``hosts`` (after the ``host_splits`` filter) of each candidate; by default
    the hosts in a hashed order (independent of the input row order) are dealt round-robin.
    extra: further per-candidate columns, appended for the kept rows."""
    hosts = _hosts_in_splits(hosts, cfg.host_splits)
    oid = _col(hosts, "object_id", np.int64)
    if host_row is None:
        order = np.lexsort((oid, unit_hash_array(oid, salt=(cfg.salt, "hosts"))))
        host_row = order[np.arange(len(theta_e)) % len(order)]
    z_s = params["z_s"]
    psf, psf_ok = host_psf_fwhm(np.stack([_col(hosts, f"psfsize_{b}") for b in BANDS], axis=1))
    reason, sigma_v = _skip_reasons(theta_e, z_l, z_s, psf_ok[host_row], cfg)
    keep = reason == ""
    h = host_row[keep]
    cols = {
        "injection_id": (batch.astype(np.int64) * cfg.batch_size + index)[keep],
        "batch": batch.astype(np.int32)[keep],
        "index_in_batch": index.astype(np.int32)[keep],
        "seed": seeds.astype(np.int64)[keep],
        "profile": np.full(int(keep.sum()), profile, dtype=object),
        "cell_id": cell.astype(np.int32)[keep],
        "host_object_id": oid[h],
        "host_ra": _col(hosts, "ra")[h],
        "host_dec": _col(hosts, "dec")[h],
        "host_split": _col(hosts, "split", object)[h],
        "host_type": _col(hosts, "type", object)[h],
        "theta_e_arcsec": theta_e[keep],
        "z_l": z_l[keep],
        "z_s": z_s[keep],
        "sigma_v_kms": sigma_v[keep],
        **_lens_source_columns(params, theta_e, keep, _col(hosts, "dx_pix")[h], _col(hosts, "dy_pix")[h]),
    }
    for b, name in enumerate(BANDS):
        cols[f"psf_fwhm_{name}"] = psf[h, b]
    for name in BANDS:
        cols[f"psfdepth_{name}"] = _col(hosts, f"psfdepth_{name}")[h]
    extra_priors = lens_profile_priors() if extra_lens_columns(cfg.lens_profiles) else None
    for name in extra_lens_columns(cfg.lens_profiles):
        cols[name] = extra_priors.draw(name, seeds)[keep]
    for name, values in (extra or {}).items():
        cols[name] = np.asarray(values)[keep]
    return pa.table(cols), reason


def extra_lens_columns(profiles: tuple[str, ...]) -> tuple[str, ...]:
    """Task columns of the composition ``profiles`` beyond SIE + SHEAR's (drawn from the priors they declare)."""
    default = set(lens_model(DEFAULT_PROFILES).columns().values())
    return tuple(c for c in lens_model(tuple(profiles)).columns().values() if c not in default)


def _lens_source_columns(
    params: dict[str, np.ndarray], theta_e: np.ndarray, keep: np.ndarray, host_dx: np.ndarray, host_dy: np.ndarray
) -> dict[str, np.ndarray]:
    """The lens and source columns of the kept candidates (``keep``), from their drawn ``params``;
    ``host_dx``, ``host_dy``: the kept hosts' sub-pixel offsets [pixel]."""
    lens_e1, lens_e2 = (
        t.numpy()
        for t in ellipticity_from_phi_q(torch.as_tensor(params["lens_phi_rad"]), torch.as_tensor(params["lens_q"]))
    )
    src_e1, src_e2 = (
        t.numpy()
        for t in ellipticity_from_phi_q(torch.as_tensor(params["src_phi_rad"]), torch.as_tensor(params["src_q"]))
    )
    beta = params["src_beta_frac"] * theta_e
    ang = params["src_beta_angle_rad"]
    return {
        "lens_q": params["lens_q"][keep],
        "lens_phi_rad": params["lens_phi_rad"][keep],
        "lens_e1": lens_e1[keep],
        "lens_e2": lens_e2[keep],
        "host_dx_pix": host_dx,
        "host_dy_pix": host_dy,
        "lens_offset_x_arcsec": params["lens_offset_x_arcsec"][keep],
        "lens_offset_y_arcsec": params["lens_offset_y_arcsec"][keep],
        # the engine's x runs East, against the pixel x axis (West); y runs North with pixel y
        "lens_center_x_arcsec": params["lens_offset_x_arcsec"][keep] - host_dx * PIXEL_SCALE_ARCSEC,
        "lens_center_y_arcsec": params["lens_offset_y_arcsec"][keep] + host_dy * PIXEL_SCALE_ARCSEC,
        "shear_g1": params["shear_g1"][keep],
        "shear_g2": params["shear_g2"][keep],
        "src_mag_r": params["src_mag_r"][keep],
        "src_g_minus_r": params["src_g_minus_r"][keep],
        "src_r_minus_z": params["src_r_minus_z"][keep],
        "src_r_sersic_arcsec": params["src_r_sersic_arcsec"][keep],
        "src_n_sersic": params["src_n_sersic"][keep],
        "src_q": params["src_q"][keep],
        "src_phi_rad": params["src_phi_rad"][keep],
        "src_e1": src_e1[keep],
        "src_e2": src_e2[keep],
        "src_beta_frac": params["src_beta_frac"][keep],
        # Source position relative to the lens centre (RA-like x East positive, y North) [arcsec].
        "src_x_arcsec": (beta * np.cos(ang))[keep],
        "src_y_arcsec": (beta * np.sin(ang))[keep],
    }


def _skip_counts(reason: np.ndarray) -> dict:
    return {r: int((reason == r).sum()) for r in sorted(set(reason.tolist()) - {""})}


def _with_summary(table: pa.Table, summary: dict) -> pa.Table:
    return table.replace_schema_metadata({PLAN_SUMMARY_KEY: json.dumps(summary, sort_keys=True).encode()})


def plan_summary(tasks: pa.Table) -> dict:
    """The planning summary (counts of candidates, tasks, skipped tasks by reason, skipped cells)."""
    meta = tasks.schema.metadata or {}
    if PLAN_SUMMARY_KEY not in meta:
        raise InputError("task table carries no planning summary (was it built by plan_injection_grid?)")
    return json.loads(meta[PLAN_SUMMARY_KEY])


def _z_bins(cfg: InjectionConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(centres, lower edges, upper edges) of the z_l bins: each centre ± half the grid step."""
    zl = np.asarray(cfg.z_l_values())
    half = 0.5 * cfg.z_l_grid[2]
    return zl, np.round(zl - half, 10), np.round(zl + half, 10)


def hosts_outside_bins(tasks: pa.Table, z_l_values) -> dict:
    """Rows whose lens redshift (``z_l``, the host's ``host_z``) lies outside their cell's z_l bin
    (``z_l_bin`` ± half the grid step, the last edge included): the blocking check of the bank."""
    zl = np.asarray(sorted(z_l_values), dtype=np.float64)
    half = 0.5 * (float(np.min(np.diff(zl))) if zl.size > 1 else 0.1)
    host_z, z_l, zbin = (_col(tasks, c) for c in ("host_z", "z_l", "z_l_bin"))
    on_grid = np.isin(np.round(zbin, 10), np.round(zl, 10))
    bad = ~on_grid | ~(np.abs(host_z - zbin) <= half + 1e-9) | (host_z != z_l)
    ids = _col(tasks, "injection_id", np.int64)[bad]
    return {"n_outside": int(bad.sum()), "injection_ids": ids[:10].tolist(), "half_width": half}


def _candidate_seeds(salt: str, cell: int, tries: np.ndarray) -> np.ndarray:
    """Seeds (53-bit int64) of the candidates ``tries`` of a cell: the stable hash of each try number
    salted by (salt, 'selection', cell)."""
    return (unit_hash_array(np.asarray(tries, dtype=np.int64), salt=(salt, "selection", int(cell))) * 2.0**53).astype(
        np.int64
    )


def _fill_cell(theta_e: float, cell: int, elig: np.ndarray, host: dict, cfg: InjectionConfig):
    """Rejection sampling of one cell: candidate j is (host elig[⌊u n⌋], z_s from its prior), with
    the σ_v it needs for θ_E at the host's redshift; accepted with probability
    N(log σ_v; μ_h, s_h) / N_max (a log-normal density in log σ_v, whose width for a θ_E cell is the
    same for every host: d log σ = ½ d log θ_E), N_max = the density peak of the sharpest host in the
    bin. Returns (seeds, host rows, z_s, σ_v, tries used) of the accepted candidates, at most per_cell."""
    need, limit = cfg.per_cell, cfg.per_cell * cfg.max_tries_per_injection
    mu, sd, hz = host["mu"][elig], host["sd"][elig], host["z"][elig]
    smin = float(sd.min())
    lo, hi = cfg.sigma_v_range
    got: list[np.ndarray] = []
    n_got, start, chunk = 0, 0, max(64, need * 16)
    while n_got < need and start < limit:
        tries = np.arange(start, min(start + chunk, limit))
        start = int(tries[-1]) + 1
        seeds = _candidate_seeds(cfg.salt, cell, tries)
        k = np.minimum((unit_hash_array(seeds, salt="host") * len(elig)).astype(np.int64), len(elig) - 1)
        z_s = cfg.priors.draw("z_s", seeds)
        ok = z_s > hz[k]
        sig = np.full(len(tries), np.nan)
        sig[ok] = sigma_v_from_theta_e(np.full(ok.sum(), theta_e), hz[k][ok], z_s[ok], cfg.cosmology)
        with np.errstate(invalid="ignore"):
            w = np.exp(-0.5 * ((np.log10(sig) - mu[k]) / sd[k]) ** 2) * smin / sd[k]
            acc = ok & (sig >= lo) & (sig <= hi) & (unit_hash_array(seeds, salt="accept") < w)
        idx = np.flatnonzero(acc)[: need - n_got]
        got.append(np.stack([seeds[idx], elig[k[idx]], z_s[idx], sig[idx]], axis=1).astype(object))
        n_got += len(idx)
    rows = np.concatenate(got) if got else np.zeros((0, 4), dtype=object)
    return (
        rows[:, 0].astype(np.int64),
        rows[:, 1].astype(np.int64),
        rows[:, 2].astype(np.float64),
        rows[:, 3].astype(np.float64),
        start,
    )


def _require_host_lens_columns(hosts: pa.Table) -> None:
    missing = [c for c in HOST_LENS_COLUMNS if c not in hosts.column_names]
    if missing:
        raise InputError(
            f"hosts table lacks the host-as-lens columns {missing} (lensing.hosts.host_lens_properties gives them)"
        )


def plan_injection_grid(hosts: pa.Table, config: InjectionConfig = InjectionConfig()) -> pa.Table:
    """Selection-function tasks over the θ_E × z_l grid (``per_cell`` per cell), one row each,
    each painted onto a host at its own redshift with its own σ_v.

    ``hosts``: HOST_COLUMNS and HOST_LENS_COLUMNS (``lensing.hosts``). A host lies in the z_l bin
    (grid centre ± half the step) holding its ``host_z``; hosts without a redshift, a σ_v
    distribution or an r-band PSF size are left out (counted). Each cell is filled by rejection
    sampling (:func:`_fill_cell`): the accepted (host, z_s, σ_v) are drawn as the bin's hosts
    weighted by the probability that their σ_v is the one the cell's θ_E needs. The task's
    ``z_l`` is its host's redshift and ``z_l_bin`` the cell's centre; θ_E is the grid value and
    σ_v = σ(θ_E, z_l, z_s). The lens's axis ratio and angle are the host light's plus the
    ``lens_q_offset`` and ``lens_phi_offset_rad`` priors. A bin with fewer than
    ``min_hosts_per_cell`` hosts leaves its cells empty, and a cell not filled within
    ``per_cell × max_tries_per_injection`` candidates keeps what it accepted; both are listed as
    insufficient in the planning summary (``plan_summary``), never filled from other redshifts.
    Seeds: candidate j of cell c has seed ⌊2^53 unit_hash(j; salt, 'selection', c)⌋; tasks
    are numbered cell by cell (θ_E major), batch = number // batch_size.
    """
    _check_grid_config(config)
    hosts = _hosts_in_splits(hosts, config.host_splits)
    _require_host_lens_columns(hosts)
    te = np.asarray(config.theta_e_values())
    zl, zlo, zhi = _z_bins(config)
    oid = _col(hosts, "object_id", np.int64)
    hz, mu, sd = _col(hosts, "host_z"), _col(hosts, "log_sigma_mu"), _col(hosts, "log_sigma_sd")
    _, psf_ok = host_psf_fwhm(np.stack([_col(hosts, f"psfsize_{b}") for b in BANDS], axis=1))
    usable = np.isfinite(hz) & np.isfinite(mu) & np.isfinite(sd) & (sd > 0) & psf_ok
    zbin = np.searchsorted(zhi, hz, side="right")
    zbin = np.where(hz == zhi[-1], len(zl) - 1, zbin)
    in_grid = usable & (hz >= zlo[0]) & (zbin < len(zl))
    order = np.lexsort((oid, unit_hash_array(oid, salt=(config.salt, "hosts"))))
    host = {"mu": mu, "sd": sd, "z": hz}
    per_bin = [order[in_grid[order] & (zbin[order] == i)] for i in range(len(zl))]
    seeds, host_row, cell, insufficient, tries = _fill_grid(te, zl, per_bin, host, config)
    n = len(seeds)
    j = np.arange(n, dtype=np.int64)
    batch, index = j // config.batch_size, j % config.batch_size
    params = draw_system_parameters(seeds, config.priors, extra=("lens_q_offset", "lens_phi_offset_rad"))
    params["lens_q"] = np.clip(_col(hosts, "host_q")[host_row] + params["lens_q_offset"], *LENS_Q_RANGE)
    params["lens_phi_rad"] = np.mod(_col(hosts, "host_phi_rad")[host_row] + params["lens_phi_offset_rad"], np.pi)
    extra = {
        "z_l_bin": zl[cell % len(zl)],
        "host_z": hz[host_row],
        "host_z_source": _col(hosts, "host_z_source", object)[host_row],
        "sigma_v_source": _col(hosts, "sigma_v_source", object)[host_row],
        "host_log_sigma_mu": mu[host_row],
        "host_log_sigma_sd": sd[host_row],
        "lens_mag_z": _col(hosts, "lens_mag_z")[host_row],
        "lens_q_offset": params["lens_q_offset"],
        "lens_phi_offset_rad": params["lens_phi_offset_rad"],
    }
    table, reason = _build_tasks(
        hosts,
        te[cell // len(zl)],
        hz[host_row],
        seeds,
        batch,
        index,
        cell,
        "selection",
        config,
        params,
        host_row,
        extra,
    )
    if (reason != "").any():
        raise InputError(f"accepted injection candidates failed the physical cuts: {_skip_counts(reason)}")
    hosts_summary = {
        "n_hosts": int(len(oid)),
        "n_usable": int(usable.sum()),
        "n_in_grid": int(in_grid.sum()),
        "without_redshift": int((~np.isfinite(hz)).sum()),
        "per_bin": [int(len(b)) for b in per_bin],
    }
    summary = _grid_summary(te, zl, zlo, zhi, cell, host_row, batch, insufficient, tries, hosts_summary)
    return _with_summary(table, summary)


def _check_grid_config(config: InjectionConfig) -> None:
    if config.per_cell < 1 or config.batch_size < 1:
        raise InputError(f"per_cell and batch_size must be >= 1, got {config.per_cell}, {config.batch_size}")
    if config.min_hosts_per_cell < 1 or config.max_tries_per_injection < 1:
        raise InputError(
            f"min_hosts_per_cell and max_tries_per_injection must be >= 1, got {config.min_hosts_per_cell}, "
            f"{config.max_tries_per_injection}"
        )


def _fill_grid(te: np.ndarray, zl: np.ndarray, per_bin: list[np.ndarray], host: dict, config: InjectionConfig):
    """Every cell of the grid filled by :func:`_fill_cell` (θ_E major): (seeds, host rows, cell of
    each accepted task, the insufficient cells, candidates tried per cell)."""
    seeds, rows, cells, insufficient, tries = [], [], [], [], {}
    for ti in range(len(te)):
        for zi in range(len(zl)):
            c = ti * len(zl) + zi
            elig = per_bin[zi]
            where = {"theta_e_arcsec": float(te[ti]), "z_l": float(zl[zi]), "n_hosts_in_bin": int(len(elig))}
            if len(elig) < config.min_hosts_per_cell:
                insufficient.append({**where, "reason": "too_few_hosts_in_bin", "n_accepted": 0})
                continue
            sd_seeds, sd_rows, _, _, used = _fill_cell(float(te[ti]), c, elig, host, config)
            tries[c] = used
            if len(sd_seeds) < config.per_cell:
                insufficient.append({**where, "reason": "sigma_v_rarely_matched", "n_accepted": int(len(sd_seeds))})
            seeds.append(sd_seeds)
            rows.append(sd_rows)
            cells.append(np.full(len(sd_seeds), c, np.int64))
    return (
        np.concatenate(seeds) if seeds else np.zeros(0, np.int64),
        np.concatenate(rows) if rows else np.zeros(0, np.int64),
        np.concatenate(cells) if cells else np.zeros(0, np.int64),
        insufficient,
        tries,
    )


def _grid_summary(te, zl, zlo, zhi, cell, host_row, batch, insufficient, tries, hosts_summary: dict) -> dict:
    """The planning summary of a grid plan (:func:`plan_summary` reads it back)."""
    n = len(cell)
    filled = np.bincount(cell, minlength=len(te) * len(zl))
    empty = [
        {"theta_e_arcsec": float(te[c // len(zl)]), "z_l": float(zl[c % len(zl)])} for c in np.flatnonzero(filled == 0)
    ]
    distinct = [len(np.unique(host_row[cell == c])) for c in range(len(te) * len(zl))]
    return {
        "profile": "selection",
        "n_cells": int(len(te) * len(zl)),
        "n_candidates": int(sum(tries.values())),
        "n_tasks": int(n),
        "skipped_tasks": {},
        "n_skipped_cells": len(empty),
        "skipped_cells": empty,
        "insufficient_cells": insufficient,
        "n_insufficient_cells": len(insufficient),
        "n_batches": int(len(np.unique(batch))) if n else 0,
        "theta_e_values": [float(v) for v in te],
        "z_l_values": [float(v) for v in zl],
        "z_l_bin_edges": [float(v) for v in np.r_[zlo, zhi[-1]]],
        "hosts": {
            **hosts_summary,
            "distinct_hosts_per_cell_median": float(np.median(distinct)) if distinct else 0.0,
        },
        "acceptance": float(n / max(sum(tries.values()), 1)),
        "host_selection": (
            "a host lies in the z_l bin of its spec-z (else photo-z median); each cell's (host, z_s) candidates "
            "are accepted with probability N(log sigma_v(theta_E, z_host, z_s); mu_host, s_host) / N_max"
        ),
    }


def selection_conditioning(cfg: InjectionConfig, host_types, relation: dict, host_counts: dict) -> dict:
    """What a selection function measured on a plan of ``cfg`` is conditioned on: the priors, the
    cosmology, the host selection (types, splits, redshift and σ_v rules, ``host_counts``), the
    luminosity–σ relation (``SigmaRelation.to_dict``), the grid and the injections per cell."""
    return {
        "grid": {
            "theta_e_arcsec": list(cfg.theta_e_grid),
            "z_l": list(cfg.z_l_grid),
            "z_l_bins": "grid centre ± half the step; the lens redshift is the host's",
        },
        "injections_per_cell": cfg.per_cell,
        "cosmology": cfg.cosmology,
        "sigma_v_range_kms": list(cfg.sigma_v_range),
        "host_selection": {
            "types": list(host_types),
            "splits": None if cfg.host_splits is None else list(cfg.host_splits),
            "quality": "negatives passing the cutout quality gate, none graded a lens",
            "redshift": "SDSS spec-z (ZWARNING 0, CLASS GALAXY), else the DR10 photo-z median (Zhou et al. 2023)",
            "sigma_v": "SDSS VDISP (VDISP_ERR its sd) where measured, else the luminosity–σ relation with its scatter",
            "weighting": "each (host, z_s) accepted with probability ∝ N(log σ_v needed; host's log σ_v distribution)",
            "min_hosts_per_cell": cfg.min_hosts_per_cell,
            "lens_shape": "the host light's axis ratio and angle plus the lens_q_offset, lens_phi_offset_rad priors",
            "counts": host_counts,
        },
        "sigma_v_relation": relation,
        "proposal": cfg.proposal_name,
        "source_model": cfg.source_model,
        "nuisance": cfg.nuisance,
        "priors": {k: [p.kind, p.lo, p.hi, p.mu, p.sigma] for k, p in sorted(cfg.priors.priors.items())},
        "seed_salt": cfg.salt,
        # recorded only for another lens than SIE + SHEAR, so a default plan's conditioning is as before
        **(_lens_conditioning(cfg.lens_profiles) if tuple(cfg.lens_profiles) != DEFAULT_PROFILES else {}),
    }


def _lens_conditioning(profiles: tuple[str, ...]) -> dict:
    extra = extra_lens_columns(profiles)
    declared = lens_profile_priors().priors
    priors = {k: [declared[k].kind, declared[k].lo, declared[k].hi, declared[k].mu, declared[k].sigma] for k in extra}
    return {"lens_profiles": list(profiles), "lens_profile_priors": priors}


def with_conditioning(table: pa.Table, conditioning: dict) -> pa.Table:
    """``table`` with ``conditioning`` (JSON) in its schema metadata, other metadata kept."""
    meta = dict(table.schema.metadata or {})
    meta[CONDITIONING_KEY] = json.dumps(conditioning, sort_keys=True).encode()
    return table.replace_schema_metadata(meta)


def table_conditioning(table: pa.Table) -> dict | None:
    """The conditioning recorded on a table's schema (None when it carries none)."""
    raw = (table.schema.metadata or {}).get(CONDITIONING_KEY)
    return json.loads(raw) if raw else None


def plan_proposal(tasks: pa.Table) -> PriorRegistry:
    """The proposal (priors) a plan drew its injections from, as its conditioning records it (the
    training prior for a plan that records none)."""
    from .priors import Prior

    recorded = (table_conditioning(tasks) or {}).get("priors")
    if not recorded:
        return DEFAULT_PRIORS
    return PriorRegistry(priors={k: Prior(*v) for k, v in recorded.items()})


def plan_lens_profiles(tasks: pa.Table) -> tuple[str, ...]:
    """The lens composition a plan (or a bank, which keeps its plan's schema metadata) was drawn
    with, as its conditioning records it (SIE + SHEAR for one that records none)."""
    return tuple((table_conditioning(tasks) or {}).get("lens_profiles") or DEFAULT_PROFILES)


def plan_source_models(tasks: pa.Table, config: InjectionConfig) -> tuple[str, str]:
    """(source model, nuisance model) a plan (or its bank) was drawn with, as its conditioning
    records them; ``config``'s for a plan that records none (a plan built outside the assets)."""
    recorded = table_conditioning(tasks) or {}
    source_model = recorded.get("source_model") or config.source_model
    nuisance = recorded.get("nuisance") or config.nuisance
    check_nuisance(nuisance)
    return canonical_source_model(source_model), nuisance


def plan_grid(tasks: pa.Table) -> tuple[list[float], list[float]]:
    """(θ_E values [arcsec], z_l values) of the grid a plan was built on (cells left empty
    included), from its planning summary: what the selection function is measured on."""
    summary = plan_summary(tasks)
    if "theta_e_values" not in summary or "z_l_values" not in summary:
        raise InputError(
            "the injection plan records no grid (planned before grids were recorded): materialize injection_plan again"
        )
    return list(summary["theta_e_values"]), list(summary["z_l_values"])


def batch_key(batch: int) -> str:
    """Partition key of an injection batch: ``batch-00012``."""
    return f"batch-{int(batch):05d}"


def batch_of_key(key: str) -> int:
    """Inverse of :func:`batch_key`; InputError for anything else."""
    prefix, _, number = key.partition("-")
    if prefix != "batch" or not number.isdigit():
        raise InputError(f"injection batch key {key!r} is not of the form batch-NNNNN")
    return int(number)


def batch_keys(tasks: pa.Table) -> list[str]:
    """Sorted partition keys of the batches in a task table (its ``batch`` column)."""
    return sorted({batch_key(b) for b in tasks.column("batch").to_pylist()})


def _clump_arrays(seeds: np.ndarray, r_sersic: np.ndarray, registry: PriorRegistry):
    return _pad_clumps([draw_clumps(int(s), float(r), registry) for s, r in zip(seeds, r_sersic)])


def _pad_clumps(draws: list):
    """Clump draws (``draw_clumps``) as (B,) fractions and (B, K) arrays padded with weight-0 clumps."""
    k = max((len(d[1]) for d in draws), default=0)
    n = len(draws)
    frac = np.array([d[0] for d in draws])
    x, y, sig, w = (np.zeros((n, k)) for _ in range(4))
    sig[:] = 1.0  # padding clumps have weight 0; sigma 1 keeps the Gaussian finite
    for i, d in enumerate(draws):
        m = len(d[1])
        x[i, :m], y[i, :m], sig[i, :m], w[i, :m] = d[1], d[2], d[3], d[4]
    return frac, x, y, sig, w


def _source_model_arrays(seeds: np.ndarray, r_e: np.ndarray, registry: PriorRegistry, source_model: str):
    """(clump arrays of ``_clump_arrays``, image arguments of ``SourceBatch.with_images`` or None) of
    task seeds under ``source_model`` (``source_models``); ``sersic`` rows draw their clumps from
    ``registry`` as before, ``sersic_clumps`` rows from it with clump_prob 1."""
    if source_model == DEFAULT_SOURCE_MODEL:
        return _clump_arrays(seeds, r_e, registry), None
    model = assign_source_models(seeds, source_model)
    clumpy, every = model == "sersic_clumps", replace(registry, clump_prob=1.0)
    draws = [draw_clumps(int(s), float(r), every if c else registry) for s, r, c in zip(seeds, r_e, clumpy)]
    clumps = _pad_clumps(draws)
    is_image = model == "cosmos"
    if not is_image.any():
        return clumps, None
    templates = packaged_templates()
    idx, flip, scale = cosmos_draws(seeds, r_e, templates)
    return clumps, (templates.images, np.where(is_image, idx, -1), scale, flip.astype(np.float64))


def task_batches(
    tasks: pa.Table,
    device,
    dtype,
    registry: PriorRegistry,
    profiles: tuple[str, ...] = DEFAULT_PROFILES,
    source_model: str = DEFAULT_SOURCE_MODEL,
) -> tuple[LensBatch, SourceBatch]:
    """The lens and source batches of task rows (on ``device`` in ``dtype``), clumps drawn from each
    seed; the lens is the composition ``profiles``, its parameters read from the columns they declare;
    each source is the model ``source_model`` assigns its seed (``source_models``), a COSMOS one
    rotated by its drawn ``src_phi_rad``."""
    lens_columns = {
        name: _col(tasks, name) for name in lens_model(profiles).columns().values() if name in tasks.column_names
    }
    lens = LensBatch.from_arrays(
        device=device,
        dtype=dtype,
        profiles=profiles,
        **lens_parameters_from_columns(lens_columns, profiles, where="injection tasks"),
    )
    c = {
        name: _col(tasks, name)
        for name in (
            "lens_center_x_arcsec",
            "lens_center_y_arcsec",
            "src_mag_r",
            "src_g_minus_r",
            "src_r_minus_z",
            "src_r_sersic_arcsec",
            "src_n_sersic",
            "src_e1",
            "src_e2",
            "src_x_arcsec",
            "src_y_arcsec",
        )
    }
    clumps, image = _source_model_arrays(
        _col(tasks, "seed", np.int64), c["src_r_sersic_arcsec"], registry, source_model
    )
    frac, cx, cy, cs, cw = clumps
    src = SourceBatch.from_arrays(
        flux=band_fluxes(c["src_mag_r"], c["src_g_minus_r"], c["src_r_minus_z"]),
        r_sersic=c["src_r_sersic_arcsec"],
        n_sersic=c["src_n_sersic"],
        e1=c["src_e1"],
        e2=c["src_e2"],
        center_x=c["lens_center_x_arcsec"] + c["src_x_arcsec"],
        center_y=c["lens_center_y_arcsec"] + c["src_y_arcsec"],
        clump_flux_frac=frac,
        clump_x=cx,
        clump_y=cy,
        clump_sigma=cs,
        clump_weight=cw,
        device=device,
        dtype=dtype,
    )
    if image is not None:
        images, idx, scale, flip = image
        src = src.with_images(images, idx, scale, _col(tasks, "src_phi_rad"), flip)
    return lens, src


def host_failures(tasks: pa.Table, host_images: np.ndarray, host_invvar: np.ndarray, config: InjectionConfig):
    """(host images, host invvar, failure reason per row, '' = renderable) of ``tasks``' hosts
    (``host_images``, ``host_invvar``: (N, 3, S, S) [nmgy/pixel], [1/nmgy^2]): a host with a
    non-finite pixel, or with no positive invvar in r, is not injected into."""
    n = tasks.num_rows
    img = np.asarray(host_images)
    iv = np.asarray(host_invvar)
    s = config.render.n_pix
    if img.shape != (n, 3, s, s) or iv.shape != img.shape:
        raise InputError(f"host_images {img.shape} and host_invvar {iv.shape} must both be ({n}, 3, {s}, {s})")
    finite = np.isfinite(img).all(axis=(1, 2, 3))
    has_iv = (np.nan_to_num(iv[:, 1]) > 0).any(axis=(1, 2))
    return img, iv, np.where(~finite, "host_nonfinite", np.where(~has_iv, "host_invvar_r_empty", ""))


@dataclass
class RenderedArcs:
    """The arcs of ``rows`` (indices of task rows), rendered in one chunk: arc (k, 3, S, S) float32
    [nmgy/pixel] (source Poisson noise included when configured), snr (k, 3) per band,
    magnification (k,), lensed_flux (k, 3) [nmgy], n_refined (k,)."""

    rows: np.ndarray
    arc: np.ndarray
    snr: np.ndarray
    magnification: np.ndarray
    lensed_flux: np.ndarray
    n_refined: np.ndarray


def render_arc_chunks(
    tasks: pa.Table, iv: np.ndarray, rows: np.ndarray, device, config: InjectionConfig
) -> Iterator[RenderedArcs]:
    """The arcs of task ``rows`` (the renderable ones, :func:`host_failures`), ``config.render_chunk``
    rows per render call, in order; ``iv``: the hosts' invvar (N, 3, S, S) [1/nmgy^2], the arc S/N's noise;
    the source and nuisance models are the plan's (:func:`plan_source_models`)."""
    psf = np.stack([_col(tasks, f"psf_fwhm_{b}") for b in BANDS], axis=1)
    seeds = _col(tasks, "seed", np.int64)
    profiles = plan_lens_profiles(tasks)
    source_model, nuisance = plan_source_models(tasks, config)
    for start in range(0, len(rows), config.render_chunk):
        sel = rows[start : start + config.render_chunk]
        lens, src = task_batches(
            tasks.take(pa.array(sel)), device, torch.float32, config.priors, profiles, source_model
        )
        e1, e2 = arc_psf_anisotropy(nuisance, seeds[sel], device, torch.float32)
        res = render_lensed_sources(
            lens, src, torch.as_tensor(psf[sel], dtype=torch.float32, device=device), config.render, e1, e2
        )
        a = res.arc
        snr = arc_snr(a, torch.as_tensor(iv[sel], dtype=torch.float32, device=device)).double().cpu().numpy()
        if config.poisson_gain is not None:
            gens = [torch_generator_for("poisson", int(sd), device=str(a.device)) for sd in seeds[sel]]
            a = add_poisson_noise(a, config.poisson_gain, gens)
        yield RenderedArcs(
            sel,
            a.cpu().numpy().astype(np.float32),
            snr,
            res.magnification.double().cpu().numpy(),
            res.lensed_flux.double().cpu().numpy(),
            res.n_refined.cpu().numpy(),
        )


class RenderTally:
    """Per-row render results of a batch of ``n`` tasks, filled chunk by chunk (:meth:`add`), and
    the parameter table they make (:meth:`params`); rows never rendered keep μ NaN, S/N 0."""

    def __init__(self, n: int):
        self.mu = np.full(n, np.nan)
        self.snr = np.zeros((n, 3))
        self.lensed_flux = np.full((n, 3), np.nan)
        self.n_ref = np.zeros(n, dtype=np.int32)
        self.arc_flux = np.full((n, 3), np.nan)
        self.arc_finite = np.ones(n, dtype=bool)

    def add(self, chunk: RenderedArcs) -> None:
        sel = chunk.rows
        self.snr[sel], self.mu[sel] = chunk.snr, chunk.magnification
        self.lensed_flux[sel], self.n_ref[sel] = chunk.lensed_flux, chunk.n_refined
        # measured on the pixels as rendered (noise included), not taken from the renderer's μ, so
        # that the bank's physics audit can hold the one against the other without the stamps
        self.arc_flux[sel] = chunk.arc.astype(np.float64).sum(axis=(2, 3))
        self.arc_finite[sel] = np.isfinite(chunk.arc).all(axis=(1, 2, 3))

    def params(self, tasks: pa.Table, reason: np.ndarray, start: int = 0, stop: int | None = None) -> pa.Table:
        """The parameter table of ``render_injection_batch`` for task rows ``start`` to ``stop``
        (all by default; ``reason``: :func:`host_failures`' of every row)."""
        stop = tasks.num_rows if stop is None else stop
        rows, t = slice(start, stop), tasks.slice(start, stop - start)
        snr, mags = self.snr[rows], flux_to_mag(self.lensed_flux[rows])
        cols = {
            "injection_id": _col(t, "injection_id", np.int64),
            "seed": _col(t, "seed", np.int64),
            "success": reason[rows] == "",
            "failure_reason": reason[rows].astype(object),
            "magnification": self.mu[rows],
            "arc_snr": snr[:, 1],
        }
        for b, name in enumerate(BANDS):
            cols[f"arc_snr_{name}"] = snr[:, b]
        for b, name in enumerate(BANDS):
            cols[f"lensed_mag_{name}"] = mags[:, b]
        for b, name in enumerate(BANDS):
            cols[f"psf_fwhm_{name}"] = _col(t, f"psf_fwhm_{name}")
        cols["n_refined_pixels"] = self.n_ref[rows]
        for b, name in enumerate(BANDS):
            cols[f"arc_flux_{name}"] = self.arc_flux[rows, b]
        cols["arc_pixels_finite"] = self.arc_finite[rows]
        return pa.table(cols)


def injected_stamps(host: np.ndarray, arc: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """host + arc (float32) where ``ok``, the host unchanged elsewhere."""
    injected = (host.astype(np.float32) + arc).astype(np.float32)
    injected[~ok] = host[~ok]
    return injected


def render_injection_batch(
    tasks: pa.Table,
    host_images: np.ndarray,
    host_invvar: np.ndarray,
    device="cpu",
    config: InjectionConfig = InjectionConfig(),
    progress: Callable[[int, int], None] | None = None,
):
    """Inject the arcs of ``tasks`` (row i) into ``host_images[i]``; ``progress(done, total)``
    follows each chunk of ``config.render_chunk`` rendered injections; the lens is the composition
    the plan records (``plan_lens_profiles``), whose parameters' columns the tasks carry.

    host_images, host_invvar: (N, 3, S, S) float32 [nmgy/pixel], [1/nmgy^2]. Returns
    (injected, arc, params): injected = host + arc and arc (N, 3, S, S) float32 [nmgy/pixel]; params
    a pa.Table with injection_id, seed, success, failure_reason, magnification (extended mu),
    arc_snr (r band) and arc_snr_g/r/z, lensed_mag_g/r/z (AB, unconvolved lensed flux in the
    stamp), psf_fwhm_g/r/z [arcsec] used, n_refined_pixels, arc_flux_g/r/z [nmgy] (the rendered
    arc's pixels summed; NaN where not rendered) and arc_pixels_finite. Failed rows (non-finite host pixels,
    no positive invvar in r) keep the host unchanged and a zero arc. The paired control is the host.
    """
    img, iv, reason = host_failures(tasks, host_images, host_invvar, config)
    ok = reason == ""
    arc = np.zeros_like(img, dtype=np.float32)
    tally = RenderTally(tasks.num_rows)
    rows = np.flatnonzero(ok)
    done = 0
    for chunk in render_arc_chunks(tasks, iv, rows, device, config):
        arc[chunk.rows] = chunk.arc
        tally.add(chunk)
        done += len(chunk.rows)
        if progress is not None:
            progress(done, len(rows))
    return injected_stamps(img, arc, ok), arc, tally.params(tasks, reason)
