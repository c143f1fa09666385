"""The documentation's figures, taken from a published lake (never drawn by hand): each is a figure
an asset published, copied byte for byte into ``docs/_static/``.

    .venv/bin/python docs/figures.py --lake lakehouse        # after `dhs demo` (seed 0)

writes ``docs/_static/selection_function_seed0.png`` (the home page and the results page) from the
seed-0 demo's ``selection_function`` figures. A lake of another mock seed, of DR10 or without the
figure is refused, naming what is missing, and nothing is written.
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STATIC = os.path.join(ROOT, "docs", "_static")


def figures() -> dict[str, tuple[tuple[str, str], dict, str]]:
    """{file in docs/_static: ((group, table), its files' sub-folder, the figure's name)}."""
    from darkhaloscope.evaluation.products import FIGURES, heatmap_file
    from table_registry import SELECTION_FUNCTION

    return {"selection_function_seed0.png": (SELECTION_FUNCTION.key, FIGURES, heatmap_file("fpr=1e-2"))}


def lake_origin(lake) -> dict:
    """The survey the lake's catalogs come from (``sweep_files``' recorded origin)."""
    from darkhaloscope.survey.manifest import survey_origin
    from table_registry import SWEEP_FILES

    origin = survey_origin(lake.read_schema(*SWEEP_FILES.key))
    if origin is None:
        raise SystemExit(f"{lake.uri}: sweep_files records no survey origin; materialize the demo again")
    return origin


def main(argv=None) -> int:
    sys.path.insert(0, ROOT)
    from darkhaloscope.errors import InputError
    from lake_platform.lake import Lake

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lake", required=True, help="a published lake of the seed-0 demo")
    ap.add_argument("--out", default=STATIC, help="folder to write into (default docs/_static)")
    a = ap.parse_args(argv)
    lake = Lake(a.lake)
    try:
        origin = lake_origin(lake)
    except InputError as exc:
        raise SystemExit(f"{a.lake}: {exc}") from exc
    if origin != {"survey": "mock", "mock_seed": 0, "profile": "demo"}:
        raise SystemExit(f"{a.lake}: the figures are of the seed-0 demo; this lake is of {origin}")
    wanted = {}
    for out, (key, subfolder, name) in figures().items():
        try:
            wanted[out] = lake.read_bytes(*key, name, partition=subfolder)
        except (InputError, OSError) as exc:
            raise SystemExit(f"{a.lake}: no figure {name} of {'/'.join(key)} ({exc})") from exc
    for out, payload in wanted.items():
        with open(os.path.join(a.out, out), "wb") as f:
            f.write(payload)
        print(f"wrote {os.path.join(a.out, out)} ({len(payload):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
