"""The lens finder's ceiling with a perfectly known host: the demo recipe on arcs in pure noise.

Trains the lake's demo recipe (as ``research.ablate_lens_finder`` does) with every injection
host's stamp replaced by pure Gaussian noise of that host's σ, so the stream puts its arcs on a host
that has been subtracted exactly; the real positives are left out (their hosts cannot be). It then
scores the injection bank's arcs (injection minus its paired control: the arc alone, noise-free) in
fresh noise of the control's σ, against controls of pure noise (every σ per band as the
preprocessing measures it, ``preprocess.annulus_stats``), and prints one JSON line: validation
AUROC and best epoch, the AUROC of injections against controls over the bank, by arc S/N and by
θ_E. Against the published model's figures on the same bank this splits the all-injection AUROC's
shortfall into what the arcs themselves cost (faint or inside the PSF even with the host known) and
what telling them from their hosts costs.

    python -m research.ablate_host_oracle --lake lakehouse

Results: BENCHMARKS.md, *What a host known exactly would give, and what a host fitted to the stamp
keeps*. A diagnostic with the mock's idealisations (a host model exact to the noise is what no
pipeline has), not a pipeline step.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import replace

import table_registry as T
from darkhaloscope.evaluation.headline import auroc_of
from darkhaloscope.stamps import from_tensor_column
from darkhaloscope.training.checkpoint import load_checkpoint
from darkhaloscope.training.data import load_training_set
from darkhaloscope.training.inference import score_stamps
from darkhaloscope.training.loop import train
from darkhaloscope.training.profiles import training_profile
from darkhaloscope.training.runs import split_for_training
from research.common import S_N_EDGES, THETA_E_EDGES_ARCSEC, auroc_by, bank_table, noise_like, parse_lake_args


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--member", default="{}", help="TrainConfig fields over the demo member (JSON)")
    a, lake = parse_lake_args(ap)
    profile = training_profile("demo")
    arrays = load_training_set(lake.table(*T.TRAINING_SET.key).read())
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
                "auroc_by_arc_snr": auroc_by(S_N_EDGES, snr, p_inj, p_ctrl),
                "auroc_by_theta_e_arcsec": auroc_by(THETA_E_EDGES_ARCSEC, theta_e, p_inj, p_ctrl),
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
