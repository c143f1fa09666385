"""The lens finder's ceiling with a perfectly known host: the demo recipe on arcs in pure noise.

Trains the lake's demo recipe (as ``ablate_lens_finder.py`` does) with every injection host's stamp
replaced by pure Gaussian noise of that host's σ, so the stream puts its arcs on a host that has
been subtracted exactly; the real positives are left out (their hosts cannot be). It then scores
the injection bank's arcs (injection minus its paired control: the arc alone, noise-free) in fresh
noise of the control's σ, against controls of pure noise (every σ per band as the preprocessing
measures it, ``preprocess.annulus_stats``),
and prints one JSON line: validation AUROC and best epoch, the AUROC of injections against
controls over the bank, by arc S/N and by θ_E. Against the published model's figures on the same
bank this splits the all-injection AUROC's shortfall into what the arcs themselves cost (faint or
inside the PSF even with the host known) and what telling them from their hosts costs.

    python benchmarks/ablate_host_oracle.py --lake lakehouse

A diagnostic with the mock's idealisations (a host model exact to the noise is what no pipeline has),
not a pipeline step.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks.ablate_lens_finder import bank_table, parse_lake_args  # noqa: E402
from benchmarks.demo_headline import auroc_of  # noqa: E402
from darkhaloscope.seeding import rng_for  # noqa: E402
from darkhaloscope.stamps import from_tensor_column  # noqa: E402
from darkhaloscope.training.checkpoint import load_checkpoint  # noqa: E402
from darkhaloscope.training.data import load_training_set  # noqa: E402
from darkhaloscope.training.inference import score_stamps  # noqa: E402
from darkhaloscope.training.loop import train  # noqa: E402
from darkhaloscope.training.preprocess import annulus_stats  # noqa: E402
from darkhaloscope.training.profiles import training_profile  # noqa: E402
from darkhaloscope.training.runs import split_for_training  # noqa: E402

S_N_EDGES = (0, 3, 5, 10, 20, np.inf)
THETA_E_EDGES_ARCSEC = (0.0, 1.01, 2.0, 3.1)


def band_sigma(stamps: np.ndarray, spec) -> torch.Tensor:
    """(N, 3) float32 pixel σ [nmgy] of each stamp (N, 3, H, W) [nmgy] and band, as ``spec``'s
    preprocessing measures it (the annulus MAD)."""
    return annulus_stats(torch.tensor(stamps), spec)[1].reshape(len(stamps), 3).float()


def noise_like(stamps: np.ndarray, spec, *key) -> np.ndarray:
    """Gaussian noise shaped like ``stamps`` (N, 3, H, W) [nmgy] with each stamp's :func:`band_sigma`,
    seeded by ``key``."""
    sigma = band_sigma(stamps, spec).numpy()[:, :, None, None]
    return rng_for("host_oracle", *key).standard_normal(stamps.shape, dtype=np.float32) * sigma


def _by(edges, values, p_inj, p_ctrl) -> dict:
    return {
        f"{lo}-{hi}": auroc_of(p_inj[(values >= lo) & (values < hi)], p_ctrl) for lo, hi in zip(edges[:-1], edges[1:])
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--member", default="{}", help="TrainConfig fields over the demo member (JSON)")
    a, lake = parse_lake_args(ap)
    profile = training_profile("demo")
    arrays = load_training_set(lake.dataset("training", "training_set").to_table())
    arrays = arrays.subset(arrays.host_index >= 0)
    rows = arrays.host_rows()
    image = arrays.image.copy()
    image[rows] = noise_like(image[rows], profile.preprocess, "hosts")
    tr, va = split_for_training(replace(arrays, image=image), "cpu")
    cfg = replace(profile.members[0], device="cpu", **json.loads(a.member))

    bank = bank_table(lake, ("theta_e_arcsec",))
    inj, ctrl = from_tensor_column(bank.column("image")), from_tensor_column(bank.column("control"))
    arcs_in_noise = (inj - ctrl) + noise_like(ctrl, profile.preprocess, "injections")
    noise_controls = noise_like(ctrl, profile.preprocess, "controls")
    snr, theta_e = bank.column("arc_snr").to_numpy(), bank.column("theta_e_arcsec").to_numpy()

    with tempfile.TemporaryDirectory(prefix="dhs_oracle_") as out:
        t0 = time.time()
        res = train(tr, va, cfg, out, profile.preprocess, {"ablation": "host_oracle"})
        wall = time.time() - t0
        scored = {}
        # the validation arcs (S/N >= the stream's threshold) are all found within a few epochs here,
        # so the best epoch is an early one: the last epoch's model is scored as well
        for name in ("best", "last"):
            model, ck = load_checkpoint(out, name)
            p_inj, p_ctrl = (score_stamps(model, ck, x)[0] for x in (arcs_in_noise, noise_controls))
            scored[name] = {
                "test_auroc_injections_vs_controls": auroc_of(p_inj, p_ctrl),
                "auroc_by_arc_snr": _by(S_N_EDGES, snr, p_inj, p_ctrl),
                "auroc_by_theta_e_arcsec": _by(THETA_E_EDGES_ARCSEC, theta_e, p_inj, p_ctrl),
            }
    print(
        json.dumps(
            {
                "name": "host_oracle",
                "member": json.loads(a.member),
                "n_hosts": int(rows.size),
                "val_auroc": round(res.best_val_auroc, 4),
                "best_epoch": res.best_epoch,
                "epochs": res.epochs_run,
                **scored,
                "s_per_epoch": round(wall / max(res.epochs_run, 1), 1),
            }
        )
    )


if __name__ == "__main__":
    main()
