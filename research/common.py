"""What several research scripts share: the lake argument, the test rows of a materialized lake as
tables and stamps, the per-band pixel σ of stamps and noise drawn with it, and AUROCs by bin.

Every script reads a lake the demo (or ``dhs materialize``) built; none writes to it.
"""

from __future__ import annotations

import argparse

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

import table_registry as T
from darkhaloscope.evaluation.headline import HEADLINE_FPR, auroc_of
from darkhaloscope.evaluation.injection_scoring import host_stamps, injection_images
from darkhaloscope.evaluation.scoring import held_out_negatives
from darkhaloscope.evaluation.thresholds import order_statistic_threshold
from darkhaloscope.search.grades import published_graded_lens_ids
from darkhaloscope.seeding import rng_for
from darkhaloscope.stamps import from_tensor_column, to_tensor_array
from darkhaloscope.training.preprocess import annulus_stats
from lake_platform.lake import Lake

#: Arc S/N bins [lo, hi) of the diagnostics' AUROC rows (the bank's matched-filter S/N).
S_N_EDGES = (0, 3, 5, 10, 20, np.inf)
#: θ_E bins [lo, hi) [arcsec]: the bank's unresolved, marginal and resolved Einstein radii.
THETA_E_EDGES_ARCSEC = (0.0, 1.01, 2.0, 3.1)


def parse_lake_args(ap: argparse.ArgumentParser) -> tuple[argparse.Namespace, Lake]:
    """Add the shared ``--lake`` and ``--threads``, parse, set torch's threads; (args, lake)."""
    ap.add_argument("--lake", default="lakehouse", help="root of a materialized lake (read only)")
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads (default: torch's own, as the lens_finder asset runs, so the published model "
        "is reproduced)",
    )
    a = ap.parse_args()
    if a.threads is not None:
        torch.set_num_threads(a.threads)
    return a, Lake(a.lake)


def bank_table(lake: Lake, columns: tuple = ()) -> pa.Table:
    """The injection bank's successful rows (the selection-function injections, test-split hosts)
    with ``arc_snr``, ``image`` (the injected stamp, rendered again from its plan row: the bank
    stores no stamps), ``control`` (the host's cutout) and any more columns named."""
    columns = list(dict.fromkeys(["success", "arc_snr", "injection_id", *columns]))
    bank = lake.table(*T.INJECTION_BANK.key).read(columns=columns)
    bank = bank.filter(bank.column("success"))
    ids = bank.column("injection_id").to_pylist()
    cutouts = lake.table(*T.CUTOUTS.key).dataset()
    plan = lake.table(*T.INJECTION_PLAN.key).read()
    images = injection_images(plan, cutouts, ids)
    tasks = plan.take(pc.index_in(pa.array(ids, pa.int64()), plan.column("injection_id")))
    controls, _ = host_stamps(cutouts, tasks, "the bank's controls")
    return bank.append_column("image", to_tensor_array(np.stack([images[i] for i in ids]))).append_column(
        "control", to_tensor_array(controls)
    )


def held_out_tables(
    lake: Lake, cutout_columns: tuple = (), bank_columns: tuple = ()
) -> tuple[pa.Table, pa.Table, pa.Table]:
    """The test rows as tables, with their ``image`` (and ``control``) and any more columns named:
    held-out negatives (less those graded a lens), test-split known lenses, and :func:`bank_table`."""
    cut = lake.table(*T.CUTOUTS.key).read(
        columns=list(
            dict.fromkeys(
                ["object_id", "label", "split", "in_training_catalog", "quality_ok", "image", *cutout_columns]
            )
        )
    )
    cut = cut.filter(cut.column("quality_ok"))
    real = pc.and_(pc.equal(cut.column("label"), 1), pc.equal(cut.column("split"), "test"))
    graded = published_graded_lens_ids(lake.table(*T.VISUAL_GRADES.key))
    return held_out_negatives(cut, graded), cut.filter(real), bank_table(lake, bank_columns)


def held_out_stamps(lake: Lake) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Stamps (N, 3, H, W) [nmgy] of the :func:`held_out_tables` and the injections' arc S/N:
    (negatives, known lenses, injections, controls, arc S/N)."""
    neg, real, bank = held_out_tables(lake)
    return (
        from_tensor_column(neg.column("image")),
        from_tensor_column(real.column("image")),
        from_tensor_column(bank.column("image")),
        from_tensor_column(bank.column("control")),
        bank.column("arc_snr").to_numpy(),
    )


def threshold_at(neg_scores: np.ndarray, fpr: float = HEADLINE_FPR) -> float:
    """The threshold at false-positive fraction ``fpr`` of the scores of held-out negatives
    ``neg_scores`` (the evaluation's rule, :func:`thresholds.order_statistic_threshold`)."""
    return order_statistic_threshold(np.sort(neg_scores)[::-1], fpr)[0]


def band_sigma(stamps: np.ndarray, spec) -> torch.Tensor:
    """(N, 3) float32 pixel σ [nmgy] of each stamp (N, 3, H, W) [nmgy] and band, as ``spec``'s
    preprocessing measures it (the annulus MAD)."""
    return annulus_stats(torch.tensor(stamps), spec)[1].reshape(len(stamps), 3).float()


def noise_like(stamps: np.ndarray, spec, *key) -> np.ndarray:
    """Gaussian noise [nmgy] shaped like ``stamps`` (N, 3, H, W) with each stamp's
    :func:`band_sigma`, seeded by ``key``."""
    sigma = band_sigma(stamps, spec).numpy()[:, :, None, None]
    return rng_for("host_oracle", *key).standard_normal(stamps.shape, dtype=np.float32) * sigma


def auroc_by(edges, values: np.ndarray, p_inj: np.ndarray, p_ctrl: np.ndarray) -> dict[str, float]:
    """{``"lo-hi"``: AUROC of the injections ``p_inj`` whose ``values`` lie in [lo, hi) of
    consecutive ``edges`` against every control ``p_ctrl``}."""
    return {
        f"{lo}-{hi}": auroc_of(p_inj[(values >= lo) & (values < hi)], p_ctrl) for lo, hi in zip(edges[:-1], edges[1:])
    }
