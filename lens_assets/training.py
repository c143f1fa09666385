"""Training stage: the training set and the lens finder, trained by a standalone script through
Dagster Pipes (locally ``PipesSubprocessClient``; on a GPU host or in the cloud another Pipes
client runs the same script), one GPU run at a time (pool ``gpu``)."""

import json
import os
import sys
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import dagster as dg

from darkhaloscope.errors import InputError
from darkhaloscope.imaging.cutout_table import load_stamps
from darkhaloscope.lensing.bank import render_injection_batch, training_profile_tasks
from darkhaloscope.stamps import STAMP_SHAPE, tensor_type, to_tensor_array
from darkhaloscope.training.data import negatives_per_positive_mask
from darkhaloscope.training.preprocess import PreprocessSpec
from resources import ComputeResource, LakeResource

from .common import OWNERS, fail_fast_on_bad_input, table_result
from .imaging import GROUP as IMAGING, cutout_validation, cutouts
from .injection import HOST_COLUMNS, injection_config

GROUP = "training"
TIER_WEIGHTS = {"A": 1.0, "B": 0.5}
#: Injected training positives, by profile (the training profile of the injection engine).
INJECTED_POSITIVES = {"demo": 800, "full": 20000}
#: Training configuration by profile: ``demo`` fits in ~3 minutes on 2 CPU cores, ``full`` is sized for a GPU.
TRAIN_PROFILES = {
    # the demo uses the same bottleneck design at 6.8k parameters: ~14 epochs in its 2-minute budget on 2 CPU cores
    "demo": {"arch": "bottleneck_resnet_tiny", "epochs": 15, "batch_size": 64, "lr": 3e-3, "patience": 5, "max_minutes": 2.0, "hard_negative_prob": 0.2, "core_dropout": 0.3, "num_workers": 0},
    "full": {"arch": "bottleneck_resnet", "epochs": 150, "batch_size": 512, "lr": 5e-4, "patience": 15, "hard_negative_prob": 0.2, "core_dropout": 0.3, "num_workers": 8},
}


#: Preprocessing by profile: Paper IV's full 101 px stamps for ``full``; the demo crops to the
#: central 65 px (arcs up to θ_E = 3″ stay inside) so that it trains in minutes on 2 CPU cores.
PREPROCESS_PROFILES = {"demo": {"crop": 65}, "full": {}}


def preprocess_spec(profile: str) -> PreprocessSpec:
    return PreprocessSpec(**PREPROCESS_PROFILES.get(profile, PREPROCESS_PROFILES["demo"]))


class TrainingSetConfig(dg.Config):
    """Tier weights of real positives, number of injected positives (0 = profile default, -1 = none),
    and the class ratio: at most ``negatives_per_positive`` negatives per positive in each split
    (0 = every training-catalog negative, whose ratio the catalog's ``negatives_per_positive`` sets)."""

    weight_tier_a: float = 1.0
    weight_tier_b: float = 0.5
    injected_positives: int = 0
    negatives_per_positive: float = 0.0


def _nullable_tensor(stamps: np.ndarray, valid: np.ndarray) -> pa.ExtensionArray:
    """Fixed-shape tensor column with nulls where ``valid`` is False."""
    flat = pa.array(np.ascontiguousarray(stamps, np.float32).reshape(-1))
    storage = pa.FixedSizeListArray.from_arrays(flat, int(np.prod(STAMP_SHAPE)), mask=pa.array(~valid))
    return pa.ExtensionArray.from_storage(tensor_type(), storage)


