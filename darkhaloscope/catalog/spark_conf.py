"""The Spark session of the catalog stage and of the search: its settings and a bounded start.

**Settings** (:func:`spark_settings`), lowest precedence first:

1. ours, each only where the operator left it unset: Arrow on, the UI off, UTC, the driver's
   memory (``$DHS_SPARK_DRIVER_MEMORY``, default 2g), the executors' Python (this interpreter), and
   by kind of master:

   - ``local[...]``: the driver on 127.0.0.1 (nothing leaves the machine) and shuffle partitions
     equal to the local cores;
   - ``spark://host:port``: the driver advertises the local address that routes to the master's
     host (the kernel's choice, :func:`route_address`), so executors on other hosts can dial it
     back; Spark's own default, the host name, may resolve to 127.0.0.1 (Spark docs,
     *configuration.md*, "Networking");
   - ``yarn``, ``k8s://...``: Spark's default driver host (the host name; its own fallback avoids
     loopback addresses).

   Parallelism is the cluster's (``defaultParallelism``: the executors' cores), never a constant.
2. the operator's: ``$SPARK_CONF_DIR/spark-defaults.conf`` (else ``$SPARK_HOME/conf/``), the file
   spark-submit reads, then the properties file named by ``$DHS_SPARK_CONF``, key by key on top.
   Settings made in code take precedence over spark-defaults.conf inside Spark, which is why ours
   are left out wherever a file sets the key.
3. the environment named in the design: ``$DHS_SPARK_MASTER`` (default: the files' ``spark.master``,
   else ``local[*]``), ``$DHS_SPARK_DRIVER_HOST``, ``$DHS_SPARK_PYTHON``;
4. the caller's explicit ``conf`` (tests, the log configuration).

The environment is a parameter (``env``) of every function here, never the process's: the Dagster
layer and the Pipes workers pass ``resources.settings.spark_env()``, tests a mapping of their own.

**A bounded start** (:func:`spark_session`): for a ``spark://`` master the master's port must
accept a connection, and on any cluster an executor must register with the driver within
``$DHS_SPARK_TIMEOUT_S`` seconds (default 120): an executor that registers has dialled the driver's
advertised address, so none registering means they could not reach it (or the cluster has no free
cores). Either failure stops the session and raises :class:`SparkClusterError` naming the master and
the advertised address.

**A bounded run**: on a cluster a watchdog thread cancels the running jobs, naming the executors
that were lost, once for a quarter of the timeout the application has had no executor that is
registered and accepts a TCP connection on its block-manager port. Spark alone would notice a
host that went silent only after its heartbeat timeout (``spark.network.timeout``, 120 s) plus, per
executor and one after another, an unanswered request to the master to replace it (the same 120 s
when the master is cut off too), and would then wait for new executors for ever. The session is
marked lost, and the next :func:`spark_session` stops it and starts a new one.
"""

from __future__ import annotations

import os
import re
import socket
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping

from .. import s3_retries
from ..errors import InputError

MASTER_ENV, DRIVER_HOST_ENV, CONF_ENV = "DHS_SPARK_MASTER", "DHS_SPARK_DRIVER_HOST", "DHS_SPARK_CONF"
PYTHON_ENV, TIMEOUT_ENV, DRIVER_MEMORY_ENV = "DHS_SPARK_PYTHON", "DHS_SPARK_TIMEOUT_S", "DHS_SPARK_DRIVER_MEMORY"
DEFAULT_MASTER = "local[*]"
#: Memory of the driver's JVM unless ``$DHS_SPARK_DRIVER_MEMORY`` says otherwise.
DEFAULT_DRIVER_MEMORY = "2g"
#: Seconds a cluster may take to give the driver an executor, at start or after losing them all.
DEFAULT_TIMEOUT_S = 120.0

_LOCAL = re.compile(r"^local(\[(\*|[1-9]\d*)(,\s*[1-9]\d*)?\])?$")
_LOCAL_CLUSTER = re.compile(r"^local-cluster\[\d+,\s*\d+,\s*\d+\]$")
_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.\-]*):(\d{1,5})$")


class SparkClusterError(RuntimeError):
    """The Spark cluster could not run the work: its master is unreachable, its executors could not
    reach the driver, or the executors were lost during a run. The cluster may come back: a later
    run can succeed."""


