"""The asset graph of ``definitions.defs`` as text: every asset in dependency order, grouped by
stage, with its inputs, its partitioning and its checks.

    .venv/bin/python docs/asset_graph.py            # print the graph

The documentation renders it at every build (the ``dhs-asset-graph`` directive of
``docs/_ext/dhs_reference.py``, on the architecture and assets pages), so no copy can go stale.
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _depths(graph, keys) -> dict:
    """Longest path from a root to each asset: a stage's assets sort after everything they read."""
    depth: dict = {}

    def visit(key) -> int:
        if key not in depth:
            parents = [p for p in graph.get(key).parent_keys if p in keys]
            depth[key] = 1 + max((visit(p) for p in parents), default=-1)
        return depth[key]

    for k in keys:
        visit(k)
    return depth


def _wrapped(items: list[str], indent: int, width: int = 100) -> str:
    """``items`` joined by ', ', broken before ``width`` characters, continuation lines at ``indent``."""
    lines, line = [], ""
    for item in items:
        piece = item if not line else f"{line}, {item}"
        if line and indent + len(piece) > width:
            lines.append(line + ",")
            line = item
        else:
            line = piece
    lines.append(line)
    return ("\n" + " " * indent).join(lines)


def asset_graph_text(defs) -> str:
    """The stage-level flow, then every asset (``table <- tables it reads``, partitioning, checks)
    in dependency order, one block per group (stage)."""
    graph = defs.resolve_asset_graph()
    keys = set(graph.get_all_asset_keys())
    depth = _depths(graph, keys)
    group = {k: graph.get(k).group_name for k in keys}
    linked = {k for k in keys if graph.get(k).parent_keys or graph.get(k).child_keys}
    checks: dict = {}
    for ck in graph.asset_check_keys:
        checks.setdefault(ck.asset_key, []).append(ck.name)
    order = {
        g: min((depth[k] for k in keys if group[k] == g and k in linked), default=len(keys))
        for g in set(group.values())
    }
    groups = sorted(order, key=lambda g: (order[g], g))
    gw = max(len(g) for g in groups)
    lines = ["Stages (a stage reads the stages after '<-'):"]
    for g in groups:
        ups = sorted(
            {group[p] for k in keys if group[k] == g for p in graph.get(k).parent_keys} - {g}, key=groups.index
        )
        lines.append(f"  {g:<{gw}}  <- {', '.join(ups) if ups else '(source)'}")
    width = max(len(k.path[-1]) for k in keys)
    indent = 2 + width + 4
    lines += ["", "Assets (table <- tables it reads) [partitioned per ...], and the checks that audit it:"]
    for g in groups:
        lines.append(f"[{g}]")
        for k in sorted((k for k in keys if group[k] == g), key=lambda k: (depth[k], k.to_user_string())):
            node = graph.get(k)
            parents = sorted(p.path[-1] for p in node.parent_keys)
            notes = []
            if node.partitions_def is not None:
                notes.append(
                    f"[per {getattr(node.partitions_def, 'name', None) or type(node.partitions_def).__name__}]"
                )
            if not node.is_materializable:
                notes.append("[external: reported by the alert sensor, not materialized]")
            lines.append(
                f"  {k.path[-1]:<{width}} <- {_wrapped(parents or ['(source)'], indent)}"
                + "".join(f"  {n}" for n in notes)
            )
            if checks.get(k):
                lines.append(" " * indent + "checks: " + _wrapped(sorted(checks[k]), indent + 8))
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    sys.path.insert(0, ROOT)
    from definitions import defs

    sys.stdout.write(asset_graph_text(defs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
