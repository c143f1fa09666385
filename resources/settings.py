"""Every ``DHS_`` environment variable, once: its default, what it means, and the check its value
must pass. ``dhs`` validates them all before it plans anything, and so does the code location
when it loads (``build_resources``), so a bad value fails at once with ``error: DHS_… …``, not
deep inside a step. The README and the reference pages list them from here.

This module is the only one that reads a ``DHS_`` variable (``tests/test_settings_read_once.py``):
the resources take their values from :func:`setting` (``resources/config.py``), their field
defaults from :func:`default`, the Pipes workers theirs from their Pipes context or from here, and
the science library every value as a parameter. It imports no Dagster, so the Pipes workers can.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import Callable, Mapping

from darkhaloscope.errors import InputError
from lake_platform.alerts import add_secret_source
from lake_platform.staging import DEFAULT_REJECTED_KEEP_DAYS
from mock_survey.paths import DEFAULT_MOCK_DIR

#: ``DHS_SEARCH_LAUNCH`` values: where ``search_scores`` scores its chunks.
SEARCH_LAUNCHES = ("local", "spark", "pipes")
#: ``DHS_CATALOG_LAUNCH`` values: where the negatives' Spark job runs.
CATALOG_LAUNCHES = ("local", "pipes-s3")
PROFILES = ("demo", "full")
DEVICES = ("auto", "cpu", "cuda")


@dataclass(frozen=True)
class Setting:
    """An environment variable: ``default`` (None: unset), ``meaning``, the ``group`` it is listed
    under, and ``check``, which raises ValueError with the reason for a value it refuses."""

    name: str
    default: str | None
    meaning: str
    group: str
    #: raises ValueError with the reason (or the library's InputError naming the variable)
    check: Callable[[str], None] | None = None
    #: whether the value is a credential: redacted from every alert (``lake_platform.alerts.redact``)
    secret: bool = False


def _one_of(*allowed: str) -> Callable[[str], None]:
    def check(value: str) -> None:
        if value not in allowed:
            raise ValueError(f"expected one of {', '.join(allowed)}")

    return check


def _whole(minimum: int) -> Callable[[str], None]:
    def check(value: str) -> None:
        if not value.isdigit() or int(value) < minimum:
            raise ValueError(f"expected a whole number >= {minimum}")

    return check


def _positive_number(value: str) -> None:
    try:
        number = float(value)
    except ValueError:
        raise ValueError("expected a number") from None
    if not 0 < number < math.inf:
        raise ValueError("expected a finite number > 0")


def _url(value: str) -> None:
    if not re.match(r"^https?://[^/\s]+", value):
        raise ValueError("expected an http:// or https:// URL")


def _s3_uri(value: str) -> None:
    """An ``s3://`` URI must name its bucket (``s3://`` alone would be taken as a folder ``s3:``)."""
    if not re.match(r"^s3://[^/\s]+", value):
        raise ValueError("expected s3://bucket/prefix (no bucket named)")


def _lake_uri(value: str) -> None:
    if value.startswith("s3://"):
        _s3_uri(value)
    elif re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", value) and not value.startswith("file://"):
        raise ValueError("expected a local folder or s3://bucket/prefix")


def _survey(value: str) -> None:
    if value == "mock":
        return
    if value.startswith("s3://"):
        _s3_uri(value)
    elif not os.path.isdir(value.removeprefix("file://")):
        raise ValueError("no such folder (expected mock, a DR10 mirror's folder or s3://bucket/prefix)")


def _mock_dir(value: str) -> None:
    """The mock cache folder need not exist yet (it is made on first use), its parent must."""
    path = os.path.abspath(value)
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError("is not a folder")
    if not os.path.isdir(os.path.dirname(path)):
        raise ValueError(f"its parent folder {os.path.dirname(path)} does not exist")


def _cutout_source(value: str) -> None:
    if value != "auto":
        _url(value)


def _lens_model(value: str) -> None:
    from darkhaloscope.lensing.profiles import lens_model

    lens_model(tuple(value.split("+")))


def _source_model(value: str) -> None:
    from darkhaloscope.lensing.source_models import parse_source_model

    try:
        parse_source_model(value)
    except InputError as exc:  # a ValueError here, so validate() names the variable
        raise ValueError(str(exc)) from None


