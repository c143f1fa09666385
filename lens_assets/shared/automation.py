"""Declarative automation: with the daemon running, a sweep file that appears in the survey flows
through ingest, the catalog, the search and the candidates without a command.

``sweep_file_sensor`` registers the new file's ``sweep_file`` partition; then each asset of the flow
carries its condition, and :func:`survey_flow_sensor` (an ``AutomationConditionSensorDefinition``)
evaluates them and submits what they request as backfills, which the daemon runs with each
asset's backfill policy:

* the per-sweep-file assets (``sweeps``, ``negatives`` and ``selection_funnel``,
  ``search_targets``, ``search_scores`` and ``search_stamps``): :data:`NEW_PARTITION`, Dagster's
  ``on_missing`` — a partition added after the sensor first evaluated runs once its upstream
  partitions are there (a retrained lens finder does not re-run the search: that is a backfill);
* the survey-wide tables the search feeds (``candidates``, ``candidate_gallery``):
  :data:`UPSTREAM_UPDATED`, Dagster's ``eager`` — they run again when an upstream partition is
  updated, once none is missing or in progress.

Partitions already there when the sensor first evaluates are not run by it: the survey's files
are brought in by a backfill through the daemon (``dhs backfill``, or the UI's "Materialize all").
The training side (cutouts, the lens finder, injections, evaluation) is never re-run by it.
``DHS_AUTOMATION=off`` leaves the sensor stopped (it can be started in the UI).
"""

from __future__ import annotations

import dagster as dg

from resources.settings import setting
from table_registry import (
    CANDIDATE_GALLERY,
    CANDIDATES,
    NEGATIVES,
    SEARCH_SCORES,
    SEARCH_STAMPS,
    SEARCH_TARGETS,
    SELECTION_FUNNEL,
    SWEEPS,
)

#: Per-sweep-file assets: a new partition runs once its upstream partitions are there.
NEW_PARTITION = dg.AutomationCondition.on_missing()
#: Survey-wide tables of the search: run again when an upstream partition is updated.
UPSTREAM_UPDATED = dg.AutomationCondition.eager()
#: The tables the flow materializes, in order.
FLOW = (
    SWEEPS,
    NEGATIVES,
    SELECTION_FUNNEL,
    SEARCH_TARGETS,
    SEARCH_SCORES,
    SEARCH_STAMPS,
    CANDIDATES,
    CANDIDATE_GALLERY,
)


def survey_flow_sensor() -> dg.AutomationConditionSensorDefinition:
    """The sensor that evaluates the flow's conditions (every 30 s), running unless
    ``DHS_AUTOMATION=off``."""
    running = setting("DHS_AUTOMATION") == "on"
    return dg.AutomationConditionSensorDefinition(
        "survey_flow",
        target=dg.AssetSelection.assets(*[list(t.key) for t in FLOW]),
        default_status=dg.DefaultSensorStatus.RUNNING if running else dg.DefaultSensorStatus.STOPPED,
        minimum_interval_seconds=30,
        description="A new sweep file's partitions through ingest, catalog and search; the candidates after them.",
    )
