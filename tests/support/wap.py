"""Helpers for write–audit–publish tests: snapshots of the published lake, the alerts of a run."""

from __future__ import annotations

import hashlib

import pyarrow.fs as pafs

from lake_platform.lake import Lake


def published_files(lake: Lake) -> dict[str, str]:
    """sha256 of every published file (relative path -> hex digest); staging, rejected and
    in-flight folders (top-level ``_*``) and the alert log are left out."""
    out = {}
    for info in lake.fs.get_file_info(pafs.FileSelector(lake.root, recursive=True, allow_not_found=True)):
        rel = info.path[len(lake.root) + 1 :]
        if info.type != pafs.FileType.File or rel.startswith("_") or rel.startswith("ops/"):
            continue
        with lake.fs.open_input_stream(info.path) as f:
            out[rel] = hashlib.sha256(f.read()).hexdigest()
    return out


def run_alerts(lake: Lake, run_id: str) -> list[dict]:
    """Alerts recorded in the lake's alert log for one run."""
    from lake_platform.alert_log import JsonlAlertLog

    return [e for e in JsonlAlertLog(lake).entries() if e.get("run_id") == run_id]


def events(result, kind: str) -> list:
    return [e for e in result.all_events if e.event_type_value == kind]


def run_assets(
    keys,
    resources: dict,
    instance,
    partition_key: str | None = None,
    run_config: dict | None = None,
    raise_on_error: bool = True,
    partition_range: tuple[str, str] | None = None,
):
    """Materialize the assets ``keys`` (AssetKeys or key paths) in-process with the real
    definitions (every other asset is their upstream, loaded through the IO manager) and
    ``resources`` over the environment's defaults; ``partition_range`` runs (first, last) in one
    run (assets with a single-run backfill policy)."""
    import dagster as dg

    from definitions import build_defs
    from resources import build_resources

    defs = build_defs({**build_resources(), **resources})
    job = defs.resolve_implicit_global_asset_job_def()
    selection = [k if isinstance(k, dg.AssetKey) else dg.AssetKey(list(k)) for k in keys]
    tags = (
        {
            "dagster/asset_partition_range_start": partition_range[0],
            "dagster/asset_partition_range_end": partition_range[1],
        }
        if partition_range
        else None
    )
    return job.execute_in_process(
        instance=instance,
        asset_selection=selection,
        partition_key=partition_key,
        run_config=run_config,
        raise_on_error=raise_on_error,
        tags=tags,
    )
