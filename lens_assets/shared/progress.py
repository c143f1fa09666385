"""Progress of long steps: one line to the Dagster log (the UI's run view) and to the console.

``dhs materialize`` keeps Dagster's console logger at WARNING (``dhs.materialize.quiet_console``),
so a line meant for the person waiting on a step goes to the process's standard error as well,
which the terminal shows (``dhs``) and the run's compute logs keep (``dagster dev``).
"""

from __future__ import annotations

import sys


def report_progress(log, line: str) -> None:
    """Write ``line`` to ``log`` (a Dagster or Pipes logger) at INFO and to standard error."""
    log.info(line)
    print(line, file=sys.stderr, flush=True)
