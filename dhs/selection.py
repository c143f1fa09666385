"""``dhs closure`` (a fresh closure-sized mock survey end to end, then its closure tables) and
``dhs selection`` (C for a population from the published lake, read-only)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from darkhaloscope.errors import InputError
from resources.settings import setting
from resources.storage import open_lake

#: The closure-sized mock (docs/how-to/selection-closure.md): two 5°×5° sweep files of 125,000 rows
#: (about 13,000 searched galaxies) and 200 hidden lenses, all in the closure reserve.
CLOSURE_MOCK = {"DHS_MOCK_SWEEP_FILES": "2", "DHS_MOCK_ROWS_PER_FILE": "125000", "DHS_MOCK_HIDDEN_LENSES": "200"}

CLOSURE_SQL = """
SELECT threshold_name, method, n_hidden, round(n_predicted, 1) AS n_predicted, round(n_predicted_sd, 1) AS sd,
       n_recovered, round(pull, 2) AS pull, round(power_15pct, 2) AS power_15pct
FROM selection_closure WHERE bin = 'all' ORDER BY threshold_name, method
"""
THRESHOLDS_SQL = """
SELECT name, kind, round(threshold, 4) AS threshold, n_valid_negatives, n_above, n_hidden_in_negatives
FROM thresholds ORDER BY kind, target
"""
FORECAST_SQL = """
SELECT threshold_name, round(n_per_deg2, 3) AS per_deg2, round(n_per_deg2_sd, 3) AS sd, round(n_in_area, 1) AS in_area,
       round(n_unmeasured_per_deg2, 3) AS unmeasured_per_deg2
FROM lens_forecast WHERE bin = 'all' ORDER BY threshold_name
"""


def cmd_closure(args, defs_factory, instance_factory) -> int:
    """Materialize ``selection_closure`` and ``lens_forecast`` (and everything upstream) on a fresh
    closure-sized mock in its own lake and Dagster instance (``--dir``, default
    ./closure/seed-<DHS_MOCK_SEED>), then print the closure, the thresholds and the forecast."""
    from lake_platform.query import format_rows, run_query

    from .materialize import MaterializeError, Materializer

    seed = setting("DHS_MOCK_SEED")
    root = Path(args.dir or f"closure/seed-{seed}").resolve()
    if root.exists() and any(root.iterdir()) and not args.replace:
        print(
            f"error: {root} exists and is not empty: a closure run starts from a fresh lake (--replace)",
            file=sys.stderr,
        )
        return 2
    if root.exists() and args.replace:
        import shutil

        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)
    os.environ.update(CLOSURE_MOCK)
    os.environ["DHS_LAKE"] = str(root / "lakehouse")
    os.environ["DAGSTER_HOME"] = str(root / "dagster_home")
    t0 = time.monotonic()
    try:
        Materializer(defs_factory(), instance_factory()).run(["selection_closure", "lens_forecast"])
    except MaterializeError as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    lake = open_lake()
    print(
        f"\nClosure on the mock of seed {seed} ({', '.join(f'{k}={v}' for k, v in CLOSURE_MOCK.items())}), "
        f"{time.monotonic() - t0:.0f} s, lake {lake.uri}"
    )
    for title, sql in (
        ("Closure (bin = all): hidden lenses recovered against predicted", CLOSURE_SQL),
        ("Thresholds (n_hidden_in_negatives: hidden lenses among the negatives)", THRESHOLDS_SQL),
        ("Forecast (LensPop-like lenses x C(lenspop))", FORECAST_SQL),
    ):
        cols, rows = run_query(lake, sql)
        print(f"\n{title}:\n{format_rows(cols, rows)}")
    return 0


def cmd_selection(args) -> int:
    """C(θ_E, z_l | population) at one threshold from the published lake: a named population or a
    Parquet table of ψ samples; read-only, nothing is published."""
    import pyarrow.compute as pc

    from darkhaloscope.evaluation.populations import (
        NAMED_POPULATIONS,
        POPULATION_MERGE,
        named_population,
        selection_for_population,
    )
    from darkhaloscope.evaluation.scoring import injection_rows
    from darkhaloscope.lensing.bank import plan_grid, plan_proposal
    from lake_platform.query import format_rows
    from lens_assets.closure import user_population
    from resources.settings import setting
    from table_registry import INJECTION_PLAN, INJECTION_SCORES, THRESHOLDS

    try:
        lake = open_lake()
        for t in (INJECTION_PLAN, INJECTION_SCORES, THRESHOLDS):
            if not lake.exists(*t.key):
                raise InputError(f"{lake.uri} has no published {t.key[1]}: materialize selection_function first")
        plan = lake.read_table(*INJECTION_PLAN.key)
        proposal = plan_proposal(plan)
        theta_e, z_l = plan_grid(plan)
        if args.population in NAMED_POPULATIONS:
            population = named_population(args.population, proposal)
        else:
            population = user_population(args.population, proposal)
        injections = injection_rows(lake.read_table(*INJECTION_SCORES.key), "injection")
        thresholds = lake.read_table(*THRESHOLDS.key)
        merge = POPULATION_MERGE.get(setting("DHS_PROFILE"), 1) if args.merge is None else args.merge
        table = selection_for_population(
            population, args.threshold, injections, thresholds, proposal, theta_e, z_l, merge=merge
        )
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.kind != "any":
        table = table.filter(pc.equal(table.column("kind"), args.kind))
    if args.format == "csv":
        import pyarrow.csv as pcsv

        pcsv.write_csv(table, sys.stdout.buffer)
        return 0
    names = ["kind", "theta_e_centre", "z_l_centre", "n_injections", "completeness", "ci68_lo", "ci68_hi", "n_eff"]
    names.append("sufficient")
    rows = [tuple(r[n] if not isinstance(r[n], float) else round(r[n], 4) for n in names) for r in table.to_pylist()]
    print(f"population {population.name}: {population.description}")
    print(format_rows(names, rows))
    return 0
