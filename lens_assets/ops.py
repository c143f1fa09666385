"""Operations: the ``alerts`` table as an asset, and the sensor that marks killed runs failed.

``ops/alerts`` is written by alert delivery (the alert sensor and ``dhs``), not by a run, so it is
an external asset (an ``AssetSpec``) whose materializations are reported as runless events each
time delivery adds rows (:func:`report_alerts_table`); its contract is checked by a standalone
asset check that reads the published table.
"""

from __future__ import annotations

import dagster as dg

from darkhaloscope import audits as au
from darkhaloscope.contracts import ALERTS
from resources import LakeResource

from .common import OWNERS
from .runs import dead_run_sensor

ALERTS_KEY = dg.AssetKey(["ops", "alerts"])

alerts = dg.AssetSpec(
    ALERTS_KEY, group_name="ops", kinds={"parquet"}, owners=OWNERS,
    description="Every delivered alert (failed checks and failed runs) with the sinks it reached; written by alert delivery "
    "(alert_sensor, dhs), rebuilt from ops/alert_log/alerts.jsonl.",
)


@dg.asset_check(asset=ALERTS_KEY, name=au.ALERTS_CONTRACT.name, description=au.ALERTS_CONTRACT.description)
def alerts_contract(lake: LakeResource) -> dg.AssetCheckResult:
    outcome = au.contract_audit(au.ALERTS_CONTRACT, lake.lake().dataset(*ALERTS_KEY.path), ALERTS)
    return dg.AssetCheckResult(passed=outcome.passed, metadata={"problems": dg.MetadataValue.json(outcome.metadata["problems"])},
                               description=outcome.description)


def report_alerts_table(instance: dg.DagsterInstance, lake, n_new: int) -> None:
    """Record a runless materialization of ``ops/alerts`` after delivery added ``n_new`` rows."""
    if n_new <= 0:
        return
    uri = lake.full_uri(lake.table_path(*ALERTS_KEY.path))
    instance.report_runless_asset_event(dg.AssetMaterialization(
        asset_key=ALERTS_KEY, metadata={"dagster/uri": dg.MetadataValue.path(uri), "new_alerts": n_new,
                                        "dagster/row_count": dg.MetadataValue.int(lake.count_rows(*ALERTS_KEY.path))}))


ops_defs = dg.Definitions(assets=[alerts], asset_checks=[alerts_contract], sensors=[dead_run_sensor])
