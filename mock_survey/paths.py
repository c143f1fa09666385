"""Where the embedded mock survey's files live: the cache folder per profile and seed, and the files
under a mock survey root (a DR10 mirror). A module of names only, so resources can read it cheaply."""

from __future__ import annotations

import os
from pathlib import Path

from darkhaloscope.constants import DR10_SWEEP_DIR

#: Default cache folder of generated mock surveys (DHS_MOCK_DIR), relative to the working directory.
DEFAULT_MOCK_DIR = ".dhs_mock"
#: Files under a mock survey root.
SWEEP_SUBDIR = DR10_SWEEP_DIR
KNOWN_LENS_TRUTH_RELPATH = "truth/known_lens_truth.parquet"
HIDDEN_LENS_TRUTH_RELPATH = "truth/hidden_lens_truth.parquet"
MANIFEST_NAME = "mock_survey_manifest.json"


def mock_survey_root(cache_dir: str | os.PathLike, profile: str, seed: int) -> Path:
    """The folder (absolute) holding the mock survey of ``profile`` and ``seed`` under ``cache_dir``:
    one per (profile, seed), so two seeds never share files."""
    return Path(os.path.abspath(cache_dir)) / profile / f"seed-{int(seed)}"
