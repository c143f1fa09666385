"""Imaging stage: 101×101 g,r,z cutouts of every catalog target (one partition per sweep file),
their quality metrics, and the cutout validation with its shortcut scan."""

import itertools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import dagster as dg

from darkhaloscope.constants import STAMP_SIZE
from darkhaloscope.contracts import CUTOUTS
from darkhaloscope.errors import InputError
from darkhaloscope.imaging.quality import quality_metrics, quality_summary
from darkhaloscope.imaging.shortcuts import core_shortcut_failed, feature_aucs, shortcut_features
from darkhaloscope.lake import Lake
from darkhaloscope.stamps import from_tensor_column, to_tensor_array
from resources import LakeResource, SurveyResource
from resources.imaging import ImagingResource

from .catalog import negatives, positives, training_catalog
from .common import OWNERS, contract_result, fail_fast_on_bad_input, table_result
from .partitions import sweep_partitions

GROUP = "imaging"
#: Target columns carried from the catalog into each cutout row.
TARGET_COLUMNS = [
    "object_id", "ra", "dec", "type", "split", "sweep_file",
    "psfsize_g", "psfsize_r", "psfsize_z", "psfdepth_g", "psfdepth_r", "psfdepth_z",
    "nobs_z_bin", "type_bin",
]
CHUNK = 256
STAMP_COLUMNS = ("image", "invvar", "maskbits")


def cutout_targets(store: Lake, sweep_file: str) -> pa.Table:
    """Targets of one sweep file: its negatives (label 0) and its matched positives (label 1)."""
    neg = store.read_table("catalog", "negatives", partition={"sweep_file": sweep_file})
    neg = neg.select(TARGET_COLUMNS + ["pool", "confuser_category"]).append_column("label", pa.array(np.zeros(neg.num_rows, np.int8)))
    neg = neg.append_column("tier", pa.nulls(neg.num_rows, pa.string())).append_column("name", pa.nulls(neg.num_rows, pa.string()))
    pos = store.read_table("catalog", "positives", filter=pc.field("sweep_file") == sweep_file)
    pos = pos.select(TARGET_COLUMNS + ["tier", "name"])
    pos = pos.append_column("pool", pa.array(["positive"] * pos.num_rows, pa.string()))
    pos = pos.append_column("confuser_category", pa.nulls(pos.num_rows, pa.string()))
    pos = pos.append_column("label", pa.array(np.ones(pos.num_rows, np.int8)))
    cols = neg.column_names
    both = pa.concat_tables([neg, pos.select(cols)], promote_options="permissive")
    training_ids = store.read_table("catalog", "training_catalog", columns=["object_id"]).column("object_id")
    both = both.append_column("in_training_catalog", pc.is_in(both.column("object_id"), training_ids))
    # positives win when an object is both (it cannot be a negative: the exclusion radius)
    return both.sort_by([("object_id", "ascending"), ("label", "descending")])


def cutout_batches(targets: pa.Table, source, size: int = STAMP_SIZE):
    """Record batches of cutouts + quality metrics for ``targets``, CHUNK targets at a time."""
    for start in range(0, targets.num_rows, CHUNK):
        t = targets.slice(start, CHUNK)
        batch, failed = source.cutouts(t.column("ra").to_numpy(), t.column("dec").to_numpy(), size)
        q = quality_metrics(batch.image, batch.invvar, batch.maskbits)
        cols = {name: t.column(name).combine_chunks() for name in t.column_names}
        cols["image"] = to_tensor_array(batch.image)
        cols["invvar"] = to_tensor_array(batch.invvar)
        if batch.maskbits is not None:
            cols["maskbits"] = to_tensor_array(batch.maskbits, pa.int32())
        # sub-pixel offset of the target from the stamp's centre pixel (0 for a resampling cutout service)
        cols["dx_pix"] = pa.array(batch.dx.astype(np.float32))
        cols["dy_pix"] = pa.array(batch.dy.astype(np.float32))
        cols["band_missing"] = pa.array(batch.band_missing.astype(np.uint8))
        cols["edge_padded"] = pa.array(batch.edge_padded.astype(bool))
        cols["fetch_error"] = pa.array(failed.astype(str), pa.string())
        for name in q.column_names:
            cols[name] = q.column(name).combine_chunks()
        if (failed != "").any():
            cols["quality_ok"] = pc.and_(cols["quality_ok"], pa.array(failed == ""))
        yield pa.RecordBatch.from_pydict(cols)


