"""The Dagster instance's settings: ``dhs/dagster.yaml`` (no telemetry, no first-visit dialog,
run retries, the run queue and the pools' default limit) with the concurrency the environment asks
for, so a deployment sizes its concurrency by configuration, never by editing code:

* ``DHS_MAX_CONCURRENT_RUNS``: runs in progress at once under the daemon (the run queue's
  ``concurrency.runs.max_concurrent_runs``);
* ``DHS_POOL_LIMITS`` (``gpu=1,spark=4``): steps at once in each pool. Dagster keeps a pool's limit
  in the instance's storage, not in ``dagster.yaml`` (which holds only a default for every pool):
  :func:`apply_pool_limits` sets every pool the assets hold, to its value there or else to the
  default, so the storage follows the environment each time it is applied.

``dhs instance`` (and ``make ui``, before it starts ``dagster dev``) writes the settings into
``$DAGSTER_HOME/dagster.yaml``, applies the pool limits and starts the run-retry daemon's event
cursors (:func:`start_run_retry_cursors`); other ``dhs`` commands write the settings only into a
home that has none.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import yaml

from resources.settings import POOLS, pool_limits, setting

TEMPLATE = Path(__file__).resolve().parent / "dagster.yaml"


def instance_settings(environ: Mapping[str, str] | None = None) -> dict:
    """``dhs/dagster.yaml`` with ``DHS_MAX_CONCURRENT_RUNS`` applied."""
    settings = yaml.safe_load(TEMPLATE.read_text())
    runs = setting("DHS_MAX_CONCURRENT_RUNS", environ)
    if runs is not None:
        settings["concurrency"]["runs"]["max_concurrent_runs"] = int(runs)
    return settings


def write_instance_settings(home: Path, environ: Mapping[str, str] | None = None) -> Path:
    """Write :func:`instance_settings` to ``<home>/dagster.yaml``; returns its path."""
    home.mkdir(parents=True, exist_ok=True)
    path = home / "dagster.yaml"
    text = f"# written by dhs from {TEMPLATE.name} and the environment (dhs/instance.py)\n"
    path.write_text(text + yaml.safe_dump(instance_settings(environ), sort_keys=False))
    return path


def pool_limit_settings(environ: Mapping[str, str] | None = None) -> dict[str, int]:
    """Every pool's limit: ``DHS_POOL_LIMITS``'s, else the settings' ``pools.default_limit``."""
    default = int(instance_settings(environ)["concurrency"]["pools"]["default_limit"])
    return {pool: default for pool in POOLS} | pool_limits(setting("DHS_POOL_LIMITS", environ) or "")


def apply_pool_limits(instance, environ: Mapping[str, str] | None = None) -> dict[str, int]:
    """Set each pool's limit in ``instance``'s storage (:func:`pool_limit_settings`); returns them."""
    limits = pool_limit_settings(environ)
    for pool, limit in limits.items():
        instance.event_log_storage.set_concurrency_slots(pool, limit)
    return limits


def start_run_retry_cursors(instance) -> None:
    """Start the cursors of Dagster's run-retry daemon (the event-log consumer that ``run_retries``
    enables) at the instance's newest event where it has none: what the daemon's first tick does
    itself, but without the warning it logs for each missing cursor, so a fresh instance starts
    quietly. A cursor already kept is left as it is."""
    from dagster._daemon.auto_run_reexecution.event_log_consumer import DAGSTER_EVENT_TYPES, _create_cursor_key

    keys = {_create_cursor_key(t) for t in DAGSTER_EVENT_TYPES}
    kept = instance.daemon_cursor_storage.get_cursor_values(keys)
    newest = str(instance.event_log_storage.get_maximum_record_id() or 0)
    missing = {k: newest for k in keys if k not in kept}
    if missing:
        instance.daemon_cursor_storage.set_cursor_values(missing)
