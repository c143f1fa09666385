"""The ``dhs`` command: materialize assets, query the lake, list and export tables, cut a cutout, land visual
grades, run the demo."""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
import time
from pathlib import Path

from darkhaloscope.errors import CredentialError, InputError

from . import __version__


def _instance():
    """The persistent Dagster instance shared with ``dagster dev`` (DAGSTER_HOME, default ./.dagster_home)."""
    import dagster as dg

    from .instance import write_instance_settings

    home = _home()
    if not (home / "dagster.yaml").exists():
        write_instance_settings(home)
    return dg.DagsterInstance.get()


def _home() -> Path:
    """DAGSTER_HOME (set to ./.dagster_home, absolute, when unset)."""
    return Path(os.environ.setdefault("DAGSTER_HOME", str(Path(".dagster_home").resolve())))


def cmd_instance(args) -> int:
    import dagster as dg

    from .instance import apply_pool_limits, instance_settings, start_run_retry_cursors, write_instance_settings

    path = write_instance_settings(_home())
    with dg.DagsterInstance.get() as instance:
        limits = apply_pool_limits(instance)
        start_run_retry_cursors(instance)
    runs = instance_settings()["concurrency"]["runs"]["max_concurrent_runs"]
    pools = ", ".join(f"{k}={v}" for k, v in limits.items())
    print(f"wrote {path}: at most {runs} runs at once; pool limits {pools}")
    return 0


