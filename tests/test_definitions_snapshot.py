"""A snapshot of the definitions — assets, checks and their blocking flags, partitions, pools,
code versions, resources, sensors — so that an unintended change to the graph fails CI.

An intended change: ``.venv/bin/python -m pytest tests/test_definitions_snapshot.py --snapshot-update``
and commit the updated ``tests/__snapshots__/`` file with the change.
"""

from __future__ import annotations

import dagster as dg


def describe(defs: dg.Definitions) -> dict:
    """Plain data of everything the code location defines."""
    graph = defs.resolve_asset_graph()
    assets = {}
    for key in sorted(graph.get_all_asset_keys(), key=lambda k: k.to_user_string()):
        node = graph.get(key)
        partitions = node.partitions_def
        assets[key.to_user_string()] = {
            "group": node.group_name,
            "materializable": node.is_materializable,
            "code_version": node.code_version,
            "partitions": getattr(partitions, "name", None) or (type(partitions).__name__ if partitions else None),
            "backfill_policy": str(node.backfill_policy.policy_type.value) if node.backfill_policy else None,
            "pools": sorted(node.pools or []),
            "kinds": sorted(node.kinds),
            "upstream": sorted(k.to_user_string() for k in node.parent_keys),
            "checks": {ck.name: graph.get(ck).blocking for ck in sorted(node.check_keys, key=lambda c: c.name)},
        }
    return {
        "assets": assets,
        "sensors": sorted(s.name for s in defs.sensors or []),
        "resources": sorted(defs.resources or {}),
        "standalone_checks": sorted(ck.to_user_string() for c in defs.asset_checks or [] for ck in c.check_keys),
    }


def test_the_definitions_match_their_snapshot(snapshot):
    from definitions import defs

    assert describe(defs) == snapshot