@dg.asset(
    key_prefix=[GROUP],
    group_name=GROUP,
    partitions_def=sweep_partitions,
    deps=[negatives, positives, training_catalog],
    kinds={"parquet"},
    owners=OWNERS,
    code_version="1",
)
def cutouts(context: dg.AssetExecutionContext, lake: LakeResource, survey: SurveyResource, imaging: ImagingResource) -> dg.MaterializeResult:
    """101×101 g,r,z cutouts (nanomaggies; invvar; maskbits where the source has them) of every
    negative and positive of one sweep file, as Arrow fixed-shape tensors, with the target's id,
    label, tier, split, pool, conditions and per-cutout quality metrics."""
    store = lake.lake()
    name = context.partition_key
    with fail_fast_on_bad_input():
        targets = cutout_targets(store, name)
        if targets.num_rows == 0:
            raise InputError(f"sweep file {name} has no catalog targets to cut")
        source = imaging.source(survey, store)
        service = source.checkpoint_chunks
        reused = committed_cutouts(store, name, targets) if service else None
        if reused is not None:
            targets = targets.filter(pc.invert(pc.is_in(targets.column("object_id"), reused.column("object_id"))))
        batches = cutout_batches(targets, source)
        if service:
            batches = recorded_fetches(store, name, batches)
        first = next(batches, None)
        if first is None:  # every target was already fetched
            first, batches = reused.to_batches()[0], iter(reused.to_batches()[1:])
            reused = None
        if reused is not None:
            batches = itertools.chain(reused.select(first.schema.names).cast(first.schema).to_batches(), batches)
        info = store.write_table(GROUP, "cutouts", itertools.chain([first], batches), schema=first.schema, partition={"sweep_file": name})
        if service:
            store.delete_partition(GROUP, FETCHES, {"sweep_file": name})
    q = store.read_table(GROUP, "cutouts", partition={"sweep_file": name}, columns=[c for c in first.schema.names if c not in STAMP_COLUMNS])
    return table_result(store, info.uri, first.schema, info.rows, {"quality": dg.MetadataValue.json(quality_summary(q)), "source": type(source).__name__})


#: In-flight fetches from a cutout service: each chunk of a partition is committed here as it
#: arrives (partition sweep_file/chunk), so a run that dies mid-partition resumes chunk by chunk;
#: the chunks of a sweep file are dropped once its cutouts partition is committed.
FETCHES = "cutout_fetches"


def recorded_fetches(store: Lake, sweep_file: str, batches):
    """Pass ``batches`` through, committing each to the FETCHES table first (keyed by its first object id)."""
    for batch in batches:
        chunk = f"{int(batch.column('object_id')[0].as_py()):020d}"
        store.write_table(GROUP, FETCHES, pa.Table.from_batches([batch]), partition={"sweep_file": sweep_file, "chunk": chunk})
        yield batch


def committed_cutouts(store: Lake, sweep_file: str, targets: pa.Table) -> pa.Table | None:
    """Cutouts fetched without error, for targets still wanted, from the committed partition and
    from the chunks of an interrupted run (resume: a cutout service is not asked again for them);
    None when nothing was fetched yet."""
    parts = []
    if store.exists(GROUP, "cutouts", {"sweep_file": sweep_file}):
        parts.append(store.read_table(GROUP, "cutouts", partition={"sweep_file": sweep_file}))
    chunks = [p for p in store.partitions(GROUP, FETCHES) if p.get("sweep_file") == sweep_file] if store.exists(GROUP, FETCHES) else []
    parts += [store.read_table(GROUP, FETCHES, partition=p) for p in sorted(chunks, key=lambda p: p["chunk"])]
    if not parts:
        return None
    old = pa.concat_tables(parts, promote_options="permissive")
    keep = pc.and_(pc.equal(old.column("fetch_error"), ""), pc.is_in(old.column("object_id"), targets.column("object_id")))
    old = old.filter(keep)
    # an object fetched in two runs (committed, then re-fetched before a crash) is kept once
    _, first = np.unique(old.column("object_id").to_numpy(), return_index=True)
    return old.take(pa.array(np.sort(first)))


@dg.asset_check(asset=cutouts, blocking=True, partitions_def=sweep_partitions, description="schema (101×101 grz tensors), unique object ids, splits")
def cutouts_contract(context: dg.AssetCheckExecutionContext, lake: LakeResource) -> dg.AssetCheckResult:
    return contract_result(lake.lake(), GROUP, "cutouts", CUTOUTS, partition={"sweep_file": context.partition_key})


def load_stamps(store: Lake, object_ids, columns: tuple[str, ...] = ("image",)) -> tuple[list[np.ndarray], np.ndarray]:
    """([stamps (N,3,101,101) per column], found mask) for ``object_ids`` from the cutouts table, in
    the given order (ids may repeat), reading the requested stamp columns in one scan."""
    ids = pa.array(np.asarray(object_ids, dtype=np.int64))
    tbl = store.read_table(GROUP, "cutouts", columns=["object_id", *columns], filter=pc.field("object_id").isin(ids))
    pos = pc.index_in(ids, tbl.column("object_id"))
    found = pos.is_valid().to_numpy(zero_copy_only=False)
    rows = pos.filter(pos.is_valid()).to_numpy()
    out = []
    for column in columns:
        stamps = from_tensor_column(tbl.column(column), name=column)
        full = np.zeros((len(ids), *stamps.shape[1:]), np.float32)
        full[found] = stamps[rows]
        out.append(full)
    return out, found


