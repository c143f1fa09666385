"""A stop that stops: SIGTERM or SIGINT to ``dhs`` (as ``timeout``, Slurm and Ctrl-C send them)
ends the command within a grace period, its launched processes with it.

While a step runs, Dagster's own handlers (``raise_interrupts_as``) turn SIGTERM and SIGINT into
an interruption of the step (between steps, a KeyboardInterrupt): the Pipes clients stop the
processes they launched (``PipesSubprocessClient``'s ``forward_termination``,
``resources.launch``), the step fails without its retry policy being applied
(``lens_assets.shared.publish.fail_fast_on_bad_input``), and nothing is published. Whichever
Python handler is installed, the signal's number reaches a watcher thread through
``signal.set_wakeup_fd``; the first one starts a watchdog: if the command has not ended
``grace_s`` seconds later, every process it started (its descendants, whichever session or group
they are in) is killed and the command exits. Either way the command says ``stopped by
SIGTERM`` (or SIGINT) in one line and exits ``128 + signal``: from the signal on, Dagster's
console log (the interruption, the stopped step's and run's failures with their stacks) stays
out of the terminal, in the run's event log in the instance (the UI shows it); whatever else
the command writes to stderr still shows.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
import time


def descendants(pid: int) -> list[int]:
    """Process ids of every descendant of ``pid`` (Linux ``/proc``; children first)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:  # the process ended while we looked
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def _kill(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


#: A record of Dagster's console logger (``dagster._utils.log.default_format_string``; coloredlogs
#: may wrap its fields in ANSI colours): one ``write`` per record, its stack included.
_DAGSTER_RECORD = re.compile(
    r"^(?:\x1b\[[0-9;]*m)?\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d{4}(?:\x1b\[[0-9;]*m)? - dagster - "
)


class _WithoutDagsterLog:
    """``stream`` without the records of Dagster's console logger (which looks ``sys.stderr`` up for
    every record: coloredlogs' ``StandardErrorHandler``)."""

    def __init__(self, stream) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        return len(text) if _DAGSTER_RECORD.match(text) else self.stream.write(text)

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


class Stop:
    """The signal that stopped this command (``signal_name``, None until one came)."""

    def __init__(self) -> None:
        self.signal_name: str | None = None
        self.signo = 0
        self.grace_s = 30.0
        self._seen = threading.Event()

    @property
    def requested(self) -> bool:
        return self.signal_name is not None

    def install(self, grace_s: float) -> None:
        """Stop on SIGTERM as on SIGINT (KeyboardInterrupt between steps; inside one, Dagster's
        handlers interrupt it) and watch for either (the first starts the grace period)."""
        self.grace_s = grace_s
        self.signal_name, self.signo = None, 0
        self._seen.clear()
        self._installed = threading.current_thread() is threading.main_thread()
        if not self._installed:  # Python delivers signals to the main thread only
            return
        self._handlers = {
            sig: signal.signal(sig, signal.default_int_handler) for sig in (signal.SIGTERM, signal.SIGINT)
        }
        read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._wakeup = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        threading.Thread(target=self._watch, args=(read,), name="dhs-stop", daemon=True).start()

    def uninstall(self) -> None:
        """Put back the handlers and wake-up fd that :meth:`install` replaced (a caller that runs
        ``dhs`` in its own process, as the tests do, keeps its own)."""
        if not self._installed:
            return
        if isinstance(sys.stderr, _WithoutDagsterLog):
            sys.stderr = sys.stderr.stream
        signal.set_wakeup_fd(self._wakeup)
        for sig, handler in self._handlers.items():
            signal.signal(sig, handler)
        os.close(self._write)  # the watcher reads the end of its pipe and ends

    def _watch(self, fd: int) -> None:
        while chunk := os.read(fd, 64):
            for signo in chunk:
                if signo in (signal.SIGTERM, signal.SIGINT) and not self.requested:
                    self.signal_name, self.signo = signal.Signals(signo).name, signo
                    sys.stderr = _WithoutDagsterLog(sys.stderr)
                    self._seen.set()
                    threading.Thread(target=self._deadline, name="dhs-stop-grace", daemon=True).start()
        os.close(fd)

    def interrupted(self) -> None:
        """Record the stop behind a KeyboardInterrupt: the signal the watcher saw (it may read it
        a moment after the main thread was interrupted), else SIGINT."""
        if not self._seen.wait(1.0):
            self.signal_name, self.signo = "SIGINT", int(signal.SIGINT)

    def _deadline(self) -> None:
        time.sleep(self.grace_s)
        self.end_processes(0.0)
        print(
            f"stopped by {self.signal_name}: the run had not ended {self.grace_s:g} s after it (DHS_STOP_GRACE_S); "
            "its processes were killed",
            file=sys.stderr,
            flush=True,
        )
        os._exit(128 + self.signo)

    def end_processes(self, grace_s: float = 5.0) -> None:
        """SIGTERM every process this one started, then SIGKILL those left after ``grace_s`` seconds."""
        left = descendants(os.getpid())
        _kill(left, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = [p for p in left if p in set(descendants(os.getpid()))]
        _kill(descendants(os.getpid()), signal.SIGKILL)

    def finish(self) -> int:
        """End what is left of the stopped command; print the one line; the exit status."""
        self.end_processes()
        print(f"stopped by {self.signal_name}", file=sys.stderr, flush=True)
        return 128 + self.signo


#: This command's stop (one per process).
STOP = Stop()