@dg.asset(key_prefix=[GROUP], group_name=GROUP, deps=[cutouts, cutout_validation], kinds={"parquet"}, owners=OWNERS, code_version="1")
def training_set(context: dg.AssetExecutionContext, config: TrainingSetConfig, lake: LakeResource, compute: ComputeResource) -> dg.MaterializeResult:
    """Real positives (tier weights A 1.0, B 0.5), injected positives from the injection engine's
    training profile (train and val hosts, each with its paired control for labelled hard negatives)
    and the training catalog's negatives, train and val splits only (test stays untouched); the
    HEALPix splits are carried through and the preprocessing spec is recorded."""
    store = lake.lake()
    base_cols = ["object_id", "label", "split", "tier", "pool", "psfsize_r", "quality_ok", "in_training_catalog"]
    cat = store.read_table(IMAGING, "cutouts", columns=base_cols)
    keep = pc.and_(pc.and_(cat.column("quality_ok"), cat.column("in_training_catalog")), pc.is_in(cat.column("split"), pa.array(["train", "val"])))
    cat = cat.filter(keep)
    (images,), _ = load_stamps(store.dataset(IMAGING, "cutouts"), cat.column("object_id").to_numpy())
    label = cat.column("label").to_numpy().astype(np.int8)
    tiers = np.asarray(cat.column("tier").to_pylist(), dtype=object)
    weight = np.where(label == 1, [{"A": config.weight_tier_a, "B": config.weight_tier_b}.get(t, 0.5) for t in tiers], 1.0).astype(np.float32)
    real = {
        "object_id": cat.column("object_id").to_numpy(),
        "label": label,
        "weight": weight,
        "split": np.asarray(cat.column("split").to_pylist(), dtype=object),
        "kind": np.where(label == 1, "real_positive", "negative").astype(object),
        "tier": tiers,
        "pool": np.asarray(cat.column("pool").to_pylist(), dtype=object),
        "theta_e_arcsec": np.full(len(label), np.nan, np.float32),
        "psfsize_r": cat.column("psfsize_r").to_numpy().astype(np.float32),
    }
    n_inj = config.injected_positives or INJECTED_POSITIVES.get(compute.profile, INJECTED_POSITIVES["demo"])
    inj_images = np.zeros((0, *STAMP_SHAPE), np.float32)
    inj_controls = inj_images
    inj = None
    if n_inj > 0:
        hosts = store.read_table(IMAGING, "cutouts", columns=HOST_COLUMNS + ["label", "quality_ok"])
        # train and val hosts: val injections (never trained on) carry the controls of the hard-negative gate
        fit_split = pc.is_in(hosts.column("split"), pa.array(["train", "val"]))
        hosts = hosts.filter(pc.and_(pc.and_(pc.equal(hosts.column("label"), 0), hosts.column("quality_ok")), fit_split)).select(HOST_COLUMNS)
        with fail_fast_on_bad_input():
            if hosts.num_rows == 0:
                raise InputError("no quality-checked train/val negative cutouts to host training injections")
            cfg = injection_config(compute.profile, host_splits=("train", "val"))
            tasks = training_profile_tasks(hosts, n_inj, cfg)
        (host_img, host_iv), _ = load_stamps(store.dataset(IMAGING, "cutouts"), tasks.column("host_object_id").to_numpy(), ("image", "invvar"))
        inj_images, _, params = render_injection_batch(tasks, host_img, host_iv, device=compute.torch_device(), config=cfg)
        ok = params.column("success").to_numpy(zero_copy_only=False)
        inj_images, inj_controls, tasks = inj_images[ok], host_img[ok], tasks.filter(pa.array(ok))
        n = tasks.num_rows
        inj = {
            # injected rows get ids of their own (negative) so they never collide with catalog objects
            "object_id": -(tasks.column("injection_id").to_numpy().astype(np.int64) + 1),
            "label": np.ones(n, np.int8),
            "weight": np.ones(n, np.float32),
            "split": np.asarray(tasks.column("host_split").to_pylist(), dtype=object),
            "kind": np.full(n, "injected_positive", dtype=object),
            "tier": np.full(n, None, dtype=object),
            "pool": np.full(n, None, dtype=object),
            "theta_e_arcsec": tasks.column("theta_e_arcsec").to_numpy().astype(np.float32),
            "psfsize_r": tasks.column("psf_fwhm_r").to_numpy().astype(np.float32),
        }
    cols = {k: np.concatenate([real[k], inj[k]]) if inj else real[k] for k in real}
    all_images = np.concatenate([images, inj_images])
    has_control = np.r_[np.zeros(len(images), bool), np.ones(len(inj_images), bool)]
    controls = np.zeros_like(all_images)
    controls[has_control] = inj_controls
    keep = negatives_per_positive_mask(cols["label"], cols["split"], cols["object_id"], config.negatives_per_positive)
    if not keep.all():
        cols = {k: v[keep] for k, v in cols.items()}
        all_images, controls, has_control = all_images[keep], controls[keep], has_control[keep]
    table = pa.table(
        {
            "object_id": pa.array(cols["object_id"], pa.int64()),
            "label": pa.array(cols["label"], pa.int8()),
            "weight": pa.array(cols["weight"], pa.float32()),
            "split": pa.array(cols["split"], pa.string()),
            "kind": pa.array(cols["kind"], pa.string()),
            "tier": pa.array(cols["tier"], pa.string()),
            "pool": pa.array(cols["pool"], pa.string()),
            "theta_e_arcsec": pa.array(np.where(np.isnan(cols["theta_e_arcsec"]), None, cols["theta_e_arcsec"]), pa.float32()),
            "psfsize_r": pa.array(cols["psfsize_r"], pa.float32()),
            "image": to_tensor_array(all_images),
            "control": _nullable_tensor(controls, has_control),
        }
    )
    spec = preprocess_spec(compute.profile)
    table = table.replace_schema_metadata({b"dhs.preprocess_spec": spec.to_json().encode()})
    info = store.write_table(GROUP, "training_set", table)
    counts = {f"{s}/{k}": int(c) for (s, k), c in _count_pairs(cols["split"], cols["kind"]).items()}
    return table_result(store, info.uri, table.schema, table.num_rows, {"counts": dg.MetadataValue.json(counts), "preprocess_spec": dg.MetadataValue.json(json.loads(spec.to_json()))})


