"""A command stopped mid-step (tests/test_fault_matrix.py): one asset with a retry policy, as the
lens finder has, that records each attempt, starts a child in a session of its own (as a
prefixed launch does) and then works for a minute; ``stubborn`` ignores the interruption, as a
step blocked in native code would. Run as the ``dhs`` commands run assets: ``STOP`` installed,
the run in process.

    python -m tests.support.stop_target FOLDER GRACE_S [stubborn]
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import dagster as dg

from dhs.stop import STOP
from lens_assets.shared.publish import fail_fast_on_bad_input


def main() -> int:
    folder, grace_s, stubborn = Path(sys.argv[1]), float(sys.argv[2]), "stubborn" in sys.argv[3:]

    @dg.asset(retry_policy=dg.RetryPolicy(max_retries=2))
    def slow() -> None:
        with fail_fast_on_bad_input():  # as every lake_asset's body runs
            _work(folder, stubborn)

    STOP.install(grace_s)
    try:
        dg.materialize([slow], raise_on_error=False)
    finally:
        STOP.uninstall()
    return STOP.finish() if STOP.requested else 0


def _work(folder: Path, stubborn: bool) -> None:
    with open(folder / "attempts", "a") as f:
        f.write("attempt\n")
    child = subprocess.Popen(["sleep", "300"], start_new_session=True)
    (folder / "child").write_text(str(child.pid))
    end = time.monotonic() + 60
    while time.monotonic() < end:
        try:
            time.sleep(0.1)
        except BaseException:  # noqa: BLE001 - the stubborn step swallows its interruption
            if not stubborn:
                raise


if __name__ == "__main__":
    sys.exit(main())
