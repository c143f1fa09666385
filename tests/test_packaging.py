"""The built wheel carries what the installed package needs: built from this checkout, installed
into a fresh virtual environment (offline: its dependencies are the test environment's own
packages, seen through a path file, not the checkout), it runs ``dhs --version``, ``dhs tables``
on a small lake and writes the Dagster instance's settings, from a folder outside the checkout.
Also: ``dhs`` is a regular package, and the citation file carries the project's version."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pyarrow as pa
import pytest

import dhs
from lake_platform.lake import Lake

REPO = Path(__file__).resolve().parent.parent


def test_dhs_is_a_regular_package_and_the_citation_names_its_version():
    assert (REPO / "dhs" / "__init__.py").is_file() and dhs.__file__ is not None
    cff = (REPO / "CITATION.cff").read_text()
    assert re.search(rf"^version: {re.escape(dhs.__version__)}$", cff, re.M)
    assert "references:" in cff


@pytest.mark.slow
def test_the_installed_wheel_runs_dhs_outside_the_checkout(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(REPO)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = dist.glob("darkhaloscope-*.whl")
    assert wheel.name.startswith(f"darkhaloscope-{dhs.__version__}-")
    names = zipfile.ZipFile(wheel).namelist()
    assert "dhs/dagster.yaml" in names and "dhs/__init__.py" in names and "definitions.py" in names
    # the truth world's real galaxies and PSFEx models, with their licences
    for folder, n_fits in (("cosmos", 5), ("psfex", 3)):
        assert f"darkhaloscope/data/{folder}/LICENSE" in names
        assert sum(n.startswith(f"darkhaloscope/data/{folder}/") and n.endswith(".fits") for n in names) == n_fits

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # the dependencies from this environment, without its own (editable) install of the project:
    # a path file adds the folder, and the editable finder's own path file in it is not run
    Path(site, "test-environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--no-index",
            "--ignore-installed",
            "-q",
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )

    lake = Lake(str(tmp_path / "lake"))
    lake.write_table("survey", "known_lenses", pa.table({"name": ["A", "B"], "ra": [1.0, 2.0], "dec": [0.0, 0.0]}))
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DHS_", "PYTHON", "DAGSTER_"))}
    env.update(DHS_LAKE=lake.uri, DAGSTER_HOME=str(work / "home"))
    dhs_cmd = str(env_dir / "bin" / "dhs")

    def run(*args):
        return subprocess.run([*args], cwd=work, env=env, capture_output=True, text=True, timeout=300)

    where = run(str(python), "-c", "import dhs, darkhaloscope; print(dhs.__file__); print(darkhaloscope.__file__)")
    assert where.returncode == 0, where.stderr
    assert all(line.startswith(site) for line in where.stdout.split()), where.stdout  # the wheel's, not the checkout's
    version = run(dhs_cmd, "--version")
    assert version.returncode == 0 and version.stdout.strip() == f"dhs {dhs.__version__} (Dark Halo Scope)"
    tables = run(dhs_cmd, "tables", "--format", "csv")
    assert tables.returncode == 0, tables.stderr
    assert "known_lenses,survey,2," in tables.stdout
    instance = run(dhs_cmd, "instance")
    assert instance.returncode == 0, instance.stderr
    assert (work / "home" / "dagster.yaml").is_file() and "max_concurrent_runs" in (
        work / "home" / "dagster.yaml"
    ).read_text()