def master_kind(master: str) -> str:
    """``local``, ``standalone``, ``yarn`` or ``k8s`` for a Spark master URL; InputError naming
    ``DHS_SPARK_MASTER`` for anything else."""
    m = master.strip()
    if _LOCAL.match(m) or _LOCAL_CLUSTER.match(m):
        return "local"
    if m.startswith("spark://"):
        standalone_endpoints(m)
        return "standalone"
    if m == "yarn":
        return "yarn"
    if m.startswith("k8s://") and len(m) > len("k8s://"):
        return "k8s"
    raise InputError(
        f"Spark master {master!r} ({MASTER_ENV} or spark.master): expected local, local[N], local[*], "
        "spark://host:port[,host:port...], yarn or k8s://https://host:port"
    )


def standalone_endpoints(master: str) -> list[tuple[str, int]]:
    """The (host, port) of each master of ``spark://h1:p1[,h2:p2...]`` (a standby list)."""
    out = []
    for item in master[len("spark://") :].split(","):
        m = _HOST_PORT.match(item.strip())
        if not m or not 0 < int(m.group(2)) < 65536:
            raise InputError(f"Spark master {master!r} ({MASTER_ENV} or spark.master): {item!r} is not host:port")
        out.append((m.group(1).strip("[]"), int(m.group(2))))
    return out


def read_properties(path: str | os.PathLike, variable: str) -> dict[str, str]:
    """The settings of a Spark properties file (spark-defaults.conf format: ``key value``,
    ``key=value`` or ``key: value`` per line, ``#`` / ``!`` comments, a trailing backslash
    continues a line); values are stripped as Spark strips them. ``variable`` names where the path
    came from, for the error when the file cannot be read."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the Spark properties file {path} ({variable}): {exc}") from exc
    out: dict[str, str] = {}
    logical = ""
    for number, raw in enumerate(text.splitlines(), start=1):
        line = (logical + raw.lstrip()) if logical else raw.strip()
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical = line[:-1]
            continue
        logical = ""
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        m = re.match(r"^([^\s=:]+)\s*[=:\s]\s*(.*)$", line) or re.match(r"^([^\s=:]+)$", line)
        if not m or not m.group(1).startswith("spark."):
            raise InputError(f"{path} ({variable}) line {number}: {raw.strip()!r} is not 'spark.<key> <value>'")
        out[m.group(1)] = (m.group(2) if m.lastindex and m.lastindex > 1 else "").strip()
    return out


def operator_conf(env: Mapping[str, str]) -> dict[str, str]:
    """The operator's Spark settings: ``spark-defaults.conf`` in ``$SPARK_CONF_DIR`` (else
    ``$SPARK_HOME/conf``) where it exists, then the file named by ``$DHS_SPARK_CONF`` (which must
    exist) on top, key by key."""
    conf_dir = env.get("SPARK_CONF_DIR") or (os.path.join(env["SPARK_HOME"], "conf") if env.get("SPARK_HOME") else None)
    out: dict[str, str] = {}
    if conf_dir and os.path.isfile(os.path.join(conf_dir, "spark-defaults.conf")):
        out.update(read_properties(os.path.join(conf_dir, "spark-defaults.conf"), "SPARK_CONF_DIR"))
    named = env.get(CONF_ENV, "").strip()
    if named:
        if not os.path.isfile(named):
            raise InputError(f"{CONF_ENV}={named!r}: no such Spark properties file")
        out.update(read_properties(named, CONF_ENV))
    return out


def spark_master(env: Mapping[str, str], files: Mapping[str, str] | None = None) -> str:
    """The master: ``$DHS_SPARK_MASTER``, else the operator's ``spark.master``, else ``local[*]``."""
    files = operator_conf(env) if files is None else files
    master = (env.get(MASTER_ENV) or "").strip() or files.get("spark.master") or DEFAULT_MASTER
    master_kind(master)
    return master