def _device(value: str) -> None:
    _one_of(*DEVICES)(value)
    if value == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ValueError("torch sees no CUDA device on this machine (use auto or cpu)")


#: The concurrency pools the assets hold: ``gpu`` (training, scoring and the search's local and
#: Pipes launches) and ``spark`` (the catalog stage and the search's Spark launch).
POOLS = ("gpu", "spark")


def pool_limits(value: str) -> dict[str, int]:
    """``pool=limit,...`` (``DHS_POOL_LIMITS``) as {pool: limit}; ValueError for a malformed entry,
    an unknown pool or a limit below 1."""
    out = {}
    for item in filter(None, (v.strip() for v in value.split(","))):
        pool, sep, limit = item.partition("=")
        pool, limit = pool.strip(), limit.strip()
        if not sep or pool not in POOLS or not limit.isdigit() or int(limit) < 1:
            raise ValueError(f"expected pool=limit entries (pools {', '.join(POOLS)}, limits >= 1), got {item!r}")
        out[pool] = int(limit)
    return out


def _pool_limits(value: str) -> None:
    pool_limits(value)


def search_pool(launch: str) -> str:
    """The pool a search launch holds: ``spark`` for the Spark launch (its tasks run on the Spark
    session's executors), ``gpu`` for the others (the compute device, here or on a Pipes host)."""
    return "spark" if launch == "spark" else "gpu"


def _spark_master(value: str) -> None:
    from darkhaloscope.catalog.spark_conf import master_kind

    master_kind(value)


def _host(value: str) -> None:
    if not re.match(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.\-]*)$", value):
        raise ValueError("expected a host name or an IP address")


def _spark_conf(value: str) -> None:
    from darkhaloscope.catalog.spark_conf import CONF_ENV, operator_conf

    operator_conf({CONF_ENV: value})


def _spark_timeout(value: str) -> None:
    from darkhaloscope.catalog.spark_conf import TIMEOUT_ENV, timeout_s

    timeout_s({TIMEOUT_ENV: value})


def _launch_prefix(value: str) -> None:
    import shlex

    try:
        words = shlex.split(value)
    except ValueError as exc:
        raise ValueError(f"not a command line: {exc}") from None
    if not words:
        raise ValueError("expected a command prefix such as 'ssh gpu01' or 'srun --gres=gpu:1 --'")


def _launch_timeout(value: str) -> None:
    _positive_number(value)
    if float(value) < 5:
        raise ValueError("expected at least 5 seconds (a step's interpreter must start and reach the bucket)")


def _launch_python(value: str) -> None:
    import shlex

    if shlex.quote(value) != value:
        raise ValueError("expected a path without spaces or shell characters (ssh hands it to the far host's shell)")


def _spark_memory(value: str) -> None:
    if not re.match(r"^[0-9]+[kmgt]?$", value.lower()):
        raise ValueError("expected a JVM memory size such as 2g or 512m")


