"""A Spark standalone cluster on another "host" for tests: a network namespace joined to this one by
a veth pair, with no default route inside, so the only address its processes can reach outside is
the root end of the veth (reference/dagster.md §2.11).

:class:`NetnsCluster` (a context manager) creates the namespace (named after this process),
starts a master and two one-core workers inside it with ``spark-class`` (the pyspark wheel has no
``sbin`` scripts), each bound to the namespace's address (``SPARK_LOCAL_IP``), waits until the
master's ``/json`` page lists them ALIVE, and on exit ends every process it started — the workers'
executors and Python workers first — by process id, then deletes the namespace (which deletes the
veth pair). It needs root and ``ip`` (iproute2): :func:`require_netns` skips without them, and
fails in CI, which runs as root. The addresses are a /30 of 10.231.0.0/16 no interface or route
of this machine already uses. Namespaces left by a test process that was killed are removed (by
their processes' ids) when the next one starts.

The workers get a shell's basics and the AWS test credentials (:data:`TEST_ENV`), as an operator
gives a cluster's hosts theirs, and nothing else of this process's environment; their executors
inherit it.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import skip_or_fail
from tests.support.fault_proxy import FaultProxy
from tests.support.s3_server import TEST_ENV, S3Server, running_s3_server

NETNS_PREFIX = "dhsspark-"
_PRIVATE = ipaddress.ip_network("10.231.0.0/16")


def require_netns() -> None:
    """Skip (fail in CI) unless this process can create network namespaces (root, ``ip``)."""
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("ss") is None:
        skip_or_fail(
            "the Spark cluster tests need root and iproute2 (`ip`, `ss`, see `make iproute2`) to build a "
            "network namespace"
        )


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def free_subnet(seed: int) -> ipaddress.IPv4Network:
    """A /30 of 10.231.0.0/16, starting from one picked by ``seed``, that overlaps no address or
    route of this machine."""
    used = []
    for line in (_ip("-o", "-4", "addr").stdout + _ip("-4", "route").stdout).splitlines():
        for token in re.findall(r"\b\d+\.\d+\.\d+\.\d+(?:/\d+)?\b", line):
            used.append(ipaddress.ip_network(token, strict=False))
    subnets = list(_PRIVATE.subnets(new_prefix=30))
    for i in range(len(subnets)):
        candidate = subnets[(seed + i) % len(subnets)]
        if not any(candidate.overlaps(u) for u in used if u.prefixlen > 0):
            return candidate
    raise RuntimeError("no free /30 in 10.231.0.0/16 for the test namespace")


def sweep_stale_namespaces() -> None:
    """Remove the test namespaces of test processes that no longer run: their processes (by id)
    first, then the namespace."""
    for line in _ip("netns", "list").stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if not name.startswith(NETNS_PREFIX) or not name[len(NETNS_PREFIX) :].isdigit():
            continue
        if Path(f"/proc/{name[len(NETNS_PREFIX) :]}").exists():
            continue  # its test process still runs
        for pid in _ip("netns", "pids", name, check=False).stdout.split():
            _kill(int(pid), signal.SIGKILL)
        _ip("netns", "del", name, check=False)


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass  # already gone: what we wanted


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children first found, from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # the process ended while we read it
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def kill_tree(pid: int, grace_s: float = 5.0) -> None:
    """SIGTERM ``pid`` and its descendants (descendants first), SIGKILL what is left after ``grace_s``."""
    tree = [*reversed(descendants(pid)), pid]
    for p in tree:
        _kill(p, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_alive(p) for p in tree):
        time.sleep(0.1)
    for p in tree:
        _kill(p, signal.SIGKILL)
    for p in tree:
        _reap(p)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass  # not our child (an executor or Python worker): its parent reaps it


class NetnsCluster:
    """A Spark standalone master and ``workers`` one-core workers in a fresh network namespace
    (module doc). ``root_ip`` is this side of the veth, ``ns_ip`` the namespace's side."""

    def __init__(self, work_dir: Path, workers: int = 2, worker_memory: str = "1g"):
        self.work_dir = Path(work_dir)
        self.name = f"{NETNS_PREFIX}{os.getpid()}"
        self.root_if, self.ns_if = f"dhs{os.getpid()}r", f"dhs{os.getpid()}n"
        self.n_workers, self.worker_memory = workers, worker_memory
        self.master_pid: int | None = None
        self.worker_pids: list[int | None] = [None] * workers
        self._procs: dict[int, subprocess.Popen] = {}

    # ------------------------------------------------------------------ network
    def _create_namespace(self) -> None:
        subnet = free_subnet(os.getpid() * 7)
        root, ns = list(subnet.hosts())
        self.root_ip, self.ns_ip, self.prefix = str(root), str(ns), subnet.prefixlen
        steps = [
            ["netns", "add", self.name],
            ["link", "add", self.root_if, "type", "veth", "peer", "name", self.ns_if],
            ["link", "set", self.ns_if, "netns", self.name],
            ["addr", "add", f"{self.root_ip}/{self.prefix}", "dev", self.root_if],
            ["link", "set", self.root_if, "up"],
            ["netns", "exec", self.name, "ip", "addr", "add", f"{self.ns_ip}/{self.prefix}", "dev", self.ns_if],
            ["netns", "exec", self.name, "ip", "link", "set", self.ns_if, "up"],
            # PySpark's Python workers talk to their executor over loopback
            ["netns", "exec", self.name, "ip", "link", "set", "lo", "up"],
        ]
        for step in steps:
            _ip(*step)

    def set_link(self, up: bool) -> None:
        """Bring this side of the veth up or down (down: the namespace is cut off)."""
        _ip("link", "set", self.root_if, "up" if up else "down")

    def routes_inside(self) -> str:
        return _ip("netns", "exec", self.name, "ip", "-4", "route").stdout

    # ------------------------------------------------------------------ processes
    def _env(self) -> dict[str, str]:
        from pyspark.find_spark_home import _find_spark_home

        from darkhaloscope.catalog.spark_env import ensure_java

        ensure_java()
        # another host shares nothing of the driver's environment (no DHS_* settings): only a shell's
        # basics, the cluster's own variables and its AWS credentials
        basics = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TMPDIR", "JAVA_HOME") if k in os.environ}
        return {
            **basics,
            **TEST_ENV,
            "SPARK_HOME": _find_spark_home(),
            "SPARK_LOCAL_IP": self.ns_ip,
            "SPARK_DAEMON_MEMORY": "256m",
            "PYTHONDONTWRITEBYTECODE": "1",
        }

    def _spawn(self, label: str, *args: str) -> int:
        from pyspark.find_spark_home import _find_spark_home

        log = open(self.work_dir / f"{label}.log", "ab")
        cmd = ["ip", "netns", "exec", self.name, os.path.join(_find_spark_home(), "bin", "spark-class"), *args]
        # `ip netns exec` and spark-class both exec, so the pid is the JVM's
        proc = subprocess.Popen(cmd, env=self._env(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        self._procs[proc.pid] = proc
        return proc.pid

    @property
    def master_url(self) -> str:
        return f"spark://{self.ns_ip}:7077"

    def start_worker(self, i: int) -> None:
        """Start worker ``i`` (1 core, its own work dir and web UI port)."""
        work = self.work_dir / f"worker-{i}"
        work.mkdir(parents=True, exist_ok=True)
        self.worker_pids[i] = self._spawn(
            f"worker-{i}",
            "org.apache.spark.deploy.worker.Worker",
            self.master_url,
            "--host",
            self.ns_ip,
            "--cores",
            "1",
            "--memory",
            self.worker_memory,
            "--work-dir",
            str(work),
            "--webui-port",
            str(8081 + i),
        )

    def kill_worker(self, i: int) -> None:
        """Kill worker ``i`` at once, with its executor and Python workers (a host that crashed)."""
        pid = self.worker_pids[i]
        tree = [*reversed(descendants(pid)), pid]
        for p in tree:
            _kill(p, signal.SIGKILL)
        self._procs.pop(pid).wait(timeout=30)
        self.worker_pids[i] = None

    def worker_running(self, pid_in_tree: int) -> int:
        """The index of the worker whose process tree holds ``pid_in_tree``."""
        for i, pid in enumerate(self.worker_pids):
            if pid is not None and (pid == pid_in_tree or pid_in_tree in descendants(pid)):
                return i
        raise LookupError(f"process {pid_in_tree} belongs to no worker")

    def status(self) -> dict:
        """The master's /json page (workers, applications)."""
        with urllib.request.urlopen(f"http://{self.ns_ip}:8080/json", timeout=5) as reply:
            return json.load(reply)

    def wait_alive(self, workers: int | None = None, timeout_s: float = 180.0) -> None:
        """Wait until the master lists ``workers`` (default all) ALIVE workers."""
        want = self.n_workers if workers is None else workers
        deadline, last = time.monotonic() + timeout_s, None
        while time.monotonic() < deadline:
            try:
                page = self.status()
                alive = [w for w in page.get("workers", []) if w.get("state") == "ALIVE"]
                if len(alive) >= want:
                    return
                last = page.get("workers")
            except OSError as exc:
                last = exc
            time.sleep(0.5)
        raise TimeoutError(
            f"the test cluster's master did not list {want} ALIVE worker(s) in {timeout_s:.0f} s: {last}\n{self.logs()}"
        )

    def logs(self, tail: int = 3000) -> str:
        logs = sorted(self.work_dir.glob("*.log"))
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-tail:]}" for p in logs)

    def connection_owner(self, client: tuple[str, int], server: tuple[str, int]) -> int:
        """The pid of the process inside the namespace that owns the TCP connection from ``client``
        (its address and port, as the server saw them) to ``server``."""
        out = _ip("netns", "exec", self.name, "ss", "-Htnp").stdout
        for line in out.splitlines():
            fields = line.split()
            if len(fields) >= 6 and fields[3:5] == [f"{client[0]}:{client[1]}", f"{server[0]}:{server[1]}"]:
                pids = re.findall(r"pid=(\d+)", line)
                if pids:
                    return int(pids[0])
        raise LookupError(f"no process in {self.name} owns the connection {client} -> {server}:\n{out}")

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> "NetnsCluster":
        require_netns()
        sweep_stale_namespaces()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._create_namespace()
        try:
            self.master_pid = self._spawn(
                "master",
                "org.apache.spark.deploy.master.Master",
                "--host",
                self.ns_ip,
                "--port",
                "7077",
                "--webui-port",
                "8080",
            )
            for i in range(self.n_workers):
                self.start_worker(i)
            self.wait_alive()
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        return self

    def __exit__(self, *exc) -> None:
        for pid in [*(p for p in self.worker_pids if p is not None), *([self.master_pid] if self.master_pid else [])]:
            kill_tree(pid)
        for proc in self._procs.values():
            proc.wait(timeout=30)
        self._procs.clear()
        _ip("netns", "del", self.name, check=False)
        _ip("link", "del", self.root_if, check=False)  # gone with the namespace; in case the peer moved back


@dataclass(frozen=True)
class ClusterEnv:
    """The session's test cluster and what its executors can reach on this side of the veth: the
    S3 server (moto), a fault proxy in front of it (every cluster lake goes through the proxy) and
    the operator's Spark properties file for ``DHS_SPARK_CONF``."""

    cluster: NetnsCluster
    s3: S3Server
    proxy: FaultProxy
    conf_file: Path


#: The operator's settings of the test cluster: executors that fit a one-core, 1 GiB worker.
OPERATOR_CONF = "spark.executor.memory 512m\nspark.executor.cores 1\n"


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    """One cluster for the whole test session (module doc), with moto and a fault proxy on the
    root end of the veth."""
    work = tmp_path_factory.mktemp("spark-cluster")
    conf_file = work / "spark-dhs.conf"
    conf_file.write_text(OPERATOR_CONF)
    with (
        NetnsCluster(work / "cluster") as cluster,
        running_s3_server(cluster.root_ip, bucket="dhs-cluster") as s3,
        FaultProxy(s3.host, s3.port, listen_host=cluster.root_ip, lifetime_s=7200.0) as proxy,
    ):
        yield ClusterEnv(cluster, s3, proxy, conf_file)