def timeout_s(env: Mapping[str, str]) -> float:
    """``$DHS_SPARK_TIMEOUT_S`` (default 120): seconds a cluster may take to give the driver an
    executor, at start or after it lost them all."""
    raw = (env.get(TIMEOUT_ENV) or "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 4.0 <= value <= 86400.0:
        raise InputError(f"{TIMEOUT_ENV}={raw!r}: expected a number of seconds between 4 and 86400")
    return value


def route_address(host: str, port: int) -> str:
    """The local IP address the kernel would use to reach ``host:port`` (a UDP ``connect`` picks
    the route and sends nothing). SparkClusterError when the host does not resolve or no route
    leads to it."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except socket.gaierror as exc:
        raise SparkClusterError(f"the Spark master host {host!r} does not resolve: {exc}") from exc
    last: OSError | None = None
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as s:
            try:
                s.connect(address)
                return s.getsockname()[0]
            except OSError as exc:
                last = exc
    raise SparkClusterError(f"no local address routes to the Spark master host {host} ({last})")


def local_cores(master: str) -> int:
    """Cores of a local master: N of ``local[N]``, this machine's for ``local`` / ``local[*]``."""
    m = _LOCAL.match(master)
    if m and m.group(2) and m.group(2) != "*":
        return int(m.group(2))
    return os.cpu_count() or 1


def spark_settings(
    master: str | None = None, conf: Mapping[str, str] | None = None, *, env: Mapping[str, str]
) -> dict[str, str]:
    """Every setting the session starts with (module doc: ours < the operator's files < the
    environment < ``conf``); ``master`` (else the environment and files) picks the kind of master."""
    files = operator_conf(env)
    conf = dict(conf or {})
    master = master or conf.get("spark.master") or spark_master(env, files)
    kind = master_kind(master)
    timeout_s(env)  # a bad value fails here, before anything starts
    ours = {
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # Large Arrow batches amortise the per-batch Python overhead of mapInArrow (sampling hashes).
        "spark.sql.execution.arrow.maxRecordsPerBatch": "131072",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": env.get(DRIVER_MEMORY_ENV, DEFAULT_DRIVER_MEMORY),
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.adaptive.enabled": "true",
        "spark.pyspark.python": sys.executable,
    }
    if kind == "local":
        ours.update({"spark.driver.host": "127.0.0.1", "spark.sql.shuffle.partitions": str(local_cores(master))})
    elif kind == "standalone" and "spark.driver.host" not in files and not env.get(DRIVER_HOST_ENV):
        host, port = standalone_endpoints(master)[0]
        ours["spark.driver.host"] = route_address(host, port)
    settings = {**ours, **files, "spark.master": master}
    if env.get(DRIVER_HOST_ENV, "").strip():
        settings["spark.driver.host"] = env[DRIVER_HOST_ENV].strip()
    if env.get(PYTHON_ENV, "").strip():
        settings["spark.pyspark.python"] = env[PYTHON_ENV].strip()
    settings.update(conf)
    if "spark.driver.host" in settings and not {"spark.driver.bindAddress"} & (set(files) | set(conf)):
        # Spark's own default, said explicitly: a JVM that ran an earlier session of this process
        # keeps that session's settings as system properties, and a stale bind address would win.
        settings["spark.driver.bindAddress"] = settings["spark.driver.host"]
    return settings


# ---------------------------------------------------------------------------------- the session

#: Application ids of sessions whose executors were all lost (set by the watchdog).
_LOST: set[str] = set()


def spark_session(
    master: str | None = None,
    app_name: str = "darkhaloscope",
    conf: Mapping[str, str] | None = None,
    *,
    env: Mapping[str, str],
):
    """This process's SparkSession with :func:`spark_settings`, started within
    ``$DHS_SPARK_TIMEOUT_S`` (module doc). A session already running on the same master is
    returned as it is (one SparkContext per process); one on another master is an error, and
    one whose executors were lost is stopped and replaced."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    settings = spark_settings(master, conf, env=env)
    master = settings["spark.master"]
    kind = master_kind(master)
    limit = timeout_s(env)
    if kind == "standalone":
        check_master_reachable(master, min(10.0, limit))
    active = SparkContext._active_spark_context
    if active is not None:
        if active.applicationId in _LOST:
            _LOST.discard(active.applicationId)
            active.stop()
        elif active.master == master or master_kind(active.master) == kind == "local":
            return SparkSession.builder.getOrCreate()
        else:
            raise SparkClusterError(
                f"a Spark session on {active.master} is already running in this process: "
                f"stop it before starting one on {master}"
            )
    if SparkContext._jvm is not None:
        # The JVM outlives a stopped context and keeps the first session's --conf settings as
        # system properties, which a new context reads: forget a driver address it should not reuse.
        for key in ("spark.driver.host", "spark.driver.bindAddress"):
            if key not in settings:
                SparkContext._jvm.java.lang.System.clearProperty(key)
    # PySpark sends the executors the interpreter named by $PYSPARK_PYTHON when the context starts
    # (pyspark/core/context.py), not spark.pyspark.python, so the environment says it too.
    os.environ["PYSPARK_PYTHON"] = settings["spark.pyspark.python"]
    builder = SparkSession.builder.appName(app_name)
    for k, v in settings.items():
        builder = builder.config(k, v)
    session = builder.getOrCreate()
    if kind != "local":
        # Executors take seconds to start: this early only the driver's block manager is there.
        ours_only = block_managers(session)
        wait_for_executors(session, limit)
        ExecutorWatchdog(session, ours_only, limit / 4).start()
    return session


def check_master_reachable(master: str, seconds: float) -> None:
    """SparkClusterError unless some master of ``spark://...`` accepts a TCP connection within
    ``seconds`` (Spark itself retries an unreachable master for a minute before giving up)."""
    errors = []
    for host, port in standalone_endpoints(master):
        try:
            socket.create_connection((host, port), timeout=seconds).close()
            return
        except OSError as exc:
            errors.append(f"{host}:{port}: {exc}")
    raise SparkClusterError(f"the Spark master {master} ({MASTER_ENV}) is unreachable: {'; '.join(errors)}")


def block_managers(session) -> set[str]:
    """``host:port`` of every block manager registered with the driver: the driver's own (always
    there while the context runs) and one per live executor."""
    return set(str(session.sparkContext._jsc.sc().getExecutorMemoryStatus().keys().mkString(" ")).split())


def driver_address(session) -> str:
    """``host:port`` the driver advertises to executors (``spark.driver.host`` / ``.port``)."""
    conf = session.sparkContext.getConf()
    return f"{conf.get('spark.driver.host')}:{conf.get('spark.driver.port')}"


def wait_for_executors(session, seconds: float, poll_s: float = 0.25) -> int:
    """Block until an executor registers (returns how many have); after ``seconds``, or when the
    cluster gives the application up first, stop the session and raise SparkClusterError."""
    sc = session.sparkContext
    master, driver = sc.master, driver_address(session)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not _stopped(sc):
        found = len(block_managers(session)) - 1
        if found > 0:
            return found
        time.sleep(poll_s)
    gave_up = _stopped(sc)
    session.stop()
    when = "before the cluster gave the application up" if gave_up else f"within {seconds:.0f} s ({TIMEOUT_ENV})"
    raise SparkClusterError(
        f"no executor of {master} registered with the driver {when}: the executors could not reach the driver at "
        f"{driver} (spark.driver.host; set {DRIVER_HOST_ENV} to an address of this machine that the cluster's hosts "
        "can reach), or the cluster has no free cores or memory for this application"
    )


class ExecutorWatchdog(threading.Thread):
    """Cancels the running jobs, naming the lost executors and the master, once for ``grace_s``
    seconds no executor of the application was both registered and reachable (module doc); marks
    the session lost. ``driver`` is the driver's own block manager (``host:port``)."""

    def __init__(self, session, driver: set[str], grace_s: float, poll_s: float = 1.0):
        super().__init__(name="dhs-spark-executor-watchdog", daemon=True)
        self.session, self.driver, self.grace_s, self.poll_s = session, set(driver), grace_s, poll_s
        self.probe_s = min(1.0, grace_s / 8)
        self.app_id = session.sparkContext.applicationId

    def run(self) -> None:
        sc = self.session.sparkContext
        seen: set[str] = set()
        empty_since: float | None = None
        try:
            while not _stopped(sc):
                executors = block_managers(self.session) - self.driver
                seen.update(executors)
                alive = any(accepts_connection(e, self.probe_s) for e in sorted(executors))
                empty_since = None if alive else (empty_since or time.monotonic())
                jobs = list(sc.statusTracker().getActiveJobsIds())
                if empty_since is not None and jobs and time.monotonic() - empty_since >= self.grace_s:
                    lost = ", ".join(sorted(seen)) or "none had registered"
                    reason = (
                        f"the Spark application lost every executor ({lost}): none was registered and "
                        f"reachable for {self.grace_s:.0f} s; master {sc.master}, "
                        f"driver {driver_address(self.session)}"
                    )
                    _LOST.add(self.app_id)
                    for job in jobs:
                        sc._jsc.sc().cancelJob(job, reason)
                    return
                time.sleep(self.poll_s)
        except Exception:
            if _stopped(sc):
                return  # the session stopped between two polls: nothing left to watch
            raise