def cmd_backfill(args) -> int:
    from resources.settings import setting

    from .backfill import SUCCEEDED, DagsterWebserver
    from .materialize import MaterializeError, Materializer

    try:
        materializer = Materializer(_defs(), _instance())
        graph = materializer.graph
        # every table of a multi-asset that publishes its tables together (Dagster refuses a part of it)
        named = materializer.selection(args.assets).resolve(graph)
        keys = sorted({k for key in named for k in graph.assets_def_for_key(key).keys})
        server = DagsterWebserver(setting("DHS_DAGSTER_URL"))
        backfill_id = server.launch_backfill([k.path for k in keys], f"dhs backfill {' '.join(args.assets)}")
        print(f"backfill {backfill_id} submitted ({', '.join(k.to_user_string() for k in keys)}; every partition)")
        print(f"follow it at {server.url.rstrip('/')}/runs/b/{backfill_id}")
        if not args.wait:
            return 0
        status = server.wait(backfill_id, args.timeout, say=print)
    except (MaterializeError, InputError, TimeoutError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0 if status in SUCCEEDED else 1


def _lake():
    from resources.storage import open_lake

    return open_lake()


def _published_lake():
    """The lake of a command that only reads it: InputError when DHS_LAKE names a local folder
    that does not exist (an empty answer would hide a mistyped path; ``materialize`` creates it)."""
    lake = _lake()
    if not lake.is_s3 and not os.path.isdir(lake.root):
        raise InputError(f"DHS_LAKE={lake.uri!r}: no lake there (dhs materialize creates one)")
    return lake


def _defs():
    """The definitions with resources from the settings as they are now (not as they were when
    ``definitions`` was first imported in this process)."""
    from definitions import build_defs
    from resources.config import build_resources

    return build_defs(build_resources())


def cmd_materialize(args) -> int:
    from darkhaloscope.errors import PERMANENT_ERRORS

    from .materialize import MaterializeError, Materializer, MaterializeUsageError
    from .stop import STOP

    config = {}
    for item in args.config:
        name, sep, text = item.partition("=")
        try:
            if not sep or not name:
                raise ValueError("expected ASSET=JSON")
            config[name] = json.loads(text)
        except ValueError as exc:
            print(f"error: --config {item!r}: {exc}", file=sys.stderr)
            return 2
    try:
        Materializer(_defs(), _instance()).run(args.assets, config)
    except MaterializeUsageError as exc:  # a bad request: nothing ran
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except MaterializeError as exc:
        if not STOP.requested:  # a stopped run's failure is the stop's: main says so in one line
            print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    except (*PERMANENT_ERRORS, OSError) as exc:  # the lake failed outside a run (planning what is missing)
        print(f"FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


def cmd_query(args) -> int:
    from darkhaloscope.errors import StorageError
    from lake_platform.query import check_limits, query, render

    try:
        if args.max_bytes < 1024:
            raise InputError(f"--max-bytes must be >= 1024, got {args.max_bytes}")
        check_limits(args.timeout, args.max_rows)
        result = query(_published_lake(), args.sql, timeout_s=args.timeout, max_rows=args.max_rows)
    except (InputError, CredentialError, StorageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text, cut = render(result.columns, result.rows, args.format, args.max_bytes)
    print(text)
    if result.truncated:
        print(f"note: output cut at {args.max_rows:,} rows (--max-rows); the query has more", file=sys.stderr)
    if cut:
        print(f"note: output cut at {args.max_bytes:,} bytes (--max-bytes): long cells shortened", file=sys.stderr)
    return 0


def cmd_tables(args) -> int:
    from darkhaloscope.errors import StorageError
    from lake_platform.query import describe_tables, format_rows

    refused: dict[str, str] = {}
    try:
        info = describe_tables(_published_lake(), refused)
    except (InputError, CredentialError, StorageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    cols = ["table", "group", "rows", "partitions", "uri"]
    print(format_rows(cols, [tuple(d[c] for c in cols) for d in info], args.format))
    for why in refused.values():
        print(f"error: {why}", file=sys.stderr)
    return 2 if refused else 0


def cmd_verify(args) -> int:
    from darkhaloscope.errors import StorageError

    try:
        lake = _published_lake()
        tables = lake.tables()
        problems = [p for group, asset in tables for p in lake.verify(group, asset, adopt=args.adopt)]
    except (InputError, CredentialError, StorageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    adopted = " (parts without a manifest adopted as they are)" if args.adopt else ""
    print(f"verified {len(tables)} tables{adopted}: {len(problems)} problems")
    return 2 if problems else 0


def cmd_export(args) -> int:
    from darkhaloscope.errors import StorageError
    from lake_platform.export import export_table

    columns = [c.strip() for c in args.columns.split(",") if c.strip()] if args.columns else None
    out = args.out or f"{args.table.rsplit('/', 1)[-1]}.{args.format}"
    try:
        done = export_table(_published_lake(), args.table, args.format, out, columns)
    except (InputError, CredentialError, StorageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the output file (its message names the path)
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for note in done["notes"]:
        print(f"note: {note}", file=sys.stderr)
    print(f"wrote {done['path']}: {done['rows']:,} rows, {done['columns']} columns ({done['format']})")
    return 0


def cmd_fetch_list(args) -> int:
    from darkhaloscope.survey.inputs import box_paths

    try:
        paths = box_paths(args.ra_min, args.ra_max, args.dec_min, args.dec_max, coadds=not args.no_coadds)
        if args.missing:
            from resources.config import build_resources

            survey = build_resources()["survey"]
            if survey.is_mock:
                raise InputError("--missing needs DHS_SURVEY set to a DR10 mirror (it is the mock survey)")
            fs, root = survey.filesystem()
            infos = fs.get_file_info([f"{root}/{p}" for p in paths])
            paths = [p for p, i in zip(paths, infos) if i.type.name != "File"]
    except (InputError, CredentialError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    base = args.base.rstrip("/") + "/" if args.base else ""
    print("\n".join(base + p for p in paths))
    return 0


def _cutout_max_size() -> int:
    """The largest ``dhs cutout --size``: DHS_CUTOUT_MAX_SIZE (checked by ``validate``), else the
    library's default."""
    from darkhaloscope.imaging.cutout_io import MAX_CUTOUT_SIZE
    from resources.settings import setting

    raw = setting("DHS_CUTOUT_MAX_SIZE")
    return int(raw) if raw else MAX_CUTOUT_SIZE


def cmd_cutout(args) -> int:
    from darkhaloscope.imaging.cutout_io import CutoutUnavailable, check_cutout_request, cutout_format, cutout_to_file
    from resources.config import build_resources

    try:
        max_size = _cutout_max_size()
        check_cutout_request(args.ra, args.dec, args.size, max_size)
        cutout_format(args.out)
        if os.path.lexists(args.out) and not args.force:
            raise InputError(f"{args.out} exists: pass --force to replace it")
        res = build_resources()
        source = res["imaging"].source(res["survey"])
        path = cutout_to_file(source, args.ra, args.dec, args.size, args.out, max_size)
    except (InputError, CredentialError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (CutoutUnavailable, OSError) as exc:  # OSError: the survey or the output file (its message names the path)
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {path}")
    return 0


def cmd_demo(args) -> int:
    from .demo_summary import print_demo_summary
    from .materialize import MaterializeError, Materializer

    t0 = time.monotonic()
    try:
        Materializer(_defs(), _instance()).run(["evaluation_report", "candidate_gallery", "real_lens_validation"])
    except MaterializeError as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    print_demo_summary(_lake(), time.monotonic() - t0)
    return 0


def cmd_grade(args) -> int:
    import hashlib

    from darkhaloscope.search.grades import UNGRADED, checked_grades_file
    from table_registry import CANDIDATES, VISUAL_GRADES

    from .materialize import failure_message, quiet_console

    path = os.path.abspath(args.file)
    try:
        lake = _lake()
        rounds = lake.table(*VISUAL_GRADES.key)
        previous = rounds.read() if rounds.exists() else None
        payload = checked_grades_file(path, "", lake.table(*CANDIDATES.key), previous, args.again)
    except (InputError, CredentialError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # the run lands only the bytes checked here: it re-reads the file and compares their sha256
    checked = {"csv_path": path, "csv_sha256": hashlib.sha256(payload).hexdigest(), "again": args.again}
    import dagster as dg

    result = (
        _defs()
        .resolve_implicit_global_asset_job_def()
        .execute_in_process(
            instance=_instance(),
            asset_selection=[dg.AssetKey(list(VISUAL_GRADES.key))],
            raise_on_error=False,
            run_config={"ops": {"search__visual_grades": {"config": checked}}, **quiet_console()},
        )
    )
    if not result.success:
        print(f"FAILED: {failure_message(result)}", file=sys.stderr)
        return 1
    grades = lake.read_table(*VISUAL_GRADES.key)
    last = max(grades.column("round").to_pylist())
    landed = [g for r, g in zip(grades.column("round").to_pylist(), grades.column("grade").to_pylist()) if r == last]
    ungraded = landed.count(UNGRADED)
    print(
        f"landed {len(landed) - ungraded} grades as round {last} of visual_grades, {ungraded} shown ungraded "
        "(awaiting inspection) "
        f"({grades.num_rows} rows in all rounds)"
    )
    return 0


#: Where the documentation of the command line lives (the site's sources; ``make docs`` builds
#: them to docs/_build/html/). Each command's page is an anchor of COMMANDS_PAGE.
DOCS_INDEX = "docs/index.md"
COMMANDS_PAGE = "docs/reference/commands.md"
SETTINGS_PAGE = "docs/reference/settings.md"

#: The settings each command reads: groups of resources/settings.py (so a setting added to a
#: group is named by the commands that read the group) or single variables. ``materialize`` and
#: ``demo`` run the pipeline, which reads them all.
_ALL_GROUPS = ("storage", "survey", "mock survey", "compute", "spark", "orchestration", "alerts", "console")
_LAKE_SETTINGS = ("DHS_LAKE", "DHS_S3_ENDPOINT", "DHS_S3_CONNECT_TIMEOUT_S", "DHS_S3_REQUEST_TIMEOUT_S")
READS: dict[str, tuple[str, ...]] = {
    "materialize": _ALL_GROUPS,
    "demo": _ALL_GROUPS,
    "query": _LAKE_SETTINGS,
    "tables": _LAKE_SETTINGS,
    "verify": _LAKE_SETTINGS,
    "export": _LAKE_SETTINGS,
    "fetch-list": ("DHS_SURVEY", "DHS_S3_ENDPOINT"),
    "cutout": ("survey", "mock survey", "DHS_PROFILE", "DHS_DEVICE"),
    "grade": ("storage", "alerts", "console"),
    "backfill": ("DHS_DAGSTER_URL", "DHS_PARTITIONS_PER_RUN", "DHS_SURVEY", "DHS_LAKE"),
    "instance": ("DHS_MAX_CONCURRENT_RUNS", "DHS_POOL_LIMITS"),
    "closure": _ALL_GROUPS,
    "selection": ("DHS_LAKE", "DHS_S3_ENDPOINT", "DHS_PROFILE"),
}
#: Variables outside DHS_ a command reads: the Dagster instance it shares with the UI.
_DAGSTER_HOME = ("DAGSTER_HOME", "the Dagster instance shared with the UI (default ./.dagster_home)")
_USES_INSTANCE = {"materialize", "demo", "grade", "backfill", "instance", "closure"}
#: Commands that run assets in this process: a SIGTERM or SIGINT stops them (``dhs.stop``).
_RUNS = {"materialize", "demo", "grade", "closure"}


def settings_read_by(command: str) -> list:
    """The :class:`~resources.settings.Setting` entries ``command`` reads, in declaration order."""
    from resources.settings import SETTINGS

    wanted = READS[command]
    return [s for s in SETTINGS if s.group in wanted or s.name in wanted]


def _epilog(command: str) -> str:
    """The help's closing lines: the variables the command reads (each with its default and
    meaning, or by group when there are many) and the page that documents the command."""
    settings = settings_read_by(command)
    lines = ["environment (all optional; every DHS_ variable set is checked before anything runs):"]
    if len(settings) <= 8:
        width = max(len(s.name) for s in settings)
        for s in settings:
            default = f" (default {s.default})" if s.default is not None else ""
            lines.append(f"  {s.name:<{width}}  {s.meaning}{default}")
    else:
        groups: dict[str, list[str]] = {}
        for s in settings:
            groups.setdefault(s.group, []).append(s.name)
        lines += [
            textwrap.fill(", ".join(names), 100, initial_indent=f"  {group}: ", subsequent_indent=" " * 4)
            for group, names in groups.items()
        ]
        lines.append(f"  (defaults and meanings: {SETTINGS_PAGE})")
    if command in _USES_INSTANCE:
        lines.append(f"  {_DAGSTER_HOME[0]}: {_DAGSTER_HOME[1]}")
    lines.append(f"docs: {COMMANDS_PAGE}#dhs-{command}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dhs",
        description="Dark Halo Scope: lens finding and its selection function on DR10.",
        epilog="Configuration is by environment variables (DHS_*, all optional: the defaults run the embedded "
        f"mock survey); each command's --help names those it reads, and {SETTINGS_PAGE} lists them all. "
        f"Documentation: {DOCS_INDEX} (make docs builds it to docs/_build/html/index.html).",
    )
    p.add_argument("--version", action="version", version=f"dhs {__version__} (Dark Halo Scope)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str, description: str) -> argparse.ArgumentParser:
        return sub.add_parser(
            name,
            help=help,
            description=textwrap.fill(description, 100),
            epilog=_epilog(name),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )

    _lake_commands(command)
    _file_commands(command)
    _workflow_commands(command)
    _selection_commands(command)
    return p


def _lake_commands(command) -> None:
    """``materialize``, ``query``, ``tables``, ``verify`` and ``cutout`` (``command`` adds one sub-command)."""
    m = command(
        "materialize",
        "materialize assets (all partitions; stale or missing upstream assets first)",
        "Materialize the named assets (all their partitions) and, first, every upstream asset partition that "
        "Dagster records as missing or stale or that the lake does not hold. Progress per partition; on failure "
        "exits 1 naming the asset, partition and error.",
    )
    m.add_argument(
        "assets",
        nargs="+",
        help="asset names (negatives), keys (catalog/negatives) or Dagster selections (group:catalog)",
    )
    m.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="ASSET=JSON",
        help="run config of one of the named assets, as in the launchpad: injection_plan='{\"realisation\": 1}' "
        "(repeatable)",
    )
    m.set_defaults(func=cmd_materialize)
    q = command(
        "query",
        "read-only SQL over the lake (every table is a view)",
        "Read-only DuckDB SQL over the lake: every table is a view named after its asset. Statements that write "
        "are refused and files outside the lake cannot be read; exit 2 with an error line otherwise.",
    )
    q.add_argument("sql")
    q.add_argument("--format", choices=["table", "csv", "json"], default="table")
    q.add_argument(
        "--timeout", type=float, default=60.0, metavar="S", help="interrupt the query after S seconds (default 60)"
    )
    q.add_argument(
        "--max-rows",
        type=int,
        default=10_000,
        metavar="N",
        help="print at most N rows (default 10,000; a note says when cut)",
    )
    q.add_argument(
        "--max-bytes",
        type=int,
        default=16 * 2**20,
        metavar="B",
        help="print at most about B bytes (default 16 MiB; long cells shortened; a note says when cut)",
    )
    q.set_defaults(func=cmd_query)
    t = command(
        "tables",
        "tables with row counts, partitions and URIs",
        "Each published table of the lake with its group, row count, partitions and URI.",
    )
    t.add_argument("--format", choices=["table", "csv", "json"], default="table")
    t.set_defaults(func=cmd_tables)
    v = command(
        "verify",
        "check every part of the lake against its manifest (sizes and sha256); --adopt records missing manifests",
        "Check every table's files against the manifests their commits recorded: a stray file, a missing part or "
        "one whose size or sha256 differs is named (error: <group>/<table>: <file>: ...) and the exit is 2. "
        "--adopt first records a manifest, from its bytes as they are, for each part no manifest records (a "
        "lake written before manifests); check such a lake's contents before adopting it.",
    )
    v.add_argument("--adopt", action="store_true", help="record a manifest for every part that has none")
    v.set_defaults(func=cmd_verify)
    c = command(
        "cutout",
        "one g,r,z cutout as FITS cube (band, y, x) or PNG",
        "One g,r,z cutout from the configured imaging source (the survey's coadd bricks, the mock sky or a "
        "cutout service): a FITS cube (band, y, x) with a TAN WCS and an INVVAR HDU, or an asinh colour PNG. "
        "Bad arguments exit 2 before anything is read; a position without data exits 1 and writes nothing.",
    )
    c.add_argument("ra", type=float, help="degrees, [0, 360)")
    c.add_argument("dec", type=float, help="degrees, [-90, 90]")
    c.add_argument("--size", type=int, default=101, help="pixels, 1 to DHS_CUTOUT_MAX_SIZE")
    c.add_argument("--out", required=True, help="output file: .fits, .fit, .fits.gz or .png")
    c.add_argument("--force", action="store_true", help="replace the output file if it exists")
    c.set_defaults(func=cmd_cutout)


def _file_commands(command) -> None:
    """``export`` and ``fetch-list`` (``command`` adds one sub-command)."""
    e = command(
        "export",
        "write a table as FITS, ECSV, VOTable or Parquet with its units and descriptions (astropy's writers)",
        "Write a published table (every partition) to one file in a format astronomers exchange, with astropy's "
        "writers: fits (units in TUNITn, descriptions in TCOMMn), ecsv, votable or parquet (units and "
        "descriptions in the format's own header). Stamps become multidimensional columns. Bad arguments exit 2; "
        "the file appears only once complete.",
    )
    e.add_argument("table", help="table name as in dhs tables (sweeps) or group/name (survey/sweeps)")
    e.add_argument("--format", choices=["fits", "ecsv", "votable", "parquet"], default="fits")
    e.add_argument("--out", help="output file (default: TABLE.FORMAT in the current folder)")
    e.add_argument("--columns", help="comma-separated columns to export (default: all)")
    e.set_defaults(func=cmd_export)
    f = command(
        "fetch-list",
        "the DR10 files a run over a sky box reads (sweeps, photo-z sweeps, spectra, coadds), one path a line",
        "Print every file of a DR10 mirror that a run over the sky box RA_MIN..RA_MAX, DEC_MIN..DEC_MAX (degrees) "
        "reads, relative to the mirror's root (or as URLs with --base): the sweep files of the 5-degree blocks it "
        "overlaps and their photo-z sweeps, the SDSS spectra files, survey-bricks.fits.gz and the coadds "
        "(image and invvar per band, maskbits) of every brick it overlaps. --missing prints only those the "
        "mirror DHS_SURVEY lacks. Feed it to a downloader: dhs fetch-list ... --base URL | wget -x -nH -i -",
    )
    f.add_argument("ra_min", type=float)
    f.add_argument("ra_max", type=float)
    f.add_argument("dec_min", type=float)
    f.add_argument("dec_max", type=float)
    f.add_argument("--base", help="prefix each path (the release's URL or s3:// prefix)")
    f.add_argument("--no-coadds", action="store_true", help="leave out the coadd bricks")
    f.add_argument("--missing", action="store_true", help="only the files the mirror DHS_SURVEY lacks")
    f.set_defaults(func=cmd_fetch_list)


def _selection_commands(command) -> None:
    """``closure`` and ``selection`` (``command`` adds one sub-command)."""
    cl = command(
        "closure",
        "materialize a fresh closure-sized mock survey end to end and print its closure tables",
        "Materialize selection_closure and lens_forecast (and everything upstream) on a fresh closure-sized "
        "mock survey (2 sweep files of 125,000 rows, 200 hidden lenses; DHS_MOCK_SEED picks the realisation) "
        "in its own lake and Dagster instance under --dir, then print the closure (both methods, every "
        "threshold, with the power to see a 15 % bias), the thresholds and the forecast. Exit 0 on success, "
        "1 naming the failing asset, 2 when --dir holds an earlier run (use --replace).",
    )
    cl.add_argument("--dir", default="", help="folder of the run's lake and instance (default ./closure/seed-<seed>)")
    cl.add_argument("--replace", action="store_true", help="delete --dir first when it holds an earlier run")
    cl.set_defaults(func=lambda args: _selection_cmds().cmd_closure(args, _defs, _instance))
    se = command(
        "selection",
        "C(θ_E, z_l) for a lens population at one threshold, from the published lake (read-only)",
        "The selection function reweighted to a population: a named one (proposal, lenspop, mock) or a Parquet "
        "table of ψ samples (columns theta_e_arcsec, z_l, src_mag_r, src_r_sersic_arcsec, src_n_sersic, "
        "src_beta_frac, optionally src_q, src_g_minus_r, src_r_minus_z and a weight), importance-weighted "
        "against the injections' proposal, each row with its N_eff. A table missing a column, with values "
        "outside the proposal's support, non-positive weights or too few samples, or an unknown threshold, "
        "exits 2 naming the column and range (or the usable thresholds); nothing is written.",
    )
    se.add_argument("population", help="proposal, lenspop, mock, or a Parquet file of ψ samples")
    se.add_argument("--threshold", required=True, help="threshold name, e.g. fpr=1e-2 (see the thresholds table)")
    se.add_argument("--kind", choices=["any", "cell", "theta_e", "z_l", "all"], default="any")
    se.add_argument("--merge", type=int, default=None, help="grid cells merged per axis (default the profile's)")
    se.add_argument("--format", choices=["table", "csv"], default="table")
    se.set_defaults(func=lambda args: _selection_cmds().cmd_selection(args))


def _workflow_commands(command) -> None:
    """``grade``, ``backfill``, ``instance`` and ``demo`` (``command`` adds one sub-command)."""
    g = command(
        "grade",
        "land a grades CSV (the gallery's export: object_id, grade A, B, C, not_a_lens or ungraded, ra, dec, "
        "score, model_version, known) as the next round of visual_grades",
        "Land a grades CSV exported from the candidate gallery as the next round of visual_grades. Every row "
        "must be a published candidate of the same model at the same position, each id once; otherwise "
        "error: <file>:<line>: … and exit 2, nothing landed. Earlier rounds are never changed. Then "
        "`dhs materialize evaluation_report candidate_gallery` retrains with the grades and searches again.",
    )
    g.add_argument("file", help="CSV exported from the candidate gallery")
    g.add_argument("--again", action="store_true", help="land a file whose bytes a round already holds")
    g.set_defaults(func=cmd_grade)
    b = command(
        "backfill",
        "submit a backfill of every partition of the named assets to the Dagster webserver; the daemon runs it",
        "Submit a backfill of every partition of the named assets (and of the tables published with them) to "
        "the running Dagster webserver (DHS_DAGSTER_URL), as the UI's Materialize all does; its daemon plans "
        "and runs it through the run queue and the pools, so closing the terminal stops nothing. --wait "
        "follows it and exits 1 unless it succeeded.",
    )
    b.add_argument("assets", nargs="+", help="asset names, keys or Dagster selections, as for materialize")
    b.add_argument("--wait", action="store_true", help="follow the backfill until it ends (exit 1 unless it succeeded)")
    b.add_argument("--timeout", type=float, default=86400.0, metavar="S", help="stop following after S seconds")
    b.set_defaults(func=cmd_backfill)
    i = command(
        "instance",
        "write the instance's settings and pool limits from the environment",
        "Write $DAGSTER_HOME/dagster.yaml from dhs/dagster.yaml with the run queue's limit "
        "(DHS_MAX_CONCURRENT_RUNS), and set every pool's limit in the instance (DHS_POOL_LIMITS, else the "
        "default). make ui runs it before the UI starts.",
    )
    i.set_defaults(func=cmd_instance)
    d = command(
        "demo",
        "run the whole graph on the embedded mock survey and print the headline numbers",
        "Materialize the whole graph (through evaluation_report, candidate_gallery and real_lens_validation) and "
        "print the lens finder's headline numbers, the selection function, the real-lens recall and its "
        "validation against C, the top search candidates "
        "and the paths of the evaluation report and the candidate gallery.",
    )
    d.set_defaults(func=cmd_demo)


def _selection_cmds():
    from . import selection

    return selection


def main(argv: list[str] | None = None) -> int:
    from resources.settings import setting, validate

    from .stop import STOP

    args = build_parser().parse_args(argv)
    try:
        validate()
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.command not in _RUNS:
        return args.func(args)
    STOP.install(float(setting("DHS_STOP_GRACE_S")))
    try:
        status = args.func(args)
    except KeyboardInterrupt:  # a signal between runs (within one, Dagster interrupts its step)
        STOP.interrupted()
        status = 0
    finally:
        STOP.uninstall()
    return STOP.finish() if STOP.requested else status


if __name__ == "__main__":
    sys.exit(main())
