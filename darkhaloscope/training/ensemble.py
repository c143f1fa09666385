"""The stacked ensemble of Paper IV (Inchausti et al. 2025): two networks' probabilities combined by
a meta-learner, "a simple one-layer neural network with 300 nodes" (feature-weighted stacking,
Coscrato et al. 2020).

The meta-learner is fitted on the validation set (the members never trained on it), full batch,
a fixed number of Adam steps from a seeded initialisation, so it is deterministic. Which model is
published is decided on the validation set too, never on test: the ensemble when its
cross-fitted validation AUROC (meta-learner fitted on one half, scored on the other, both ways)
is at least the best member's, else the best member (Paper IV found the meta-learner equal to a
simple average, so the ensemble is not assumed to win).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import InputError
from ..seeding import unit_hash_array
from ..stats import roc_auc
from .checkpoint import atomic_write_bytes, has_checkpoint, load_checkpoint, save_checkpoint
from .data import TrainingArrays
from .dataset import seed_int
from .inference import resolve_device, stamp_logits
from .loop import RUN_COMPLETE, finalize_best
from .metrics import json_safe
from .models import StackedEnsemble

#: Optimiser settings of the meta-learner fit (full batch).
META_STEPS, META_LR, META_WEIGHT_DECAY = 400, 1e-2, 1e-4


def fit_meta_learner(
    member_logits: np.ndarray, labels, weights=None, hidden: int = 300, seed: object = 0
) -> torch.nn.Module:
    """The meta-learner (M -> hidden -> 1, ReLU) fitted on members' probabilities sigmoid(logits)
    (N, M) against 0/1 ``labels`` by weighted binary cross-entropy; deterministic in ``seed``."""
    z = torch.as_tensor(np.asarray(member_logits, dtype=np.float32))
    y = torch.as_tensor(np.asarray(labels, dtype=np.float32))
    w = torch.ones_like(y) if weights is None else torch.as_tensor(np.asarray(weights, dtype=np.float32))
    if z.ndim != 2 or z.shape[0] != y.shape[0] or not torch.all(torch.isfinite(z)):
        raise InputError(
            f"meta-learner needs finite member logits (N, M) and N labels, got {tuple(z.shape)} and {tuple(y.shape)}"
        )
    torch.manual_seed(seed_int(seed, "meta_learner"))
    head = torch.nn.Sequential(
        torch.nn.Linear(z.shape[1], int(hidden)), torch.nn.ReLU(inplace=True), torch.nn.Linear(int(hidden), 1)
    )
    opt = torch.optim.Adam(head.parameters(), lr=META_LR, weight_decay=META_WEIGHT_DECAY)
    p = torch.sigmoid(z)
    for _ in range(META_STEPS):
        opt.zero_grad(set_to_none=True)
        loss = (F.binary_cross_entropy_with_logits(head(p).squeeze(-1), y, reduction="none") * w).sum() / w.sum()
        loss.backward()
        opt.step()
    return head.eval()


def _meta_logits(head: torch.nn.Module, member_logits: np.ndarray) -> np.ndarray:
    with torch.inference_mode():
        return (
            head(torch.sigmoid(torch.as_tensor(np.asarray(member_logits, dtype=np.float32))))
            .squeeze(-1)
            .double()
            .numpy()
        )


def cross_fitted_auroc(member_logits: np.ndarray, labels, weights=None, hidden: int = 300, seed: object = 0) -> float:
    """AUROC of the meta-learner on rows it was not fitted on: two halves by stable hash of the row
    index, each scored by the meta-learner fitted on the other."""
    z = np.asarray(member_logits, dtype=np.float64)
    y = np.asarray(labels)
    w = np.ones(len(y)) if weights is None else np.asarray(weights)
    half = unit_hash_array(np.arange(len(y)), salt=(seed, "meta_cross_fit")) < 0.5
    out = np.empty(len(y))
    for part in (half, ~half):
        if np.unique(y[~part]).size < 2:
            raise InputError("cross-fitting the meta-learner needs both labels in each half of the validation set")
        out[part] = _meta_logits(fit_meta_learner(z[~part], y[~part], w[~part], hidden, seed), z[part])
    return roc_auc(out, y)


def stack_runs(
    member_dirs: list, val: TrainingArrays, out_dir, hidden: int = 300, seed: object = 0, device="cpu"
) -> dict:
    """Build (or reuse) the stacked ensemble of the completed member runs ``member_dirs`` in
    ``out_dir``: members' weights, the meta-learner fitted on ``val``, calibrated like a single
    network (``loop.finalize_best``). Returns the comparison on ``val`` (each member's AUROC, the
    ensemble's cross-fitted AUROC) and the choice of the model to publish. ``device``: 'auto',
    'cpu' or 'cuda', as a member's ``TrainConfig.device``."""
    out, device = Path(out_dir), resolve_device(device)
    members = [load_checkpoint(d, "best", device=device) for d in member_dirs]
    specs = [s for _, s in members]
    if len({s.preprocess for s in specs}) != 1:
        raise InputError("ensemble members must share their preprocessing spec")
    if len({s.dihedral_views for s in specs}) != 1:
        raise InputError(f"ensemble members must average over the same dihedral views: {[str(d) for d in member_dirs]}")
    z, ok = [], None
    for model, spec in members:
        logits, valid, _ = stamp_logits(model, spec, val.image, device=device)
        z.append(logits)
        ok = valid if ok is None else ok & valid
    z = np.stack(z, axis=1)[ok]
    y, w = val.label[ok], val.weight[ok]
    member_auroc = [roc_auc(z[:, i], y) for i in range(z.shape[1])]
    cross_fitted = cross_fitted_auroc(z, y, w, hidden, seed)
    if not (out / RUN_COMPLETE).is_file() or not has_checkpoint(out, "best"):
        ens = StackedEnsemble(specs[0].in_channels, tuple(s.architecture for s in specs), hidden)
        for m, (model, _) in zip(ens.members, members):
            m.load_state_dict(model.state_dict())
        ens.meta.load_state_dict(fit_meta_learner(z, y, w, hidden, seed).state_dict())
        save_checkpoint(
            out,
            "best",
            ens,
            architecture="stacked_ensemble",
            in_channels=specs[0].in_channels,
            preprocess=specs[0].preprocess,
            arch_args={"members": [s.architecture for s in specs], "hidden": int(hidden)},
            # the members' run keys, not their folders: the bytes do not depend on where runs live
            train_config={"members": [Path(d).name for d in member_dirs], "meta_steps": META_STEPS},
            data_versions=specs[0].data_versions,
        )
        finalize_best(out, val, seed, device, dihedral_views=specs[0].dihedral_views)
        best = load_checkpoint(out, "best", device=device)[1]
        atomic_write_bytes(
            out / RUN_COMPLETE,
            json.dumps(
                json_safe(
                    {
                        "best_checkpoint": {"weights_sha256": best.weights_sha256},
                        "stopped_reason": "stacked",
                        "best_epoch": 0,
                        "epochs_run": 0,
                        "global_step": 0,
                        "members": [Path(d).name for d in member_dirs],
                    }
                ),
                indent=1,
            ).encode(),
        )
    best_member = int(np.argmax(member_auroc))
    publish_ensemble = cross_fitted >= member_auroc[best_member]
    return json_safe(
        {
            "member_val_auroc": dict(zip([s.architecture for s in specs], member_auroc)),
            "ensemble_val_auroc_cross_fitted": cross_fitted,
            "published": "stacked_ensemble" if publish_ensemble else specs[best_member].architecture,
            "published_run_dir": str(out) if publish_ensemble else str(member_dirs[best_member]),
            "reason": (
                f"cross-fitted validation AUROC of the ensemble {cross_fitted:.4f} "
                f"{'>=' if publish_ensemble else '<'} the best member's {member_auroc[best_member]:.4f}"
            ),
        }
    )
