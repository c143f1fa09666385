"""Benchmark: the injection bank rendered and scored in one streamed pass
(``evaluation.injection_scoring.render_and_score``: no stamp stored; the ``injections`` asset's
pass) against the stored path it replaced, in the same run: ``render_injection_batch``, the bank's
rows with their injected stamps and controls written to a lake partition (``Lake.write_table``:
zstd Parquet), read back and scored by ``score_batches`` (injections, then controls). A third
pass, the stored path with the lake left out (its rows scored from memory), measures what storing
costs: ``in_memory_over_stored`` is about the most a pass that stores nothing can gain.

The passes score with the profile's lens finder (untrained weights: the cost is the
architecture's): ``demo``, one strided ResNet on the 49 px crop; ``full``, the stacked ensemble of
its two members; each member's logit averaged over the profile's dihedral views. The tasks are
drawn from the bank's priors onto synthetic 101 px hosts (``bench_training.synthetic_hosts``), a
batch of ``--n`` injections on ``--hosts`` hosts (each host's control scored once, as every pass does).
Neither side times what both do alike (loading the host stamps, the bank's audits, committing the
score rows). After a warm-up of the fused and stored passes on a few tasks, each pass runs ``--repeat`` times,
alternating, and the best of each is kept; the score rows of the three are checked to be the same
bytes. ``--threads 1`` under ``taskset -c 0`` gives the per-core ratio.

    python -m benchmarks.bench_injection_scoring [--n 64] [--hosts 16] [--profile demo] [--threads 1]
                                                 [--repeat 1] [--device cpu|cuda]

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import torch

from benchmarks.bench_training import synthetic_hosts
from darkhaloscope.constants import BANDS
from darkhaloscope.evaluation.injection_scoring import render_and_score
from darkhaloscope.evaluation.scoring import INJECTION_META, score_batches
from darkhaloscope.lensing.bank import (
    InjectionConfig,
    _lens_source_columns,
    bank_table,
    host_psf_fwhm,
    render_injection_batch,
)
from darkhaloscope.lensing.priors import draw_system_parameters
from darkhaloscope.training.checkpoint import CheckpointSpec
from darkhaloscope.training.models import StackedEnsemble, build_model, count_parameters
from darkhaloscope.training.profiles import training_profile

#: A writer of one bank partition: (bank rows) -> the dataset the score asset reads them back from.
Writer = Callable[[pa.Table], ds.Dataset]


def bench_bank(n: int, n_hosts: int, seed: int = 0) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    """(tasks, host stamps (n, 3, 101, 101) [nmgy/pixel], host invvar [1/nmgy^2]) of ``n`` injections
    drawn from the bank's priors onto ``n_hosts`` synthetic hosts dealt round-robin. The tasks carry
    the columns the render and the score rows read; their σ_v is left NaN and no task is skipped for
    it (σ_v needs astropy's distances, which a bare GPU host lacks, and the render does not read it)."""
    hosts, images, invvar = synthetic_hosts(n_hosts, seed=seed)
    seeds = np.arange(n, dtype=np.int64) * 7919 + 1_000_003 * (seed + 1)
    params = draw_system_parameters(seeds, InjectionConfig().priors, extra=("theta_e_arcsec", "z_l"))
    h = np.arange(n) % n_hosts
    host = {c: hosts.column(c).to_numpy()[h] for c in hosts.column_names if c not in ("split", "type")}
    psf, _ = host_psf_fwhm(np.stack([host[f"psfsize_{b}"] for b in BANDS], axis=1))
    theta_e, everyone = params["theta_e_arcsec"], np.ones(n, bool)
    cols = {
        "injection_id": np.arange(n, dtype=np.int64),
        "seed": seeds,
        "host_object_id": host["object_id"],
        "theta_e_arcsec": theta_e,
        "z_l": params["z_l"],
        "z_s": params["z_s"],
        "sigma_v_kms": np.full(n, np.nan),
        **_lens_source_columns(params, theta_e, everyone, host["dx_pix"], host["dy_pix"]),
        **{f"psf_fwhm_{b}": psf[:, i] for i, b in enumerate(BANDS)},
        **{f"psfdepth_{b}": host[f"psfdepth_{b}"] for b in BANDS},
        "lens_mag_z": np.full(n, 18.0),
        "host_z": params["z_l"],
        "z_l_bin": params["z_l"],
        "host_z_source": np.full(n, "phot", dtype=object),
        "sigma_v_source": np.full(n, "relation", dtype=object),
    }
    return pa.table(cols), images[h], invvar[h]


def profile_finder(profile: str, models: dict | None = None) -> tuple[torch.nn.Module, CheckpointSpec]:
    """(lens finder, its checkpoint spec) of a training profile: its one member, or the stacked
    ensemble of its members; ``models`` (architecture -> trained network) gives the members' weights
    (default: seeded untrained ones)."""
    prof = training_profile(profile)
    in_ch = prof.preprocess.out_channels(3)
    archs = tuple(m.arch for m in prof.members)
    torch.manual_seed(0)
    if len(archs) == 1:
        model = models[archs[0]] if models and archs[0] in models else build_model(archs[0], in_ch)
        arch, args = archs[0], {}
    else:
        model = StackedEnsemble(in_ch, archs, prof.ensemble_hidden)
        for member, arch in zip(model.members, archs):
            if models and arch in models:
                member.load_state_dict(models[arch].state_dict())
        arch, args = "stacked_ensemble", {"members": list(archs), "hidden": prof.ensemble_hidden}
    spec = CheckpointSpec(
        name=f"bench_{profile}",
        architecture=arch,
        in_channels=in_ch,
        preprocess=prof.preprocess,
        param_count=count_parameters(model),
        param_shapes={},
        weights_file="-",
        weights_sha256="-",
        dihedral_views=prof.members[0].dihedral_views,
        arch_args=args,
    )
    return model.eval(), spec


def lake_writer(folder: str) -> Writer:
    """Bank partitions with their stamps committed to a lake under ``folder`` (``Lake.write_table``)."""
    from lake_platform.lake import Lake

    lake = Lake(folder)

    def write(bank: pa.Table) -> ds.Dataset:
        lake.write_table("injection", "injection_bank", bank, partition={"batch": "batch-00000"})
        return lake.table("injection", "injection_bank").dataset([{"batch": "batch-00000"}])

    return write


def parquet_writer(folder: str) -> Writer:
    """Bank partitions written as the lake writes them (zstd Parquet, row groups of 64,000), for a
    host without the lake's packages (``gpu_check``)."""

    def write(bank: pa.Table) -> ds.Dataset:
        path = os.path.join(folder, "bank.parquet")
        pq.write_table(bank, path, compression="zstd", row_group_size=64_000, use_dictionary=False)
        return ds.dataset(path)

    return write


def stored_pass(tasks, images, invvar, model, spec, device: str, write: Writer) -> pa.Table:
    """Score rows by the stored path: render the batch, store the bank, read it back and score it."""
    injected, _, params = render_injection_batch(tasks, images, invvar, device=device)
    bank = write(bank_table(tasks, params, injected, images))
    return pa.Table.from_batches(
        [
            b
            for column, kind in (("image", "injection"), ("control", "control"))
            for b in score_batches(bank, INJECTION_META, column, kind, model, spec, device)
        ]
    )


def in_memory_pass(tasks, images, invvar, model, spec, device: str) -> pa.Table:
    """Score rows by the stored path with the lake left out (the bank's rows scored from memory):
    rendering and scoring every stamp is all that is left, so ``stored / in_memory`` is about the
    most any pass that stores no stamp can gain."""
    return stored_pass(tasks, images, invvar, model, spec, device, ds.dataset)


def fused_pass(tasks, images, invvar, model, spec, device: str) -> pa.Table:
    """Score rows by the fused pass."""
    return pa.Table.from_batches(
        [b for chunk in render_and_score(tasks, images, invvar, model, spec, device=device) for b in chunk.scores]
    )


def same_rows(a: pa.Table, b: pa.Table) -> bool:
    """Whether two score tables hold the same rows (same bytes, NaN included), whatever their order."""

    def key(t: pa.Table) -> bytes:
        t = t.sort_by([("kind", "ascending"), ("injection_id", "ascending")]).combine_chunks()
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, t.schema) as w:
            w.write_table(t)
        return sink.getvalue().to_pybytes()

    return key(a) == key(b)


