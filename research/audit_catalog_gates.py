"""What the two catalog checks of the lens finder measured, and the gates that replace them, on a demo lake.

The checks ``core_lr_auc_catalog`` (a cross-validated logistic regression on the r < 5 px core of the
validation set's real lenses against its negatives) and ``radial_profile_lr_auc`` (the same on the
azimuthal-mean radial profile of every validation row) failed on every demo. This script measures,
on the lake's validation set (``split_for_training``, as the trainer builds it) and its published
model, one JSON line:

* ``before``: the two checks as they were computed;
* ``radial_by_rows``: the radial check on the injections or on the real lenses alone (against the
  negatives);
* ``population``: the AUROC of the catalog's own columns (z magnitude, colours, size) of the real
  lenses against the negatives, and the share of each Tractor TYPE;
* ``raw_stamps``: the same regressions on the stamps in nanomaggies (central 49 px), without the
  model's preprocessing;
* ``matched``: the regressions with each real lens paired to a negative of its TYPE and nearest z
  magnitude (``type_mag``), or z magnitude and g - r and r - z colours (``type_mag_colour``), without
  replacement, within 0.25 standard deviations per quantity, with the pairs' colour AUROC after it;
* ``hosts_only`` (``--mock-seed``, the lake's DHS_MOCK_SEED): the real lenses' stamps rendered by the
  mock sky without their arcs (same noise), so what the regressions see of the hosts alone; the
  model's AUROC of those hosts against the negatives;
* ``after``: every gate of ``run_gates`` on the published model (the look-alike and shuffle gates
  with their recorded details).

    python -m research.audit_catalog_gates --lake /path/to/lake [--mock-seed 0] [--checkpoint DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json

import numpy as np
import torch

import table_registry as T
from darkhaloscope.evaluation.scoring import published_lens_finder
from darkhaloscope.stats import roc_auc
from darkhaloscope.training.checkpoint import load_checkpoint
from darkhaloscope.training.data import load_training_set
from darkhaloscope.training.gates import core_features, cross_validated_lr_auc, run_gates
from darkhaloscope.training.inference import score_stamps
from darkhaloscope.training.preprocess import core_mask, preprocess_in_batches, radial_profile
from darkhaloscope.training.runs import split_for_training
from lake_platform.lake import Lake
from mock_survey.lenses import mock_sky_with_lenses
from mock_survey.sky import MOCK_SKY_COLUMNS
from research.common import parse_lake_args

CATALOG_COLUMNS = ("object_id", "ra", "dec", "type", "mag_z", "g_minus_r", "r_minus_z", "shape_r")
MATCHES = {"type_mag": ("mag_z",), "type_mag_colour": ("mag_z", "g_minus_r", "r_minus_z")}
CALIPER_SD = 0.25
RAW_CROP = 49


def _r(v: float) -> float:
    return round(float(v), 3)


def _radial(x: torch.Tensor) -> np.ndarray:
    n_bins = x.shape[-1] // 2 + 1
    return radial_profile(x, 1.0, "mean")[:, :, :n_bins].reshape(x.shape[0], -1).cpu().numpy()


def regressions(images: np.ndarray, labels: np.ndarray, spec) -> dict:
    """Cross-validated LR AUROC on the core pixels and on the radial profile, as the old checks
    computed them (same seeds), of stamps preprocessed with ``spec``."""
    x = preprocess_in_batches(images, spec)
    return {
        "core": _r(cross_validated_lr_auc(core_features(x, spec), labels, (0, "core"))),
        "radial": _r(cross_validated_lr_auc(_radial(x), labels, (0, "radial"))),
    }


def raw_regressions(images: np.ndarray, labels: np.ndarray) -> dict:
    """The same on the central RAW_CROP px of the stamps in nanomaggies (no normalisation, no stretch)."""
    h = images.shape[-1]
    lo = (h - RAW_CROP) // 2
    x = torch.from_numpy(np.ascontiguousarray(images[..., lo : lo + RAW_CROP, lo : lo + RAW_CROP]))
    core = x[..., torch.from_numpy(core_mask(RAW_CROP, RAW_CROP, 5.0))].reshape(x.shape[0], -1).numpy()
    return {
        "core": _r(cross_validated_lr_auc(core, labels, (0, "core"))),
        "radial": _r(cross_validated_lr_auc(_radial(x), labels, (0, "radial"))),
    }


def match_pairs(pos, neg, columns: tuple, seed: int = 0) -> np.ndarray:
    """(K, 2) rows (into ``pos``, into ``neg``: pandas frames with ``type`` and ``columns``): each real
    lens, in a seeded random order, with the unused negative of its TYPE nearest in ``columns``
    (standardised), when within CALIPER_SD per quantity."""
    x, p = neg[list(columns)].to_numpy(float), pos[list(columns)].to_numpy(float)
    sd = np.nanstd(np.r_[x, p], axis=0)
    used = np.zeros(len(x), bool)
    same_type = neg["type"].to_numpy()[None, :] == pos["type"].to_numpy()[:, None]
    pairs = []
    for i in np.random.default_rng(seed).permutation(len(p)):
        d = np.sqrt((((x - p[i]) / sd) ** 2).sum(axis=1))
        d[used | ~same_type[i] | ~np.isfinite(d)] = np.inf
        j = int(np.argmin(d))
        if d[j] <= CALIPER_SD * np.sqrt(len(columns)):
            used[j] = True
            pairs.append((i, j))
    return np.array(pairs, np.int64).reshape(-1, 2)


def hosts_without_arcs(lake: Lake, seed: int, ra: np.ndarray, dec: np.ndarray) -> np.ndarray:
    """Stamps (N, 3, 101, 101) of the mock sky of ``lake``'s sweeps at (ra, dec) with no lens painted."""
    catalog = lake.table(*T.SWEEPS.key).read(columns=[*MOCK_SKY_COLUMNS, "object_id", "sweep_file"])
    batch, _ = mock_sky_with_lenses(catalog, [], seed).cutouts(ra, dec, 101)
    return batch.image.astype(np.float32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", default=None, help="checkpoint folder (default: the lake's published lens_finder)")
    ap.add_argument(
        "--mock-seed", type=int, default=None, help="the lake's DHS_MOCK_SEED: measure the hosts without their arcs"
    )
    a, lake = parse_lake_args(ap)
    with contextlib.ExitStack() as stack:
        if a.checkpoint:
            model, ck = load_checkpoint(a.checkpoint, "best")
        else:
            model, ck = stack.enter_context(published_lens_finder(lake.table(*T.LENS_FINDER.key), "cpu"))
        print(json.dumps(audit(lake, model, ck, a.mock_seed)))


def audit(lake: Lake, model, ck, mock_seed: int | None) -> dict:
    """The measurements of the module doc, of ``model`` (checkpoint spec ``ck``) on ``lake``."""
    _, va = split_for_training(load_training_set(lake.table(*T.TRAINING_SET.key).read()), "cpu")
    spec = ck.preprocess
    cat = va.subset(np.isin(va.kind, ("real_positive", "negative")))
    y = cat.label
    props = lake.table(*T.TRAINING_CATALOG.key).read(columns=list(CATALOG_COLUMNS)).to_pandas()
    props = props.drop_duplicates("object_id").set_index("object_id").reindex(cat.object_id)
    kinds = ("real_positive", "negative", "injected_positive")
    out: dict = {"lake": lake.root, "n": {k: int((va.kind == k).sum()) for k in kinds}}

    whole = regressions(va.image, va.label, spec)
    out["before"] = {
        "core_lr_auc_catalog": regressions(cat.image, y, spec)["core"],
        "radial_profile_lr_auc": whole["radial"],
    }
    neg = va.label == 0
    out["radial_by_rows"] = {
        k: regressions(va.image[m], va.label[m], spec)["radial"]
        for k, m in (
            ("injections_vs_negatives", neg | (va.kind == "injected_positive")),
            ("real_vs_negatives", neg | (va.kind == "real_positive")),
        )
    }
    out["population"] = {}
    for c in ("mag_z", "g_minus_r", "r_minus_z", "shape_r"):
        v = props[c].to_numpy(float)
        out["population"][c] = _r(roc_auc(v[np.isfinite(v)], y[np.isfinite(v)]))
    out["population"]["type_share"] = {
        lab: props["type"][y == v].value_counts(normalize=True).round(2).to_dict()
        for lab, v in (("real", 1), ("negatives", 0))
    }
    out["raw_stamps"] = {
        "catalog_rows": raw_regressions(cat.image, y),
        "all_rows_radial": raw_regressions(va.image, va.label)["radial"],
    }

    pos_rows, neg_rows = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
    matched_rows = {}
    for name, cols in MATCHES.items():
        pr = match_pairs(props.iloc[pos_rows], props.iloc[neg_rows], cols)
        rows = np.r_[pos_rows[pr[:, 0]], neg_rows[pr[:, 1]]]
        matched_rows[name] = rows
        rz = props["r_minus_z"].to_numpy(float)[rows]
        out.setdefault("matched", {})[name] = {
            "pairs": int(len(pr)),
            **regressions(cat.image[rows], y[rows], spec),
            "raw": raw_regressions(cat.image[rows], y[rows]),
            "r_minus_z_auroc": _r(roc_auc(rz, y[rows])),
        }

    p, _, _ = score_stamps(model, ck, cat.image)
    out["model_real_vs_negatives"] = _r(roc_auc(p, y))
    if mock_seed is not None:
        hosts = cat.image.copy()
        ra, dec = props["ra"].to_numpy()[pos_rows], props["dec"].to_numpy()[pos_rows]
        hosts[pos_rows] = hosts_without_arcs(lake, mock_seed, ra, dec)
        ph, _, _ = score_stamps(model, ck, hosts[pos_rows])
        m = matched_rows["type_mag_colour"]
        vs_neg = roc_auc(np.r_[ph, p[neg_rows]], np.r_[np.ones(ph.size), np.zeros(neg_rows.size)])
        out["hosts_only"] = {
            **regressions(hosts, y, spec),
            "matched_type_mag_colour": regressions(hosts[m], y[m], spec),
            "model_hosts_vs_negatives": _r(vs_neg),
        }
    out["after"] = {
        g["name"]: {k: (_r(v) if isinstance(v, float) else v) for k, v in g.items() if k != "name"}
        for g in run_gates(model, ck, va, device="cpu")
    }
    return out


if __name__ == "__main__":
    main()