def accepts_connection(address: str, timeout: float) -> bool:
    """True when ``host:port`` accepts a TCP connection within ``timeout`` seconds."""
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError:
        return False  # refused, no route, or no answer in time: what the probe measures
    return True


def _stopped(sc) -> bool:
    """True once ``sc`` is stopped (PySpark drops its Java handle) or its JVM is gone."""
    from py4j.protocol import Py4JError

    if sc._jsc is None:
        return True
    try:
        return bool(sc._jsc.sc().isStopped())
    except Py4JError:
        return True  # the gateway to the JVM is closed: no context is running


# ------------------------------------------------------------------------- progress of jobs

#: Seconds between two looks at the tasks a job group has completed.
PROGRESS_INTERVAL_S = 10.0


def _group_tasks(sc, group: str) -> tuple[int, int]:
    """(tasks completed, tasks) over the stages of the jobs of job group ``group`` so far."""
    tracker = sc.statusTracker()
    done = total = 0
    for job in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job)
        for stage in info.stageIds if info is not None else ():
            st = tracker.getStageInfo(stage)
            if st is not None:
                done, total = done + st.numCompletedTasks, total + st.numTasks
    return done, total


@contextmanager
def task_progress(spark, group: str, report, interval_s: float = PROGRESS_INTERVAL_S) -> Iterator[None]:
    """Run the body's Spark jobs in job group ``group`` and call ``report(done, total)`` with the
    tasks they have completed whenever that changed, every ``interval_s`` seconds and once at the
    end (Spark's status tracker: the driver learns of each task as it ends, wherever it ran)."""
    sc = spark.sparkContext
    sc.setJobGroup(group, group)
    stop = threading.Event()
    last: list[tuple[int, int]] = []

    def look() -> None:
        now = _group_tasks(sc, group)
        if now[1] and (not last or now != last[-1]):
            last.append(now)
            report(*now)

    def poll() -> None:
        while not stop.wait(interval_s):
            look()

    watcher = threading.Thread(target=poll, name=f"progress-{group}", daemon=True)
    watcher.start()
    try:
        yield
        look()
    finally:
        stop.set()
        watcher.join()
        sc.setLocalProperty("spark.jobGroup.id", None)