def _sync(device: str) -> None:
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def compare(tasks, images, invvar, model, spec, device: str, write: Writer, repeat: int) -> dict:
    """Best-of-``repeat`` rates of the three passes on the batch, alternating, after a warm-up of
    the fused and stored ones."""
    few = min(8, tasks.num_rows)
    fused_pass(tasks.slice(0, few), images[:few], invvar[:few], model, spec, device)
    stored_pass(tasks.slice(0, few), images[:few], invvar[:few], model, spec, device, write)
    passes = {
        "stored": lambda: stored_pass(tasks, images, invvar, model, spec, device, write),
        "in_memory": lambda: in_memory_pass(tasks, images, invvar, model, spec, device),
        "fused": lambda: fused_pass(tasks, images, invvar, model, spec, device),
    }
    best = dict.fromkeys(passes, np.inf)
    out = {}
    for _ in range(repeat):
        for name, run in passes.items():
            _sync(device)
            t0 = time.perf_counter()
            out[name] = run()
            _sync(device)
            best[name] = min(best[name], time.perf_counter() - t0)
    n = tasks.num_rows
    return {
        "injections": n,
        "stored_injections_per_s": round(n / best["stored"], 2),
        "fused_injections_per_s": round(n / best["fused"], 2),
        "in_memory_injections_per_s": round(n / best["in_memory"], 2),
        "fused_over_stored": round(best["stored"] / best["fused"], 3),
        "in_memory_over_stored": round(best["stored"] / best["in_memory"], 3),
        "same_rows": same_rows(out["stored"], out["fused"]) and same_rows(out["stored"], out["in_memory"]),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=64, help="injections in the batch")
    ap.add_argument("--hosts", type=int, default=16, help="hosts they are dealt onto")
    ap.add_argument("--profile", choices=("demo", "full"), default="demo")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tasks, images, invvar = bench_bank(args.n, args.hosts)
    model, spec = profile_finder(args.profile)
    with tempfile.TemporaryDirectory(prefix="dhs_bench_injection_scoring_") as tmp:
        res = compare(tasks, images, invvar, model, spec, args.device, lake_writer(tmp), args.repeat)
        stored_bytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(tmp) for f in fs)
    print(
        json.dumps(
            {
                "benchmark": "injection_scoring",
                "device": args.device,
                "threads": args.threads,
                "profile": args.profile,
                "hosts": args.hosts,
                "repeat": args.repeat,
                "load_average_1min": round(os.getloadavg()[0], 2),
                **res,
                "stored_bytes_per_injection": round(stored_bytes / max(res["injections"], 1)),
            }
        )
    )


if __name__ == "__main__":
    main()
