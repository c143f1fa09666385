"""The first-real-run tutorial on the real files: the real sweep file and coadd brick of
``shared/data/real`` laid out as a DR10 mirror, followed command by command up to the point where
the run names each file it still lacks, before any work; ``dhs fetch-list`` prints the same files;
the tutorial's file table names every kind of file a run reads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from darkhaloscope.errors import CredentialError, InputError
from darkhaloscope.survey.inputs import INPUT_PATTERNS, brick_paths, sweep_bricks
from tests.conftest import require_real_file
from tests.support.s3_server import fresh_bucket

REPO = Path(__file__).resolve().parent.parent
SWEEP = "sweep-320m005-330p000.fits"
BRICK = "0959p805"
TUTORIAL = REPO / "docs" / "tutorials" / "first-real-run.md"
PRIVATE = "south/external/specObj-dr16.fits"


def _mirror(tmp_path) -> Path:
    """The real files in the release's layout (links: nothing is copied)."""
    root = tmp_path / "dr10"
    sweeps = root / "south" / "sweep" / "10.1"
    coadd = root / "south" / "coadd" / BRICK[:3] / BRICK
    sweeps.mkdir(parents=True)
    coadd.mkdir(parents=True)
    (sweeps / SWEEP).symlink_to(require_real_file(SWEEP))
    for kind in ("image-g", "invvar-g"):
        name = f"legacysurvey-{BRICK}-{kind}.fits.fz"
        (coadd / name).symlink_to(require_real_file(name))
    return root


def _dhs(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dhs.main", *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=1200
    )


def test_the_tutorial_table_names_every_kind_of_file_a_run_reads():
    page = TUTORIAL.read_text()
    for pattern in INPUT_PATTERNS:
        assert f"`{pattern}`" in page, pattern
    assert "dhs fetch-list" in page and "23 steps" not in page


@pytest.mark.slow
def test_the_tutorial_on_the_real_sweep_and_brick_names_each_missing_file(tmp_path):
    mirror = _mirror(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DHS_")}
    env.update(
        DHS_SURVEY=str(mirror),
        DHS_LAKE=str(tmp_path / "lake-dr10"),
        DAGSTER_HOME=str(tmp_path / "dagster_home"),
        PYTHONPATH=str(REPO) + os.pathsep + env.get("PYTHONPATH", ""),
    )
    # the sweep file ingested and its targets selected: no imaging, spectra or photo-zs are read
    first = _dhs(env, "materialize", "search_targets", "training_catalog")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    bricks = _dhs(env, "query", "select distinct brickname from search_targets order by 1", "--format", "csv")
    assert bricks.returncode == 0 and bricks.stdout.split()[1:] == sweep_bricks(
        str(mirror / "south/sweep/10.1" / SWEEP)
    )

    # the whole graph: refused before any work, each file the run would read and the mirror lacks named
    second = _dhs(env, "materialize", "evaluation_report", "candidate_gallery")
    assert second.returncode == 1
    named = [line.split("missing: ", 1)[1] for line in second.stderr.splitlines() if "missing: " in line]
    lacking = [
        "south/sweep/10.1-photo-z/sweep-320m005-330p000-pz.fits",
        "south/external/survey-dr10.1-south-specObj-dr16.fits",
        "south/external/specObj-dr16.fits",
        *(p for b in sweep_bricks(str(mirror / "south/sweep/10.1" / SWEEP)) for p in brick_paths(b)),
    ]
    assert named == [f"{mirror}/{p}" for p in lacking], second.stderr[-3000:]
    assert "[1/" not in second.stdout  # nothing ran
    # fetch-list of the sweep's box lists the spectra and the bricks' coadds the mirror lacks (its
    # sweep files are DR10's 5-degree blocks; the test file is a DR8 sweep of a 10-degree block)
    listed = _dhs(env, "fetch-list", "320", "330", "-5", "0", "--missing")
    assert listed.returncode == 0
    missing = set(listed.stdout.split())
    assert set(lacking[1:]) <= missing and "south/sweep/10.1/sweep-320m005-325p000.fits" in missing


@pytest.mark.s3
def test_a_mirror_in_a_public_bucket_is_read_with_unsigned_requests(s3_server, monkeypatch):
    """DHS_SURVEY_S3_ANONYMOUS=true: the survey's filesystem sends no credentials (none are in the
    environment) and reads the mirror's sweep files and companions from the loopback S3 server."""
    from resources.config import build_resources

    bucket = fresh_bucket(s3_server)
    client = s3_server.client()
    public = {"ACL": "public-read"}
    client.upload_file(str(require_real_file(SWEEP)), bucket, f"dr10/south/sweep/10.1/{SWEEP}", ExtraArgs=public)
    client.put_object(Bucket=bucket, Key=f"dr10/{PRIVATE}", Body=b"not public")  # readable with credentials only
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("DHS_SURVEY", f"s3://{bucket}/dr10")
    monkeypatch.setenv("DHS_S3_ENDPOINT", s3_server.endpoint_url)
    monkeypatch.setenv("DHS_SURVEY_S3_ANONYMOUS", "true")
    survey = build_resources()["survey"]
    fs, _ = survey.filesystem()
    assert fs.__reduce__()[1][0]["anonymous"] is True and fs.__reduce__()[1][0]["access_key"] is None
    assert survey.sweep_files() == [SWEEP]
    with survey.local_sweep(SWEEP) as path:
        assert sweep_bricks(path) == ["3263m005"]
    # the requests are unsigned: an object that is not public is refused to them
    with pytest.raises(CredentialError, match="S3 denied access"):
        with survey.local_file(PRIVATE):
            pass
    monkeypatch.setenv("DHS_SURVEY_S3_ANONYMOUS", "yes")
    with pytest.raises(InputError, match="DHS_SURVEY_S3_ANONYMOUS"):
        build_resources()