SETTINGS: tuple[Setting, ...] = (
    Setting("DHS_LAKE", "./lakehouse", "lake root: a local folder or s3://bucket/prefix", "storage", _lake_uri),
    Setting(
        "DHS_S3_ENDPOINT",
        None,
        "S3 endpoint override (any S3-compatible server), e.g. http://127.0.0.1:9000",
        "storage",
        _url,
    ),
    Setting(
        "DHS_S3_CONNECT_TIMEOUT_S",
        "5",
        "seconds the S3 clients of the lake and the survey mirror wait to open a connection (each attempt)",
        "storage",
        _positive_number,
    ),
    Setting(
        "DHS_S3_REQUEST_TIMEOUT_S",
        "30",
        "seconds the S3 clients of the lake and the survey mirror wait for an answer (each attempt)",
        "storage",
        _positive_number,
    ),
    Setting(
        "DHS_REJECTED_KEEP_DAYS",
        f"{DEFAULT_REJECTED_KEEP_DAYS:g}",
        "days rejected (failed-audit) data is kept under _rejected/ for inspection",
        "storage",
        _positive_number,
    ),
    Setting(
        "DHS_SURVEY",
        "mock",
        "mock (the embedded survey) or the root of a DR10 mirror, a folder or s3://",
        "survey",
        _survey,
    ),
    Setting(
        "DHS_SURVEY_S3_ANONYMOUS",
        "false",
        "true: read an s3:// DHS_SURVEY in a public bucket with unsigned requests (no credentials); the lake "
        "keeps the credential chain",
        "survey",
        _one_of("false", "true"),
    ),
    Setting(
        "DHS_KNOWN_LENS_THETA_E",
        None,
        "a Parquet or CSV table of measured Einstein radii of known lenses (columns name, the lenscat name, and "
        "theta_e_arcsec) that real_lens_validation joins on a real survey, where lenscat has none",
        "survey",
    ),
    Setting(
        "DHS_CUTOUT_SOURCE",
        "auto",
        "auto (coadd bricks of the survey, or the mock sky) or the base URL of a cutout service",
        "survey",
        _cutout_source,
    ),
    Setting(
        "DHS_CUTOUT_MAX_SIZE",
        None,
        "the largest dhs cutout --size in pixels (default the library's limit)",
        "survey",
        _whole(1),
    ),
    Setting(
        "DHS_MOCK_SEED",
        "0",
        "seed of the embedded mock survey and sky: another value is an independent sky",
        "mock survey",
        _whole(0),
    ),
    Setting("DHS_MOCK_DIR", DEFAULT_MOCK_DIR, "cache folder of the generated mock surveys", "mock survey", _mock_dir),
    Setting(
        "DHS_MOCK_SWEEP_FILES",
        None,
        "number of mock sweep files (5°x5° blocks; default the profile's): a survey-shaped "
        "partition count for scale tests",
        "mock survey",
        _whole(1),
    ),
    Setting(
        "DHS_MOCK_ROWS_PER_FILE", None, "rows per mock sweep file (default the profile's)", "mock survey", _whole(100)
    ),
    Setting(
        "DHS_MOCK_HIDDEN_LENSES",
        None,
        "lenses painted into the mock sky that no catalog lists (default the profile's; their truth is kept apart)",
        "mock survey",
        _whole(0),
    ),
    Setting(
        "DHS_PROFILE",
        "demo",
        "demo (minutes on 2 CPU cores) or full (survey scale) sizes for grids, samples and epochs",
        "compute",
        _one_of(*PROFILES),
    ),
    Setting(
        "DHS_SELECTION_PROPOSAL",
        "broad",
        "the proposal q(ψ) the selection-function injections are drawn from: broad (wider than every "
        "population C is reweighted to) or training (the training stream's prior); recorded in every "
        "selection table's metadata",
        "compute",
        _one_of("broad", "training"),
    ),
    Setting(
        "DHS_LENS_MODEL",
        "SIE+SHEAR",
        "the injections' lens: mass profiles of darkhaloscope/lensing/profiles joined by +, e.g. "
        "EPL+SHEAR+MULTIPOLE_M3+MULTIPOLE_M4; parameters beyond SIE + shear are drawn from "
        "the priors the profiles declare and the composition is recorded with the injection plan",
        "compute",
        _lens_model,
    ),
    Setting(
        "DHS_SOURCE_MODEL",
        "sersic",
        "the injections' source light, in the selection bank and the training stream alike: sersic, "
        "sersic_clumps (Sérsic + 2–6 star-forming clumps), cosmos (real HST COSMOS galaxies, rotated, "
        "flipped and rescaled) or a mix such as sersic:0.5,cosmos:0.5; recorded with every table it shapes",
        "compute",
        _source_model,
    ),
    Setting(
        "DHS_NUISANCE",
        "none",
        "imaging nuisance on the injected arcs, in the selection bank and the training stream alike: none, "
        "or survey (PSF anisotropy with its spread measured on the shipped DECam PSFEx models); recorded "
        "with every table it shapes",
        "compute",
        _one_of("none", "survey"),
    ),
    Setting(
        "DHS_SELECTION_POPULATION",
        None,
        "a Parquet table of a user's lens population (ψ samples, optional weight column) that "
        "selection_populations adds beside its named populations, as population user:<file stem>",
        "compute",
    ),
    Setting("DHS_DEVICE", "auto", "auto, cpu or cuda for simulation, training and scoring", "compute", _device),
    Setting(
        "DHS_SEARCH_LAUNCH",
        "local",
        "where search_scores scores its chunks: local, spark or pipes",
        "compute",
        _one_of(*SEARCH_LAUNCHES),
    ),
    Setting(
        "DHS_CATALOG_LAUNCH",
        "local",
        "where the negatives' Spark job runs: local or pipes-s3 (needs DHS_PIPES_BUCKET)",
        "compute",
        _one_of(*CATALOG_LAUNCHES),
    ),
    Setting("DHS_PIPES_BUCKET", None, "S3 bucket for the context and messages of Pipes launches", "compute"),
    Setting(
        "DHS_LAUNCH_PREFIX",
        None,
        "command prefix of every step launched through Dagster Pipes (training, the pipes search, the "
        "pipes-s3 catalog job), e.g. 'ssh gpu01' or 'srun --gres=gpu:1 --': bootstrap on the command line, "
        "context and messages in DHS_PIPES_BUCKET, outputs only to the lake",
        "compute",
        _launch_prefix,
    ),
    Setting(
        "DHS_LAUNCH_TIMEOUT_S",
        "90",
        "seconds a step launched through DHS_LAUNCH_PREFIX may take to open its Pipes session (its first "
        "message in the bucket) before it is stopped and the step fails",
        "compute",
        _launch_timeout,
    ),
    Setting(
        "DHS_LAUNCH_PYTHON",
        None,
        "Python interpreter of the steps launched through DHS_LAUNCH_PREFIX, on their host (default: this "
        "interpreter's path)",
        "compute",
        _launch_python,
    ),
    Setting(
        "DHS_SPARK_MASTER",
        "local[*]",
        "Spark master of the catalog stage and the search's Spark launch: local[N], "
        "spark://host:port, yarn or k8s://... (default: the operator's spark.master, else local[*])",
        "spark",
        _spark_master,
    ),
    Setting(
        "DHS_SPARK_DRIVER_HOST",
        None,
        "address the Spark driver advertises to executors (default: the local address "
        "that routes to a spark:// master; the hostname for yarn and k8s)",
        "spark",
        _host,
    ),
    Setting(
        "DHS_SPARK_CONF",
        None,
        "a Spark properties file (spark-defaults.conf format) applied on top of "
        "$SPARK_CONF_DIR/spark-defaults.conf; the code sets only what the operator left unset",
        "spark",
        _spark_conf,
    ),
    Setting(
        "DHS_SPARK_PYTHON",
        None,
        "Python interpreter of the executors (default: the driver's interpreter path)",
        "spark",
    ),
    Setting(
        "DHS_SPARK_TIMEOUT_S",
        "120",
        "seconds a cluster may take to give the driver an executor, at start or after "
        "losing them all, before the step fails naming the master and the driver's address",
        "spark",
        _spark_timeout,
    ),
    Setting("DHS_SPARK_DRIVER_MEMORY", "2g", "memory of the Spark driver's JVM", "spark", _spark_memory),
    Setting("DHS_SPARK_LOG", None, "file of the Spark logs (default <DAGSTER_HOME>/logs/spark.log)", "spark"),
    Setting(
        "DHS_STOP_GRACE_S",
        "30",
        "seconds a dhs command stopped by SIGTERM or SIGINT has to end before its processes are killed",
        "orchestration",
        _positive_number,
    ),
    Setting(
        "DHS_PARTITIONS_PER_RUN",
        "128",
        "sweep files one run covers in the per-sweep-file assets (sweeps, search_targets, cutouts, "
        "search_scores, cutout_scores): their multi-run backfill policy, and dhs materialize's runs",
        "orchestration",
        _whole(1),
    ),
    Setting(
        "DHS_MAX_CONCURRENT_RUNS",
        None,
        "runs in progress at once under the daemon (the instance's concurrency.runs.max_concurrent_runs; "
        "default dhs/dagster.yaml's)",
        "orchestration",
        _whole(1),
    ),
    Setting(
        "DHS_POOL_LIMITS",
        None,
        "steps at once per pool, e.g. gpu=1,spark=4 (pools gpu and spark; default dhs/dagster.yaml's "
        "default_limit for each)",
        "orchestration",
        _pool_limits,
    ),
    Setting(
        "DHS_DAGSTER_URL",
        "http://127.0.0.1:3000",
        "base URL of the Dagster webserver that dhs backfill submits to (make ui's by default)",
        "orchestration",
        _url,
    ),
    Setting(
        "DHS_AUTOMATION",
        "on",
        "on: with the daemon running, a new sweep file flows through ingest, catalog, search and candidates "
        "(the survey_flow sensor starts running); off: that sensor starts stopped",
        "orchestration",
        _one_of("on", "off"),
    ),
    Setting(
        "DHS_ALERT_WEBHOOK", None, "URL that receives a JSON POST for each failed asset check or run", "alerts", _url
    ),
    Setting("DHS_SLACK_CHANNEL", None, "Slack channel for alerts (with a bot token in DHS_SLACK_TOKEN)", "alerts"),
    Setting(
        "DHS_SLACK_TOKEN",
        None,
        "Slack bot token for alerts (else SLACK_BOT_TOKEN); never logged",
        "alerts",
        secret=True,
    ),
    Setting(
        "DHS_LOG_LEVEL",
        "WARNING",
        "level of Dagster's console logger in dhs (the event log keeps everything)",
        "console",
        _one_of("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
    ),
)
BY_NAME = {s.name: s for s in SETTINGS}


def setting(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The value of ``name`` (a declared setting): the environment's, stripped of surrounding
    white space as :func:`validate` checks it, else its default; an empty value counts as unset."""
    env = os.environ if environ is None else environ
    return (env.get(name) or "").strip() or BY_NAME[name].default


def default(name: str) -> str | None:
    """The default of the declared setting ``name`` (None: unset), for a resource field's default."""
    return BY_NAME[name].default


def variable(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The value of the environment variable ``name`` when it is not a declared setting (a name
    chosen in a resource's config, e.g. the Slack token's), else :func:`setting`; None when unset."""
    if name in BY_NAME:
        return setting(name, environ)
    return (os.environ if environ is None else environ).get(name) or None


#: The operator's Spark variables (not ours) the Spark library reads beside the ``spark`` settings.
SPARK_OPERATOR_VARIABLES = ("SPARK_CONF_DIR", "SPARK_HOME")


def spark_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment the Spark library takes (``darkhaloscope.catalog.spark_conf``'s ``env``): the
    ``spark`` settings that are set (unset ones keep the library's layering of the operator's files
    over its defaults) and the operator's ``SPARK_CONF_DIR`` and ``SPARK_HOME``."""
    env = os.environ if environ is None else environ
    names = [s.name for s in SETTINGS if s.group == "spark"] + list(SPARK_OPERATOR_VARIABLES)
    return {name: env[name] for name in names if env.get(name)}


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """The values of the settings that hold credentials (``secret``), for redaction."""
    return [v for v in (setting(s.name, environ) for s in SETTINGS if s.secret) if v]


add_secret_source(secret_values)


def validate(environ: Mapping[str, str] | None = None) -> None:
    """InputError naming the first ``DHS_`` variable whose value its check refuses (every set
    variable is checked, in the order of :data:`SETTINGS`)."""
    env = os.environ if environ is None else environ
    for s in SETTINGS:
        raw = env.get(s.name)
        if raw and s.check is not None:
            try:
                s.check(raw.strip())
            except InputError:  # the library's own check, whose message names the variable
                raise
            except ValueError as exc:
                raise InputError(f"{s.name}={raw!r}: {exc}") from None
    over_s3 = [
        f"{name}={setting(name, env)!r}"
        for name, on in (
            ("DHS_CATALOG_LAUNCH", setting("DHS_CATALOG_LAUNCH", env) == "pipes-s3"),
            ("DHS_LAUNCH_PREFIX", bool(setting("DHS_LAUNCH_PREFIX", env))),
        )
        if on
    ]
    if over_s3 and not setting("DHS_PIPES_BUCKET", env):
        raise InputError(f"{over_s3[0]} needs DHS_PIPES_BUCKET (the bucket of the Pipes context and messages)")
