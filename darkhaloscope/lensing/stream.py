"""Injections rendered on the fly for training: fresh arcs every epoch, on the training device.

The training set stores hosts (stamps, inverse variance and the host columns the engine reads),
not rendered injections. Every epoch draws new systems from the training-profile prior (θ_E and
z_l drawn, not gridded), new hosts and new source positions, so the network never sees the same
arc twice and the number of distinct arcs is limited by compute, not by a stored table.

Determinism: candidate j of a stream keyed ``key`` (e.g. ``("train", seed, epoch)`` or
``("val",)``) has seed ``stable_hash64(salt, *key, j)``; its host, every prior draw and its clumps
follow from that seed alone (``darkhaloscope.lensing.priors``), and candidates are rendered in
chunks of consecutive j (``render_chunk``, part of the spec: the batched FFTs' round-off depends on
the chunk, nothing else does). So a stream is a pure function of (hosts, spec, key), byte for byte.

Acceptance: a candidate is kept when its arc's integrated r-band S/N against the host's noise
(``render.arc_snr``) reaches ``min_arc_snr``: positives whose arc is invisible teach the network
noise (and a finder of invisible arcs is a shortcut finder); the selection function measures
completeness at every S/N afterwards. The first ``n`` accepted candidates in j order form the draw.

Speed: arcs are rendered only in the central ``window`` x ``window`` pixels (an arc of θ_E = 3″
with β ≤ 0.4 θ_E and its PSF wings loses < 0.1 % of its flux outside 65 px; tested), without the
unlensed render that μ needs, in chunks of ``render_chunk`` systems on the training device.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
import pyarrow as pa
import torch

from ..constants import BANDS
from ..errors import InputError
from ..seeding import stable_hash64, torch_generator_for, unit_hash_array
from .bank import HOST_COLUMNS, InjectionConfig, _build_tasks, _col, task_batches
from .priors import PriorRegistry, Prior, draw_system_parameters
from .render import RenderConfig, add_poisson_noise, arc_snr, render_lensed_sources

#: Candidates examined per accepted injection before a stream gives up (the prior, the S/N cut
#: and the physical cuts together accept far fewer than 1 in 64 only when misconfigured).
MAX_CANDIDATES_PER_INJECTION = 64


@dataclass(frozen=True)
class StreamSpec:
    """What defines the on-the-fly injection stream; stored with the training set (JSON).

    injections_per_epoch: accepted injections per training epoch (each with its paired control);
    val_injections: accepted injections of the fixed validation set (val hosts); min_arc_snr:
    acceptance threshold on the r-band arc S/N; window: side [pixels, odd] of the central window
    the arcs are rendered in; render_chunk: candidates per render call (memory bound; it changes
    the arcs by float round-off only); injection: priors, render numerics (its n_pix is replaced by ``window``),
    sigma_v range [km/s], cosmology, Poisson gain and the seed salt.
    """

    injections_per_epoch: int = 1000
    val_injections: int = 800
    min_arc_snr: float = 5.0
    window: int = 65
    render_chunk: int = 256
    injection: InjectionConfig = field(default_factory=lambda: InjectionConfig(salt="injection_stream/v1"))

    def __post_init__(self) -> None:
        for name in ("injections_per_epoch", "val_injections", "render_chunk"):
            if int(getattr(self, name)) < 1:
                raise InputError(f"StreamSpec.{name} must be >= 1, got {getattr(self, name)}")
        if self.window < 3 or self.window % 2 == 0:
            raise InputError(f"StreamSpec.window must be odd and >= 3 pixels, got {self.window}")
        if not (math.isfinite(self.min_arc_snr) and self.min_arc_snr >= 0):
            raise InputError(f"StreamSpec.min_arc_snr must be a finite number >= 0, got {self.min_arc_snr}")

    @property
    def config(self) -> InjectionConfig:
        """The injection config the stream renders with: every host eligible, arcs in the window."""
        render = RenderConfig(**{**asdict(self.injection.render), "n_pix": self.window})
        return InjectionConfig(priors=self.injection.priors, render=render, sigma_v_range=self.injection.sigma_v_range,
                               cosmology=self.injection.cosmology, poisson_gain=self.injection.poisson_gain,
                               salt=self.injection.salt, host_splits=None)

    def to_dict(self) -> dict:
        inj = self.injection
        return {
            "injections_per_epoch": int(self.injections_per_epoch), "val_injections": int(self.val_injections),
            "min_arc_snr": float(self.min_arc_snr), "window": int(self.window), "render_chunk": int(self.render_chunk),
            "priors": {k: [p.kind, p.lo, p.hi, p.mu, p.sigma] for k, p in sorted(inj.priors.priors.items())},
            "clump_prob": inj.priors.clump_prob, "n_clumps": list(inj.priors.n_clumps),
            "render": {k: v for k, v in asdict(inj.render).items() if k != "n_pix"},
            "sigma_v_range": list(inj.sigma_v_range), "cosmology": inj.cosmology, "poisson_gain": inj.poisson_gain,
            "salt": inj.salt,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "StreamSpec":
        known = {"injections_per_epoch", "val_injections", "min_arc_snr", "window", "render_chunk", "priors", "clump_prob",
                 "n_clumps", "render", "sigma_v_range", "cosmology", "poisson_gain", "salt"}
        if not isinstance(d, dict) or set(d) - known:
            raise InputError(f"injection stream spec has unknown fields {sorted(set(d) - known) if isinstance(d, dict) else d!r}")
        try:
            priors = PriorRegistry(priors={k: Prior(*v) for k, v in d["priors"].items()}, clump_prob=float(d["clump_prob"]),
                                   n_clumps=tuple(int(v) for v in d["n_clumps"]))
            inj = InjectionConfig(priors=priors, render=RenderConfig(**d["render"]), sigma_v_range=tuple(d["sigma_v_range"]),
                                  cosmology=d["cosmology"], poisson_gain=d["poisson_gain"], salt=d["salt"])
            return cls(injections_per_epoch=int(d["injections_per_epoch"]), val_injections=int(d["val_injections"]),
                       min_arc_snr=float(d["min_arc_snr"]), window=int(d["window"]), render_chunk=int(d["render_chunk"]),
                       injection=inj)
        except (KeyError, TypeError) as exc:
            raise InputError(f"injection stream spec is incomplete or malformed: {exc!r}") from exc


@dataclass
class StreamDraw:
    """Accepted injections of one stream key, row k for injection k.

    host_row: (n,) row of the hosts table; arcs: (n, 3, W, W) float32 PSF-convolved arcs
    [nmgy/pixel] centred on the stamp centre; arc_snr: (n,) r-band S/N; theta_e_arcsec: (n,);
    seed: (n,) int64 system seeds; candidate: (n,) int64 index j of each in the stream.
    """

    host_row: np.ndarray
    arcs: np.ndarray
    arc_snr: np.ndarray
    theta_e_arcsec: np.ndarray
    seed: np.ndarray
    candidate: np.ndarray

    def __len__(self) -> int:
        return int(self.host_row.shape[0])


def validate_stream_hosts(hosts: pa.Table, host_invvar: np.ndarray) -> None:
    """Raise InputError unless ``hosts`` has the engine's columns, one invvar stamp per row and a
    positive r-band PSF size everywhere (hosts without one cannot be injected into)."""
    missing = [c for c in HOST_COLUMNS if c not in hosts.column_names]
    if missing:
        raise InputError(f"injection hosts lack columns {missing}")
    if hosts.num_rows == 0:
        raise InputError("no injection hosts: the stream needs at least one host stamp")
    if host_invvar.ndim != 4 or host_invvar.shape[0] != hosts.num_rows or host_invvar.shape[1] != len(BANDS):
        raise InputError(f"host invvar has shape {host_invvar.shape}, expected ({hosts.num_rows}, 3, H, W)")
    psf_r = _col(hosts, "psfsize_r")
    bad = ~(np.isfinite(psf_r) & (psf_r > 0))
    if bad.any():
        raise InputError(f"injection hosts {_col(hosts, 'object_id', np.int64)[bad][:5].tolist()} have no r-band PSF size")


def candidate_seeds(spec: StreamSpec, key: tuple, start: int, n: int) -> np.ndarray:
    """Seeds (n,) int64 of candidates start..start+n-1 of the stream keyed ``key``."""
    salt = spec.injection.salt
    return np.array([stable_hash64(salt, *key, j) & 0x7FFF_FFFF_FFFF_FFFF for j in range(start, start + n)], dtype=np.int64)


def window_of(stamps: np.ndarray, window: int) -> np.ndarray:
    """The central ``window`` x ``window`` pixels of (N, C, S, S) stamps (a view)."""
    s = stamps.shape[-1]
    if window > s:
        raise InputError(f"render window {window} is larger than the {s}-pixel stamps")
    h = (s - window) // 2
    return stamps[..., h : h + window, h : h + window]


def add_window(stamps: np.ndarray, arcs: np.ndarray) -> np.ndarray:
    """(N, C, S, S) stamps plus (N, C, W, W) arcs in their central window: a new float32 array."""
    out = np.array(stamps, dtype=np.float32, copy=True)
    window_of(out, arcs.shape[-1])[...] += arcs
    return out


def _render_chunk(tasks: pa.Table, invvar_window: np.ndarray, cfg: InjectionConfig, device) -> tuple[np.ndarray, np.ndarray]:
    """(arcs (n, 3, W, W) float32, r-band arc S/N (n,)) of task rows against their hosts' noise."""
    lens, src = task_batches(tasks, device, torch.float32, cfg.priors)
    psf = torch.as_tensor(np.stack([_col(tasks, f"psf_fwhm_{b}") for b in BANDS], axis=1), dtype=torch.float32, device=device)
    arc = render_lensed_sources(lens, src, psf, cfg.render, with_magnification=False).arc
    if cfg.poisson_gain is not None:
        gens = [torch_generator_for("poisson", int(s), device=str(arc.device)) for s in _col(tasks, "seed", np.int64)]
        arc = add_poisson_noise(arc, cfg.poisson_gain, gens)
    iv = torch.as_tensor(np.ascontiguousarray(invvar_window), dtype=torch.float32, device=device)
    snr = arc_snr(arc, iv, cfg.render.snr_threshold)[:, 1]
    return arc.cpu().numpy().astype(np.float32), snr.double().cpu().numpy()