@dg.asset(key_prefix=[GROUP], group_name=GROUP, deps=[cutouts], kinds={"parquet"}, owners=OWNERS, code_version="1")
def cutout_validation(context: dg.AssetExecutionContext, lake: LakeResource) -> dg.MaterializeResult:
    """Quality gates (all positives valid; >= 98% of negatives valid) and a shortcut scan: the AUC
    separating training-catalog positives from negatives for ~25 simple image features, with
    bootstrap 68% intervals and red (> 0.70) / yellow (> 0.60) flags."""
    store = lake.lake()
    feats, labels = [], []
    # coadd bricks and the mock sky carry maskbits stamps (saturation feature); a cutout service does not
    with_maskbits = "maskbits" in store.dataset(GROUP, "cutouts").schema.names
    columns = ["image", "label", "in_training_catalog", "quality_ok"] + (["maskbits"] if with_maskbits else [])
    for batch in store.iter_batches(GROUP, "cutouts", columns=columns, filter=pc.field("in_training_catalog"), batch_size=512):
        if batch.num_rows == 0:
            continue
        ok = batch.column("quality_ok").to_numpy(zero_copy_only=False)
        img = from_tensor_column(batch.column("image"))[ok]
        mb = batch.column("maskbits") if with_maskbits else None
        mask = from_tensor_column(mb, expected_shape=None, name="maskbits")[ok] if mb is not None and mb.null_count == 0 else None
        feats.append(shortcut_features(img, mask))
        labels.append(batch.column("label").to_numpy()[ok])
    if not feats:
        raise dg.Failure(
            description=f"no training-catalog cutouts in {store.full_uri(store.table_path(GROUP, 'cutouts'))}: "
            "materialize training_catalog and cutouts first", allow_retries=False)
    features = pa.concat_tables(feats)
    y = np.concatenate(labels)
    aucs = feature_aucs(features, y, seed_key=("cutout_validation", "shortcut-scan"))
    q = store.read_table(GROUP, "cutouts", columns=["object_id", "label", "quality_ok", "split"])
    label = q.column("label").to_numpy()
    ok = q.column("quality_ok").to_numpy(zero_copy_only=False)
    summary = {
        "n_positives": int((label == 1).sum()),
        "positives_valid_fraction": float(ok[label == 1].mean()) if (label == 1).any() else float("nan"),
        "n_negatives": int((label == 0).sum()),
        "negatives_valid_fraction": float(ok[label == 0].mean()) if (label == 0).any() else float("nan"),
        "core_shortcut_red": bool(core_shortcut_failed(aucs)),
    }
    table = aucs.append_column("scope", pa.array(["training_catalog"] * aucs.num_rows))
    info = store.write_table(GROUP, "cutout_validation", table)
    store.write_bytes(GROUP, "cutout_validation", "summary.json", _json(summary))
    flags = {r["feature"]: f"{r['flag']} (AUC {r['auc']:.3f} [{r['auc_lo']:.3f}, {r['auc_hi']:.3f}])" for r in aucs.to_pylist() if r["flag"] in ("red", "yellow")}
    return table_result(store, info.uri, table.schema, table.num_rows, {"summary": dg.MetadataValue.json(summary), "flagged_features": dg.MetadataValue.json(flags)})


def _json(d: dict) -> bytes:
    import json

    return json.dumps(d, indent=2, sort_keys=True).encode()


def _summary(store: Lake) -> dict:
    import json

    return json.loads(store.read_bytes(GROUP, "cutout_validation", "summary.json"))


@dg.asset_check(asset=cutout_validation, blocking=True, description="every positive cutout passes the quality gate")
def positives_all_valid(lake: LakeResource) -> dg.AssetCheckResult:
    s = _summary(lake.lake())
    return dg.AssetCheckResult(passed=s["positives_valid_fraction"] == 1.0, metadata={"positives_valid_fraction": s["positives_valid_fraction"], "n_positives": s["n_positives"]})


@dg.asset_check(asset=cutout_validation, blocking=True, description=">= 98% of negative cutouts pass the quality gate")
def negatives_mostly_valid(lake: LakeResource) -> dg.AssetCheckResult:
    s = _summary(lake.lake())
    return dg.AssetCheckResult(passed=s["negatives_valid_fraction"] >= 0.98, metadata={"negatives_valid_fraction": s["negatives_valid_fraction"], "threshold": 0.98})


@dg.asset_check(asset=cutout_validation, blocking=True, description="no core-brightness feature separates positives from negatives (AUC lower bound <= 0.70)")
def no_core_brightness_shortcut(lake: LakeResource) -> dg.AssetCheckResult:
    store = lake.lake()
    aucs = store.read_table(GROUP, "cutout_validation")
    core = [r for r in aucs.to_pylist() if r["core_feature"]]
    worst = max(core, key=lambda r: r["separation_lo"]) if core else None
    return dg.AssetCheckResult(
        passed=not core_shortcut_failed(aucs),
        metadata={"worst_core_feature": dg.MetadataValue.json(worst), "red_threshold": 0.70},
    )


imaging_defs = dg.Definitions(
    assets=[cutouts, cutout_validation],
    asset_checks=[cutouts_contract, positives_all_valid, negatives_mostly_valid, no_core_brightness_shortcut],
)
