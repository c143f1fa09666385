"""A step for the launch tests, opened as the product's steps open theirs
(``lens_assets.pipes.session``): one line on stdout, one on stderr, and a materialization whose
metadata is the extras' ``token``.

    python -m tests.support.pipes_echo      (started by a Pipes client)
"""

from __future__ import annotations

import sys


def main() -> None:
    from lens_assets.pipes.session import open_step_pipes

    with open_step_pipes() as pipes:
        token = pipes.extras["token"]
        print(f"stdout of the far side: {token}", flush=True)
        print(f"stderr of the far side: {token}", file=sys.stderr, flush=True)
        pipes.report_asset_materialization(metadata={"token": token})


if __name__ == "__main__":
    main()