def draw_injections(hosts: pa.Table, host_invvar: np.ndarray, spec: StreamSpec, key: tuple, n: int,
                    device="cpu") -> StreamDraw:
    """The first ``n`` accepted injections of the stream keyed ``key`` into ``hosts``.

    hosts: table with HOST_COLUMNS, one row per host stamp; host_invvar: (N, 3, S, S) [1/nmgy^2].
    Candidates are drawn and rendered in chunks of ``spec.render_chunk`` consecutive indices; the
    first k accepted injections do not depend on ``n``. Raises InputError when the prior accepts fewer than 1 in
    MAX_CANDIDATES_PER_INJECTION candidates.
    """
    if n < 1:
        raise InputError(f"number of injections must be >= 1, got {n}")
    validate_stream_hosts(hosts, host_invvar)
    cfg = spec.config
    iv_win = window_of(host_invvar, spec.window)
    parts: list[tuple] = []
    got, start = 0, 0
    while got < n:
        if start >= MAX_CANDIDATES_PER_INJECTION * n:
            raise InputError(f"injection stream {key}: only {got} of {start} candidates have arc S/N >= "
                             f"{spec.min_arc_snr} and pass the physical cuts; loosen min_arc_snr or the priors")
        m = spec.render_chunk
        seeds = candidate_seeds(spec, key, start, m)
        host_row = np.minimum((unit_hash_array(seeds, salt="host") * hosts.num_rows).astype(np.int64), hosts.num_rows - 1)
        params = draw_system_parameters(seeds, cfg.priors, extra=("theta_e_arcsec", "z_l"))
        j = np.arange(start, start + m, dtype=np.int64)
        tasks, reason = _build_tasks(hosts, params["theta_e_arcsec"], params["z_l"], seeds, np.zeros(m, np.int64), j,
                                     np.full(m, -1), "training", cfg, params, host_row=host_row)
        kept = np.flatnonzero(reason == "")
        if kept.size:
            arcs, snr = _render_chunk(tasks, iv_win[host_row[kept]], cfg, device)
            ok = snr >= spec.min_arc_snr
            sel = kept[ok]
            parts.append((host_row[sel], arcs[ok], snr[ok], params["theta_e_arcsec"][sel], seeds[sel], j[sel]))
            got += int(ok.sum())
        start += m
    cat = [np.concatenate([p[i] for p in parts])[:n] for i in range(6)]
    return StreamDraw(host_row=cat[0], arcs=cat[1], arc_snr=cat[2], theta_e_arcsec=cat[3], seed=cat[4], candidate=cat[5])
