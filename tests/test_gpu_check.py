"""The prepared GPU check (benchmarks/gpu_check.py) runs where a bare GPU host would run it: with
torch, numpy, pyarrow and scipy alone installed (the packages of the environment less
scikit-learn, safetensors, astropy, matplotlib, lenstronomy, dagster, duckdb and pandas), here on
the CPU with a tiny set, and prints its JSON line with a training, rendering and scoring rate."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
#: What a bare GPU host lacks (import names).
ABSENT = ("sklearn", "safetensors", "astropy", "matplotlib", "lenstronomy", "dagster", "duckdb", "pandas")


def bare_site(folder: Path) -> Path:
    """A folder holding links to every entry of this environment's site-packages but the packages
    of ABSENT: what ``python -S`` with it as its only path beside the standard library can import."""
    site = Path(torch.__file__).resolve().parents[1]
    folder.mkdir()
    for entry in site.iterdir():
        if entry.name.split(".")[0] not in ABSENT:
            (folder / entry.name).symlink_to(entry)
    return folder


def gpu_check(env: dict, args: list[str], timeout_s: int) -> dict:
    """The JSON line of ``python -S -m benchmarks.gpu_check <args>`` run with ``env``."""
    p = subprocess.run(
        [sys.executable, "-S", "-m", "benchmarks.gpu_check", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_gpu_check_runs_with_torch_numpy_pyarrow_and_scipy_alone(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(bare_site(tmp_path / "site")), "PYTHONNOUSERSITE": "1"}
    found = f"import importlib.util as u; print([m for m in {ABSENT!r} if u.find_spec(m)])"
    absent = subprocess.run([sys.executable, "-S", "-c", found], env=env, capture_output=True, text=True)
    assert absent.stdout.strip() == "[]", absent.stdout + absent.stderr
    out = gpu_check(env, ["--device", "cpu", "--tiny", "--steps", "2", "--render-chunks", "1", "--threads", "2"], 840)
    assert out["bench"] == "gpu_check" and out["profile"] == "full" and list(out["devices"]) == ["cpu"]
    assert out["training_set"]["stamp_px"] == 101 and out["elapsed_s"] < out["budget_s"]
    cpu = out["devices"]["cpu"]
    assert set(cpu["train"]) == {"bottleneck_resnet", "strided_resnet"}
    for member in cpu["train"].values():
        assert member["images_per_s"] > 0 and member["loader_images_per_s"] > 0 and 1 <= member["steps"] <= 2
    assert 150_000 < cpu["train"]["bottleneck_resnet"]["params"] < 250_000
    assert cpu["injection"]["systems_per_s"] > 0 and cpu["injection"]["window_px"] == 65
    assert cpu["scoring"]["stamps_per_s"] > 0 and cpu["scoring"]["dihedral_views"] == 2
    assert cpu["scoring"]["members"] == ["bottleneck_resnet", "strided_resnet"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_render_chunk_sweep_times_every_size_and_compares_bytes(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(bare_site(tmp_path / "site")), "PYTHONNOUSERSITE": "1"}
    out = gpu_check(env, ["--render-chunk-sweep", "--device", "cpu", "--tiny", "--threads", "2"], 540)
    assert out["device"] == "cpu" and out["default_points"] == 65536 and out["systems"] == 16
    sizes = list(out["sizes"].values())
    assert len(sizes) == 4 and all(s["systems_per_s"] > 0 for s in sizes)
    assert sizes[0]["same_bytes_as_smallest"] and "max_rel_diff_vs_cpu" not in out