# ------------------------------------------------------------------------- S3 retries of tasks

#: One accumulator per application: the S3 retries its tasks' processes reported.
_TASK_S3_RETRIES: dict[str, object] = {}


def _task_s3_retries(sc):
    acc = _TASK_S3_RETRIES.get(sc.applicationId)
    if acc is None:
        acc = _TASK_S3_RETRIES[sc.applicationId] = sc.accumulator(0)
    return acc


def tasks_s3_retries(spark) -> int:
    """S3 retries (:mod:`darkhaloscope.s3_retries`) that the tasks of ``spark`` wrapped by
    :func:`counting_s3_retries` reported so far; the driver's own are ``s3_retries.retries()``."""
    return int(_task_s3_retries(spark.sparkContext).value)


def counting_s3_retries(spark, task):
    """``task`` (a function returning an iterator, as ``mapPartitions`` and ``mapInArrow`` take)
    made to add the S3 retries its process made while it ran to :func:`tasks_s3_retries`."""
    tally = _task_s3_retries(spark.sparkContext)

    def counted(*args):
        before = s3_retries.retries()
        try:
            yield from task(*args)
        finally:
            tally.add(s3_retries.retries() - before)

    return counted


class S3RetryCount:
    """The S3 retries made from its creation on by this process and, after :meth:`include_tasks`,
    by the tasks of a Spark session (an asset's ``s3_retries``)."""

    def __init__(self) -> None:
        self._process = s3_retries.retries()
        self._spark, self._tasks = None, 0

    def include_tasks(self, spark) -> None:
        """Count the retries of the tasks of ``spark`` from now on too."""
        self._spark, self._tasks = spark, tasks_s3_retries(spark)

    def count(self) -> int:
        tasks = tasks_s3_retries(self._spark) - self._tasks if self._spark is not None else 0
        return s3_retries.retries() - self._process + tasks
