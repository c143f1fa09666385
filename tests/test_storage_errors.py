"""Permanent local storage errors are classified (StorageError: never retried) and named clearly;
transient ones are left to the one layer that retries them."""

import errno
import os
import subprocess
import sys

import pyarrow as pa
import pytest

from darkhaloscope.errors import PERMANENT_ERRORS, CredentialError, InputError, StorageError
from lake_platform.lake import Lake, translate_storage_error


def test_a_lake_path_that_is_a_file_is_a_storage_error_naming_it(tmp_path):
    lake_file = tmp_path / "lakehouse"
    lake_file.write_text("not a folder")
    lake = Lake(str(lake_file))
    with pytest.raises(StorageError, match="a file stands where the lake needs a folder") as err:
        lake.write_table("survey", "sweeps", pa.table({"x": [1]}), partition={"sweep_file": "a.fits"})
    assert str(lake_file) in str(err.value)
    with pytest.raises(StorageError, match=str(lake_file)):
        lake.tables()
    assert lake_file.read_text() == "not a folder"


@pytest.mark.parametrize(
    "code, words",
    [
        (errno.EROFS, "read-only"),
        (errno.EACCES, "permission denied"),
        (errno.ENOTDIR, "a file stands"),
        (errno.ENOSPC, "disk is full"),
        (errno.EPERM, "not permitted"),
    ],
)
def test_permanent_os_errors_map_to_storage_error(code, words):
    exc = translate_storage_error(OSError(code, os.strerror(code)), "/data/lake/x/part-0.parquet")
    assert isinstance(exc, StorageError) and isinstance(exc, PERMANENT_ERRORS)
    assert words in str(exc) and "/data/lake/x/part-0.parquet" in str(exc)


@pytest.mark.parametrize(
    "exc", [ConnectionResetError(errno.ECONNRESET, "reset"), OSError("AWS Error NETWORK_CONNECTION during PutObject")]
)
def test_transient_errors_are_left_unchanged(exc):
    assert translate_storage_error(exc, "s3://b/lake") is exc and not isinstance(exc, PERMANENT_ERRORS)
    assert issubclass(CredentialError, PERMANENT_ERRORS[1]) and issubclass(InputError, PERMANENT_ERRORS[0])


_WRITE_AS_NOBODY = """
import os, sys
import pyarrow as pa
from darkhaloscope.errors import StorageError
from lake_platform.lake import Lake
Lake(os.path.join(sys.argv[2], "warm")).write_table("survey", "sweeps", pa.table({"x": [1]}))  # load every module first
os.setgid(65534); os.setuid(65534)  # the interpreter's own files may be unreadable to 'nobody'
try:
    Lake(sys.argv[1]).write_table("survey", "sweeps", pa.table({"x": [1]}))
except StorageError as exc:
    print(exc)
    sys.exit(3)
"""


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX permissions")
def test_a_lake_the_user_may_not_write_is_a_storage_error(tmp_path):
    lake_dir = tmp_path / "lake"
    lake_dir.mkdir()
    if os.geteuid() == 0:  # root ignores permissions: write as the unprivileged 'nobody' user instead
        os.chmod(tmp_path, 0o755)
        os.chmod(lake_dir, 0o755)
        cmd = [sys.executable, "-c", _WRITE_AS_NOBODY, str(lake_dir), str(tmp_path)]
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=os.path.dirname(os.path.dirname(__file__)),
            env={**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(__file__))},
        )
        assert proc.returncode == 3, proc.stderr[-2000:]
        message = proc.stdout
    else:
        os.chmod(lake_dir, 0o555)
        with pytest.raises(StorageError) as err:
            Lake(str(lake_dir)).write_table("survey", "sweeps", pa.table({"x": [1]}))
        message = str(err.value)
    assert "permission denied" in message and str(lake_dir) in message
    assert list(lake_dir.iterdir()) == []  # nothing half-made
