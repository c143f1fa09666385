"""A Spark standalone cluster on another "host" for tests: a master and two one-core workers in the
session's network namespace (``tests.support.netns``: joined to this one by a veth pair, no
default route inside, moto and a fault proxy on the root end of the veth; reference/dagster.md
§2.11).

:class:`NetnsCluster` (a context manager) starts the master and the workers inside the namespace
with ``spark-class`` (the pyspark wheel has no ``sbin`` scripts), each bound to the namespace's
address (``SPARK_LOCAL_IP``), waits until the master's ``/json`` page lists them ALIVE, and on exit
ends every process it started — the workers' executors and Python workers first — by process id.
The namespace outlives it (the session fixture ``netns_host`` deletes it).

The workers get a shell's basics and the AWS test credentials (:data:`TEST_ENV`), as an operator
gives a cluster's hosts theirs, and nothing else of this process's environment; their executors
inherit it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.fault_proxy import FaultProxy
from tests.support.netns import Netns, _kill, descendants, kill_tree
from tests.support.s3_server import TEST_ENV, S3Server


class NetnsCluster:
    """A Spark standalone master and ``workers`` one-core workers in the network namespace ``netns``
    (module doc). ``root_ip`` is this side of the veth, ``ns_ip`` the namespace's side."""

    def __init__(self, netns: Netns, work_dir: Path, workers: int = 2, worker_memory: str = "1g"):
        self.netns, self.work_dir = netns, Path(work_dir)
        self.n_workers, self.worker_memory = workers, worker_memory
        self.master_pid: int | None = None
        self.worker_pids: list[int | None] = [None] * workers
        self._procs: dict[int, subprocess.Popen] = {}

    # ------------------------------------------------------------------ the host
    @property
    def root_ip(self) -> str:
        return self.netns.root_ip

    @property
    def ns_ip(self) -> str:
        return self.netns.ns_ip

    @property
    def ns_if(self) -> str:
        return self.netns.ns_if

    def set_link(self, up: bool) -> None:
        self.netns.set_link(up)

    def routes_inside(self) -> str:
        return self.netns.routes_inside()

    def connection_owner(self, client: tuple[str, int], server: tuple[str, int]) -> int:
        return self.netns.connection_owner(client, server)

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
        cmd = [*self.netns.exec_prefix(), os.path.join(_find_spark_home(), "bin", "spark-class"), *args]
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

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> "NetnsCluster":
        self.work_dir.mkdir(parents=True, exist_ok=True)
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
def spark_cluster(netns_host, tmp_path_factory):
    """One cluster for the whole test session (module doc), in the session's namespace, with its
    moto and fault proxy on the root end of the veth."""
    work = tmp_path_factory.mktemp("spark-cluster")
    conf_file = work / "spark-dhs.conf"
    conf_file.write_text(OPERATOR_CONF)
    with NetnsCluster(netns_host.netns, work / "cluster") as cluster:
        yield ClusterEnv(cluster, netns_host.s3, netns_host.proxy, conf_file)
