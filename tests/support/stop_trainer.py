"""The lens finder's step with its real trainer, run as ``dhs materialize`` runs assets (``STOP``
installed, the run in process, the trainer launched by the production Pipes client), for the
stop tests of tests/test_fault_matrix.py. The lake at ``LAKE`` holds a small training set
(``tests.support.tiny_finder.write_tiny_training_set``); every member is the tiny bottleneck
ResNet trained for ``EPOCHS`` epochs (many: the trainer is still running when the test stops it;
one: a run that completes).

    python -m tests.support.stop_trainer LAKE EPOCHS [--worker]

``--worker``: as a run worker under the daemon runs it (``dagster api execute_run``, which the
UI's and the daemon's termination interrupts with SIGINT): Dagster's handlers only, no ``STOP``.

Exits 0 when the run succeeded, 1 when it failed, 128 + the signal when ``STOP`` stopped it.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: What the trainer's command line holds (``lens_assets/training.py`` launches it as a module).
TRAINER = "lens_assets.pipes.train_lens_finder"


def main() -> int:
    import dagster as dg

    from darkhaloscope.training.loop import TrainConfig
    from darkhaloscope.training.profiles import TrainingProfile, training_profile
    from dhs.materialize import quiet_console
    from dhs.stop import STOP
    from io_managers import LakeIOManager
    from lens_assets import training as training_assets
    from resources import ComputeResource, LakeResource
    from resources.launch import PipesLaunchClient
    from resources.settings import setting

    uri, epochs, worker = sys.argv[1], int(sys.argv[2]), "--worker" in sys.argv[3:]
    demo = training_profile("demo")
    member = TrainConfig(
        arch="bottleneck_resnet_tiny", epochs=epochs, batch_size=32, lr=1e-2, patience=0, checkpoint_every_steps=0
    )
    training_assets.training_profile = lambda name: TrainingProfile(demo.preprocess, demo.stream, (member,))
    if not worker:
        STOP.install(float(setting("DHS_STOP_GRACE_S")))
    try:
        result = dg.materialize(
            [training_assets.lens_finder],
            resources={
                "lake": LakeResource(uri=uri),
                "io_manager": LakeIOManager(uri=uri),
                "compute": ComputeResource(device="cpu", profile="demo"),
                "pipes_subprocess_client": PipesLaunchClient(cwd=str(ROOT)),
            },
            # a core-only gate the tiny model passes (tests/test_lens_finder_asset.py): a completed run publishes
            run_config={
                **quiet_console(),  # the console at DHS_LOG_LEVEL, as under dhs materialize
                "ops": {"training__lens_finder": {"config": {"core_threshold": 0.99}}},
            },
            raise_on_error=False,
        )
    finally:
        if not worker:
            STOP.uninstall()
    if STOP.requested:
        return STOP.finish()
    return 0 if result.success else 1


if __name__ == "__main__":
    sys.exit(main())
