"""Another "host" for tests: a network namespace joined to this one by a veth pair, with no default
route inside, so the only address its processes can reach outside is the root end of the veth
(reference/dagster.md §2.11).

:class:`Netns` (a context manager) creates the namespace (named after this process) and, on exit,
ends every process still inside it (by process id) and deletes the namespace (which deletes the
veth pair). It needs root and ``ip`` (iproute2): :func:`require_netns` skips without them, and
fails in CI, which runs as root. The addresses are a /30 of 10.231.0.0/16 no interface or route
of this machine already uses. Namespaces left by a test process that was killed are removed (by
their processes' ids) when the next one starts.

The session fixture :func:`netns_host` is one namespace with an S3 server (moto) and a fault proxy
in front of it on the root end of the veth, shared by every test of the session that needs another
host: the Spark cluster (``tests.support.spark_cluster``) and the steps launched through
``DHS_LAUNCH_PREFIX`` (``tests/test_remote_pipes.py``).
"""

from __future__ import annotations

import ipaddress
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.fault_proxy import FaultProxy
from tests.support.s3_server import TEST_ENV, S3Server, running_s3_server

NETNS_PREFIX = "dhsspark-"
_PRIVATE = ipaddress.ip_network("10.231.0.0/16")


def require_netns() -> None:
    """Skip (fail in CI) unless this process can create network namespaces (root, ``ip``)."""
    from tests.conftest import skip_or_fail  # conftest imports this module for its fixture

    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("ss") is None:
        skip_or_fail(
            "the tests on another host (a Spark cluster, steps launched through DHS_LAUNCH_PREFIX) need root "
            "and iproute2 (`ip`, `ss`, see `make iproute2`) to build a network namespace"
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


class Netns:
    """A fresh network namespace joined by a veth pair (module doc). ``root_ip`` is this side of the
    veth, ``ns_ip`` the namespace's side; :meth:`exec_prefix` runs a command inside."""

    def __init__(self):
        self.name = f"{NETNS_PREFIX}{os.getpid()}"
        self.root_if, self.ns_if = f"dhs{os.getpid()}r", f"dhs{os.getpid()}n"

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

    def exec_prefix(self) -> list[str]:
        """The words that run a command inside the namespace (``ip netns exec`` execs it: its pid is
        the command's)."""
        return ["ip", "netns", "exec", self.name]

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

    def __enter__(self) -> "Netns":
        require_netns()
        sweep_stale_namespaces()
        try:
            self._create_namespace()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for pid in _ip("netns", "pids", self.name, check=False).stdout.split():
            kill_tree(int(pid))
        _ip("netns", "del", self.name, check=False)
        _ip("link", "del", self.root_if, check=False)  # gone with the namespace; in case the peer moved back


def far_side_prefix(netns: Netns, **env: str) -> str:
    """A ``DHS_LAUNCH_PREFIX`` that runs a step on the far host: inside ``netns``, with nothing in its
    environment but a PATH, a HOME on its own /tmp, the AWS test credentials (passed explicitly, as
    a host holds its own) and ``env``, and with a fresh /tmp of its own (``unshare -m`` and a tmpfs):
    it shares only the lake and the bucket on S3 with the orchestrator."""
    clean = [
        "env",
        "-i",
        f"PATH={Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME=/tmp",
        "OMP_NUM_THREADS=1",
        *(f"{k}={v}" for k, v in {**TEST_ENV, **env}.items()),
    ]
    private_tmp = ["unshare", "-m", "--propagation", "private", "sh", "-c", 'mount -t tmpfs tmpfs /tmp && exec "$@"']
    return shlex.join([*netns.exec_prefix(), *clean, *private_tmp, "sh"])


@dataclass(frozen=True)
class HostEnv:
    """The session's other host and what it can reach on this side of the veth: the S3 server
    (moto) and a fault proxy in front of it."""

    netns: Netns
    s3: S3Server
    proxy: FaultProxy


@pytest.fixture(scope="session")
def netns_host():
    """One namespace for the whole test session, with moto and a fault proxy on the root end of the
    veth (module doc)."""
    with (
        Netns() as netns,
        running_s3_server(netns.root_ip, bucket="dhs-cluster") as s3,
        FaultProxy(s3.host, s3.port, listen_host=netns.root_ip, lifetime_s=7200.0) as proxy,
    ):
        yield HostEnv(netns, s3, proxy)
