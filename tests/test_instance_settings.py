"""The instance's concurrency comes from configuration: ``dhs instance`` writes the run queue's limit
from DHS_MAX_CONCURRENT_RUNS into dagster.yaml (the rest of dhs/dagster.yaml as it is) and
sets every pool's limit in the instance from DHS_POOL_LIMITS (else the default), and a bad value
is refused by name before anything runs."""

from __future__ import annotations

import dagster as dg
import pytest
import yaml

from darkhaloscope.errors import InputError
from dhs.instance import TEMPLATE, apply_pool_limits, start_run_retry_cursors, write_instance_settings
from resources.settings import validate


def _limits(instance: dg.DagsterInstance) -> dict[str, int]:
    return {p: instance.event_log_storage.get_concurrency_info(p).slot_count for p in ("gpu", "spark")}


def test_run_queue_and_pool_limits_follow_the_environment(tmp_path):
    template = yaml.safe_load(TEMPLATE.read_text())
    path = write_instance_settings(tmp_path, {"DHS_MAX_CONCURRENT_RUNS": "7"})
    written = yaml.safe_load(path.read_text())
    assert written["concurrency"]["runs"]["max_concurrent_runs"] == 7
    assert {k: v for k, v in written.items() if k != "concurrency"} == {
        k: v for k, v in template.items() if k != "concurrency"
    }
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        # what the daemon's run queue reads
        assert instance.get_concurrency_config().run_queue_config.max_concurrent_runs == 7
        assert apply_pool_limits(instance, {"DHS_POOL_LIMITS": "spark=4"}) == {"gpu": 1, "spark": 4}
        assert _limits(instance) == {"gpu": 1, "spark": 4}
        apply_pool_limits(instance, {})  # the setting gone: every pool back to the default
        assert _limits(instance) == {"gpu": 1, "spark": 1}
    default = yaml.safe_load(write_instance_settings(tmp_path / "default", {}).read_text())
    assert default["concurrency"] == template["concurrency"]


@pytest.mark.parametrize(
    "name, value",
    [
        ("DHS_POOL_LIMITS", "tpu=2"),
        ("DHS_POOL_LIMITS", "spark=0"),
        ("DHS_POOL_LIMITS", "spark"),
        ("DHS_MAX_CONCURRENT_RUNS", "0"),
        ("DHS_PARTITIONS_PER_RUN", "many"),
        ("DHS_AUTOMATION", "sometimes"),
    ],
)
def test_bad_concurrency_settings_are_refused_by_name(name, value):
    with pytest.raises(InputError, match=name):
        validate({name: value})


def test_the_run_retry_cursors_start_at_the_newest_event_and_a_kept_one_stays(tmp_path):
    from dagster._daemon.auto_run_reexecution.event_log_consumer import (
        DAGSTER_EVENT_TYPES,
        _fetch_persisted_cursors,
    )

    write_instance_settings(tmp_path, {})
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        start_run_retry_cursors(instance)
        assert set(_fetch_persisted_cursors(instance, DAGSTER_EVENT_TYPES, logger=None).values()) == {0}
        first = DAGSTER_EVENT_TYPES[0]
        instance.daemon_cursor_storage.set_cursor_values({f"EVENT_LOG_CONSUMER_CURSOR-{first.value}": "41"})
        start_run_retry_cursors(instance)
        assert _fetch_persisted_cursors(instance, DAGSTER_EVENT_TYPES, logger=None)[first] == 41
