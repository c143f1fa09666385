"""Injections rendered on the fly for training: fresh arcs every epoch, on the training device.

The training set stores hosts (stamps, inverse variance and the host columns the engine reads),
not rendered injections. Every epoch draws new systems from the training-profile prior (θ_E and
z_l drawn, not gridded), new hosts and new source positions, so the network never sees the same
arc twice and the number of distinct arcs is limited by compute, not by a stored table.

Determinism: try j of slot (host, i) of a stream keyed ``key`` (``("train", seed, epoch)`` or
``("val",)``) has seed ``stable_hash64(salt, *key, host object id, i, j)``; every prior draw and
its clumps follow from that seed alone (``darkhaloscope.lensing.priors``), and tries are rendered
in chunks of ``render_chunk`` slots (part of the spec: the batched FFTs' round-off depends on the
chunk, nothing else does). So a stream is a pure function of (hosts, spec, key), byte for byte.

Hosts and acceptance: every host receives ``injections_per_host`` arcs per epoch (so each host is
also the paired control of its own injections, as a negative of the same epoch). A slot's arc is
the first of its tries whose r-band matched-filter S/N against that host's noise (``render.arc_snr``)
reaches the slot's threshold: ``min_arc_snr``, or ``faint_min_arc_snr`` for the share
``faint_fraction`` of the training slots (:func:`slot_thresholds`). One threshold trades the bright
arcs against the faint ones: a lower one ranks faint injections higher and costs completeness on
the bright arcs (BENCHMARKS.md, *The stream's S/N threshold sets how faint arcs rank*); half the
slots at each keeps both (BENCHMARKS.md, *Half the training arcs faint*). Re-drawing per host keeps
shallow and deep hosts equally represented among the positives; the selection function measures
completeness at every S/N.

Speed: arcs are rendered only in the central ``window`` x ``window`` pixels (an arc of θ_E = 3″
with β ≤ 0.4 θ_E and its PSF wings loses < 0.1 % of its flux outside 65 px; tested), in chunks of
``render_chunk`` systems on the training device.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import pyarrow as pa
import torch

from ..constants import BANDS
from ..errors import InputError
from ..seeding import stable_hash64, torch_generator_for
from .bank import HOST_COLUMNS, InjectionConfig, _build_tasks, _col, task_batches
from .nuisance import DEFAULT_NUISANCE, arc_psf_anisotropy
from .priors import Prior, PriorRegistry, draw_system_parameters
from .render import RenderConfig, add_poisson_noise, arc_snr, render_lensed_sources
from .source_models import DEFAULT_SOURCE_MODEL

#: Tries per injection slot before it keeps its brightest. On a typical host most tries pass the S/N
#: cut and the physical cuts (the tries per accepted arc: BENCHMARKS.md, summary table, row *training
#: on the fly*), so this many failures in a row mark a very shallow host.
MAX_TRIES_PER_SLOT = 16


@dataclass(frozen=True)
class StreamSpec:
    """What defines the on-the-fly injection stream; stored with the training set (JSON).

    injections_per_host: injections into every training host per epoch (each host is also a
    negative of the epoch: the paired control of its injections); val_injections_per_host: the
    same for the fixed validation set on val hosts; min_arc_snr: acceptance threshold on the r-band
    arc S/N (matched filter); faint_fraction, faint_min_arc_snr: the share of training slots
    (chosen by a stable hash of the stream key, host and slot) accepted at the lower threshold
    ``faint_min_arc_snr`` instead (0: none; validation never takes it, :attr:`validation`);
    window: side [pixels, odd] of the central window the arcs are rendered in; render_chunk:
    candidates per render call (memory bound; it changes the arcs by float round-off only);
    injection: priors, render numerics (its n_pix is replaced by ``window``), sigma_v range [km/s],
    cosmology, Poisson gain, the seed salt, the source model and the nuisance model.
    """

    injections_per_host: int = 1
    val_injections_per_host: int = 2
    min_arc_snr: float = 10.0
    faint_fraction: float = 0.0
    faint_min_arc_snr: float = 3.0
    window: int = 65
    render_chunk: int = 256
    injection: InjectionConfig = field(default_factory=lambda: InjectionConfig(salt="injection_stream/v1"))

    def __post_init__(self) -> None:
        for name in ("injections_per_host", "val_injections_per_host", "render_chunk"):
            if int(getattr(self, name)) < 1:
                raise InputError(f"StreamSpec.{name} must be >= 1, got {getattr(self, name)}")
        if self.window < 3 or self.window % 2 == 0:
            raise InputError(f"StreamSpec.window must be odd and >= 3 pixels, got {self.window}")
        for name in ("min_arc_snr", "faint_min_arc_snr"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) >= 0):
                raise InputError(f"StreamSpec.{name} must be a finite number >= 0, got {getattr(self, name)}")
        if not 0.0 <= self.faint_fraction <= 1.0:  # NaN fails too
            raise InputError(f"StreamSpec.faint_fraction must be a number in [0, 1], got {self.faint_fraction}")

    @property
    def validation(self) -> "StreamSpec":
        """The spec of the fixed validation injections: every slot at ``min_arc_snr``. The faint
        slots are a training curriculum; validation keeps one threshold, so that the epoch chosen,
        the calibration and the validation AUROC are measured on the same arcs whatever the mix."""
        return replace(self, faint_fraction=0.0)

    @property
    def config(self) -> InjectionConfig:
        """The injection config the stream renders with: every host eligible, arcs in the window."""
        render = RenderConfig(**{**asdict(self.injection.render), "n_pix": self.window})
        return InjectionConfig(
            priors=self.injection.priors,
            render=render,
            sigma_v_range=self.injection.sigma_v_range,
            cosmology=self.injection.cosmology,
            poisson_gain=self.injection.poisson_gain,
            salt=self.injection.salt,
            host_splits=None,
            source_model=self.injection.source_model,
            nuisance=self.injection.nuisance,
        )

    def to_dict(self) -> dict:
        inj = self.injection
        return {
            "injections_per_host": int(self.injections_per_host),
            "val_injections_per_host": int(self.val_injections_per_host),
            "min_arc_snr": float(self.min_arc_snr),
            "faint_fraction": float(self.faint_fraction),
            "faint_min_arc_snr": float(self.faint_min_arc_snr),
            "window": int(self.window),
            "render_chunk": int(self.render_chunk),
            "priors": {k: [p.kind, p.lo, p.hi, p.mu, p.sigma] for k, p in sorted(inj.priors.priors.items())},
            "clump_prob": inj.priors.clump_prob,
            "n_clumps": list(inj.priors.n_clumps),
            "render": {k: v for k, v in asdict(inj.render).items() if k != "n_pix"},
            "sigma_v_range": list(inj.sigma_v_range),
            "cosmology": inj.cosmology,
            "poisson_gain": inj.poisson_gain,
            "salt": inj.salt,
            "source_model": inj.source_model,
            "nuisance": inj.nuisance,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "StreamSpec":
        known = {
            "injections_per_host",
            "val_injections_per_host",
            "min_arc_snr",
            "faint_fraction",
            "faint_min_arc_snr",
            "window",
            "render_chunk",
            "priors",
            "clump_prob",
            "n_clumps",
            "render",
            "sigma_v_range",
            "cosmology",
            "poisson_gain",
            "salt",
            "source_model",
            "nuisance",
        }
        if not isinstance(d, dict) or set(d) - known:
            raise InputError(
                f"injection stream spec has unknown fields {sorted(set(d) - known) if isinstance(d, dict) else d!r}"
            )
        try:
            priors = PriorRegistry(
                priors={k: Prior(*v) for k, v in d["priors"].items()},
                clump_prob=float(d["clump_prob"]),
                n_clumps=tuple(int(v) for v in d["n_clumps"]),
            )
            inj = InjectionConfig(
                priors=priors,
                render=RenderConfig(**d["render"]),
                sigma_v_range=tuple(d["sigma_v_range"]),
                cosmology=d["cosmology"],
                poisson_gain=d["poisson_gain"],
                salt=d["salt"],
                # streams recorded before the source and nuisance models existed used the defaults
                source_model=d.get("source_model", DEFAULT_SOURCE_MODEL),
                nuisance=d.get("nuisance", DEFAULT_NUISANCE),
            )
            return cls(
                injections_per_host=int(d["injections_per_host"]),
                val_injections_per_host=int(d["val_injections_per_host"]),
                min_arc_snr=float(d["min_arc_snr"]),
                window=int(d["window"]),
                render_chunk=int(d["render_chunk"]),
                # streams recorded before the faint slots existed accept every slot at min_arc_snr
                faint_fraction=float(d.get("faint_fraction", 0.0)),
                faint_min_arc_snr=float(d.get("faint_min_arc_snr", cls.faint_min_arc_snr)),
                injection=inj,
            )
        except (KeyError, TypeError) as exc:
            raise InputError(f"injection stream spec is incomplete or malformed: {exc!r}") from exc


@dataclass
class StreamDraw:
    """Accepted injections of one stream key, row k for injection k.

    host_row: (n,) row of the hosts table; arcs: (n, 3, W, W) float32 PSF-convolved arcs
    [nmgy/pixel] centred on the stamp centre; arc_snr: (n,) r-band S/N; theta_e_arcsec: (n,);
    seed: (n,) int64 system seeds; candidate: (n,) int64 the try j that each slot took;
    n_below_min: slots that kept their brightest try below their threshold (:func:`slot_thresholds`).
    """

    host_row: np.ndarray
    arcs: np.ndarray
    arc_snr: np.ndarray
    theta_e_arcsec: np.ndarray
    seed: np.ndarray
    candidate: np.ndarray
    n_below_min: int = 0

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
        raise InputError(
            f"injection hosts {_col(hosts, 'object_id', np.int64)[bad][:5].tolist()} have no r-band PSF size"
        )


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


def render_arcs(
    lens, src, psf_fwhm: np.ndarray, invvar_window: np.ndarray, seeds: np.ndarray, cfg: InjectionConfig, device
) -> tuple[np.ndarray, np.ndarray]:
    """(arcs (n, 3, W, W) float32 [nmgy/pixel], r-band arc S/N (n,)) of n systems in the central
    W = ``cfg.render.n_pix`` pixels, the stream's render of one chunk on ``device``: lens and source
    batches on ``device``, PSF FWHM (n, 3) [arcsec], the hosts' inverse variance in that window
    (n, 3, W, W) [1/nmgy²], system seeds (n,) (the Poisson noise's, when ``cfg.poisson_gain`` is set,
    and the PSF anisotropy's under ``cfg.nuisance``)."""
    psf = torch.as_tensor(psf_fwhm, dtype=torch.float32, device=device)
    e1, e2 = arc_psf_anisotropy(cfg.nuisance, seeds, device, torch.float32)
    arc = render_lensed_sources(lens, src, psf, cfg.render, e1, e2).arc
    iv = torch.as_tensor(np.ascontiguousarray(invvar_window), dtype=torch.float32, device=device)
    snr = arc_snr(arc, iv)[:, 1]
    if cfg.poisson_gain is not None:
        gens = [torch_generator_for("poisson", int(s), device=str(arc.device)) for s in seeds]
        arc = add_poisson_noise(arc, cfg.poisson_gain, gens)
    return arc.cpu().numpy().astype(np.float32), snr.double().cpu().numpy()


def _render_chunk(
    tasks: pa.Table, invvar_window: np.ndarray, cfg: InjectionConfig, device
) -> tuple[np.ndarray, np.ndarray]:
    """(arcs (n, 3, W, W) float32, r-band arc S/N (n,)) of task rows against their hosts' noise."""
    lens, src = task_batches(tasks, device, torch.float32, cfg.priors, cfg.lens_profiles, cfg.source_model)
    psf = np.stack([_col(tasks, f"psf_fwhm_{b}") for b in BANDS], axis=1)
    return render_arcs(lens, src, psf, invvar_window, _col(tasks, "seed", np.int64), cfg, device)


def _slot_hashes(prefix: tuple, host_id: np.ndarray, slot: np.ndarray, *suffix) -> np.ndarray:
    """(n,) uint64 ``stable_hash64(*prefix, host object id, slot index, *suffix)`` of each slot."""
    return np.array([stable_hash64(*prefix, int(h), int(i), *suffix) for h, i in zip(host_id, slot)], dtype=np.uint64)


def _slot_seeds(spec: StreamSpec, key: tuple, host_id: np.ndarray, slot: np.ndarray, j: int) -> np.ndarray:
    """Seeds (n,) int64 of try ``j`` of slots (host object id, slot index) of the stream keyed ``key``."""
    return (_slot_hashes((spec.injection.salt, *key), host_id, slot, j) & np.uint64(0x7FFF_FFFF_FFFF_FFFF)).astype(
        np.int64
    )


def slot_thresholds(spec: StreamSpec, key: tuple, host_id: np.ndarray, slot: np.ndarray) -> np.ndarray:
    """(n,) r-band S/N each slot (host object id, slot index) of the stream keyed ``key`` must reach:
    ``faint_min_arc_snr`` for a stable-hash share ``faint_fraction`` of the slots, else ``min_arc_snr``."""
    threshold = np.full(host_id.shape, float(spec.min_arc_snr))
    if spec.faint_fraction > 0:
        u = _slot_hashes((spec.injection.salt, "faint", *key), host_id, slot) / np.float64(2**64)
        threshold[u < spec.faint_fraction] = float(spec.faint_min_arc_snr)
    return threshold


def _try_slots(
    hosts: pa.Table,
    iv_win: np.ndarray,
    spec: StreamSpec,
    key: tuple,
    slot_host: np.ndarray,
    slot_id: np.ndarray,
    slot_index: np.ndarray,
    j: int,
    device,
) -> tuple:
    """Try ``j`` of the given slots (their hosts' rows and object ids, and slot indices): (rendered (n,)
    bool, arcs, S/N, θ_E, seeds) (arcs of unrendered candidates, which fail the physical cuts, are zero
    with S/N -inf)."""
    cfg = spec.config
    seeds = _slot_seeds(spec, key, slot_id, slot_index, j)
    params = draw_system_parameters(seeds, cfg.priors, extra=("theta_e_arcsec", "z_l"))
    m = seeds.size
    tasks, reason = _build_tasks(
        hosts,
        params["theta_e_arcsec"],
        params["z_l"],
        seeds,
        np.zeros(m, np.int64),
        np.full(m, j, np.int64),
        np.full(m, -1),
        "training",
        cfg,
        params,
        host_row=slot_host,
    )
    kept = reason == ""
    arcs = np.zeros((m, len(BANDS), spec.window, spec.window), np.float32)
    snr = np.full(m, -np.inf)
    if kept.any():
        arcs[kept], snr[kept] = _render_chunk(tasks, iv_win[slot_host[kept]], cfg, device)
    return kept, arcs, snr, params["theta_e_arcsec"], seeds


def draw_injections(
    hosts: pa.Table, host_invvar: np.ndarray, spec: StreamSpec, key: tuple, per_host: int, device="cpu"
) -> StreamDraw:
    """``per_host`` injections into every host of ``hosts`` for the stream keyed ``key``.

    hosts: table with HOST_COLUMNS, one row per host stamp; host_invvar: (N, 3, S, S) [1/nmgy^2].
    Slot (host, i) takes the first of its tries j = 0, 1, ... (seed ``stable_hash64(salt, *key,
    host object id, i, j)``) that passes the physical cuts with an arc S/N of at least the slot's
    threshold (:func:`slot_thresholds`) against that host's noise: every host gets its arcs,
    shallow hosts as often as deep ones (host depth cannot become a label). A slot with no such try
    among MAX_TRIES_PER_SLOT keeps its brightest (counted in ``StreamDraw.n_below_min``).
    Tries are rendered in chunks of ``spec.render_chunk`` slots. Row k of the draw is slot k in
    host-major order.
    """
    if per_host < 1:
        raise InputError(f"injections per host must be >= 1, got {per_host}")
    validate_stream_hosts(hosts, host_invvar)
    iv_win = window_of(host_invvar, spec.window)
    n = hosts.num_rows * per_host
    slot_host = np.repeat(np.arange(hosts.num_rows, dtype=np.int64), per_host)
    slot_index = np.tile(np.arange(per_host, dtype=np.int64), hosts.num_rows)
    arcs = np.zeros((n, len(BANDS), spec.window, spec.window), np.float32)
    snr, theta_e, seed, tries = np.full(n, -np.inf), np.full(n, np.nan), np.zeros(n, np.int64), np.zeros(n, np.int64)
    slot_id = _col(hosts, "object_id", np.int64)[slot_host]
    threshold = slot_thresholds(spec, key, slot_id, slot_index)
    pending = np.arange(n)
    for j in range(MAX_TRIES_PER_SLOT):
        for c in range(0, pending.size, spec.render_chunk):
            sl = pending[c : c + spec.render_chunk]
            kept, a, s, te, sd = _try_slots(
                hosts, iv_win, spec, key, slot_host[sl], slot_id[sl], slot_index[sl], j, device
            )
            better = kept & (s > snr[sl])  # the first accepted try, or the brightest so far
            upd = sl[better]
            arcs[upd], snr[upd], theta_e[upd], seed[upd], tries[upd] = a[better], s[better], te[better], sd[better], j
        pending = pending[snr[pending] < threshold[pending]]
        if not pending.size:
            break
    if np.any(~np.isfinite(snr)):
        bad = slot_id[~np.isfinite(snr)]
        raise InputError(
            f"injection stream {key}: hosts {np.unique(bad)[:5].tolist()} got no physical system in "
            f"{MAX_TRIES_PER_SLOT} tries; check the priors and sigma_v_range"
        )
    return StreamDraw(
        host_row=slot_host,
        arcs=arcs,
        arc_snr=snr,
        theta_e_arcsec=theta_e,
        seed=seed,
        candidate=tries,
        n_below_min=int(pending.size),
    )