def recorded_preprocess_spec(store) -> PreprocessSpec:
    """The preprocessing spec ``training_set`` was built for (its Parquet schema metadata): the
    lens finder trains with exactly that spec, whatever the profile says now."""
    meta = store.read_schema(GROUP, "training_set").metadata or {}
    if b"dhs.preprocess_spec" not in meta:
        raise InputError(f"{store.full_uri(store.table_path(GROUP, 'training_set'))} records no preprocessing spec: materialize training_set again")
    return PreprocessSpec.from_json(meta[b"dhs.preprocess_spec"].decode())


def _count_pairs(a, b) -> dict:
    out: dict = {}
    for x, y in zip(a, b):
        out[(x, y)] = out.get((x, y), 0) + 1
    return out


GATE_CHECKS = ["core_lr_auc", "radial_profile_lr_auc", "core_masked_drop", "hard_negative_auroc"]
BLOCKING_GATES = {"core_lr_auc", "core_masked_drop"}


class LensFinderConfig(dg.Config):
    """core_threshold: blocking threshold of the core-only gate (cross-validated AUROC of a logistic
    regression on the r < 5 px core alone; at or above it the training set carries a core
    shortcut). Changing it re-runs the gates on the completed model without training again."""

    core_threshold: float = 0.65


@dg.asset(
    key_prefix=[GROUP],
    group_name=GROUP,
    deps=[training_set],
    kinds={"pytorch", "safetensors"},
    owners=OWNERS,
    code_version="1",
    pool="gpu",
    check_specs=[dg.AssetCheckSpec(name, asset=[GROUP, "lens_finder"], blocking=name in BLOCKING_GATES) for name in GATE_CHECKS],
    retry_policy=dg.RetryPolicy(max_retries=2, delay=5),
)
def lens_finder(
    context: dg.AssetExecutionContext,
    config: LensFinderConfig,
    lake: LakeResource,
    compute: ComputeResource,
    pipes_subprocess_client: dg.PipesSubprocessClient,
):
    """The CNN lens finder (compact bottleneck ResNet, Paper IV style), trained by
    ``lens_assets/pipes/train_lens_finder.py`` through Dagster Pipes; checkpoints (safetensors +
    JSON spec) in the lake; metrics and shortcut gates reported back as metadata and checks.

    Each run trains in ``runs/<key>/`` under the checkpoint folder, keyed by the training config,
    preprocessing and training-set version: new inputs train a new model, an interrupted run
    resumes, a completed run is reused (gates only). Only a completed run's ``best`` is published
    to ``artifact=checkpoint`` (what the score assets read), so it is never half-written."""
    store = lake.lake()
    train_uris = store.part_uris(GROUP, "training_set")
    if store.is_s3:
        training_uri = train_uris[0]
        out_dir = os.path.join(tempfile.gettempdir(), "dhs_lens_finder")
        ckpt_uri = store.full_uri(store.partition_path(GROUP, "lens_finder", {"artifact": "checkpoint"}))
    else:
        training_uri = train_uris[0].removeprefix("file://")
        out_dir = store.partition_path(GROUP, "lens_finder", {"artifact": "checkpoint"})
        ckpt_uri = None
    train_config = dict(TRAIN_PROFILES.get(compute.profile, TRAIN_PROFILES["demo"]), device=compute.device)
    extras = {
        "training_set_uri": training_uri,
        "out_dir": out_dir,
        "config": train_config,
        "preprocess": recorded_preprocess_spec(store).to_dict(),
        "report_checks": True,
        "core_threshold": float(config.core_threshold),
        # the demo trains for a fixed budget; the full profile resumes a time-limited run on retry
        "time_budget_final": compute.profile != "full",
    }
    if ckpt_uri:
        extras["checkpoint_uri"] = ckpt_uri
    result = pipes_subprocess_client.run(
        context=context,
        command=[sys.executable, "-m", "lens_assets.pipes.train_lens_finder"],
        extras=extras,
    ).get_materialize_result()
    md = {k: getattr(v, "value", v) for k, v in (result.metadata or {}).items()}
    registry = pa.table(
        {
            "checkpoint_uri": [str(md.get("dagster/uri", ckpt_uri or out_dir))],
            "data_version": [result.data_version.value if result.data_version else None],
            "val_auroc": [float(md["val_auroc"]) if "val_auroc" in md else None],
            "metrics": [json.dumps(md, default=str, sort_keys=True)],
        }
    )
    store.write_table(GROUP, "lens_finder", registry)
    return result


training_defs = dg.Definitions(assets=[training_set, lens_finder])
