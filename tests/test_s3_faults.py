"""The lake on S3 when S3 misbehaves: a real S3 server (moto) behind a fault-injecting proxy.

Every test gets its own bucket. The proxy answers scripted requests with HTTP 500, drops the
connection, cuts a response in half or stalls past the client timeout; the tests check that
transient faults are absorbed by the SDK's retries, that persistent ones fail the write with a
clear error while readers still see the previous version whole, and that bad credentials and
missing buckets give CredentialError / InputError without anything half-written.
"""

from __future__ import annotations

import itertools
import json
import pickle
import subprocess
import sys

import boto3
import pyarrow as pa
import pytest
import requests

from darkhaloscope.errors import CredentialError, InputError, StorageError
from lake_platform.lake import Lake, translate_storage_error
from tests.support.fault_proxy import FaultProxy
from tests.support.s3_server import fresh_bucket, list_keys

pytestmark = pytest.mark.s3

PART = {"sweep": "s1"}
PART_KEY = "lake/catalog/rows/sweep=s1/part-0.parquet"
_users = itertools.count()
STAGING_PART = r"_staging/w-[^/?]+\.parquet\?partNumber="  # the multipart upload of the temporary object


def _table(version: int, n: int = 2000) -> pa.Table:
    return pa.table({"id": pa.array(range(n), pa.int64()), "version": pa.array([version] * n, pa.int32())})


@pytest.fixture
def proxy(s3_server):
    # stall_s (2 s) is longer than the lake's request timeout (1 s) below, so a stall is a timeout.
    with FaultProxy(s3_server.host, s3_server.port, stall_s=2.0, lifetime_s=60.0) as px:
        yield px


def _lake(bucket: str, proxy: FaultProxy, attempts: int = 3) -> Lake:
    return Lake(
        f"s3://{bucket}/lake",
        s3_endpoint=proxy.endpoint_url,
        s3_max_attempts=attempts,
        s3_connect_timeout_s=1.0,
        s3_request_timeout_s=1.0,
    )


def _seed_v1(lake: Lake) -> bytes:
    lake.write_table("catalog", "rows", _table(1), partition=PART)
    return lake.fs.open_input_stream(f"{lake.partition_path('catalog', 'rows', PART)}/part-0.parquet").read()


def _assert_v1_intact(s3_server, bucket: str, lake: Lake, v1_bytes: bytes) -> None:
    keys = list_keys(s3_server, bucket)
    # No staging object or half-written part left behind, and the committed object is v1 byte for byte.
    assert not [k for k in keys if "_staging/w-" in k], keys
    assert keys[PART_KEY] == len(v1_bytes)
    body = s3_server.client().get_object(Bucket=bucket, Key=PART_KEY)["Body"].read()
    assert body == v1_bytes
    assert lake.read_table("catalog", "rows", partition=PART).equals(_table(1))
    assert lake.read_table("catalog", "rows").column("version").to_pylist() == [1] * 2000


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "action, where",
    [
        ("error500", dict(path_re=STAGING_PART)),  # the data upload fails twice, then succeeds
        ("drop", dict(path_re=STAGING_PART)),  # connection closed with no answer
        ("drop_mid_response", dict(header="x-amz-copy-source")),  # commit copy done, reply cut
        ("stall", dict(path_re=STAGING_PART)),  # no answer within the client timeout
    ],
)
def test_transient_faults_are_retried_and_the_write_completes(s3_server, proxy, action, where):
    bucket = fresh_bucket(s3_server)
    lake = _lake(bucket, proxy)
    _seed_v1(lake)
    proxy.fail(action, times=2 if action == "error500" else 1, **where)
    info = lake.write_table("catalog", "rows", _table(2), partition=PART)
    assert proxy.actions[action] == (2 if action == "error500" else 1)  # the faults really happened
    assert info.rows == 2000
    assert lake.read_table("catalog", "rows", partition=PART).equals(_table(2))
    assert not [k for k in list_keys(s3_server, bucket) if "_staging/w-" in k]


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "action, where, expect_in_message",
    [
        ("error500", dict(path_re=STAGING_PART), "INTERNAL_FAILURE"),  # data never reaches S3
        ("error500", dict(header="x-amz-copy-source"), "INTERNAL_FAILURE"),  # staged but never committed
        ("stall", dict(header="x-amz-copy-source"), "copying"),  # commit times out every time
    ],
)
def test_persistent_faults_fail_clearly_and_keep_the_previous_version(
    s3_server, proxy, action, where, expect_in_message
):
    bucket = fresh_bucket(s3_server)
    lake = _lake(bucket, proxy, attempts=2)
    v1 = _seed_v1(lake)
    proxy.fail(action, **where)
    # a request that times out after the retries is the lake's StorageError naming the endpoint's settings
    with pytest.raises(StorageError if action == "stall" else OSError) as err:
        lake.write_table("catalog", "rows", _table(2), partition=PART)
    msg = str(err.value)
    assert expect_in_message in msg and bucket in msg, msg
    # The SDK retried (2 attempts per request) before giving up: more than one faulted request.
    assert proxy.actions[action] >= 2
    proxy.clear()
    _assert_v1_intact(s3_server, bucket, lake, v1)


@pytest.mark.timeout(30)
def test_missing_bucket_is_an_input_error_naming_it(s3_server, proxy):
    lake = _lake("no-such-bucket-dhs", proxy)
    with pytest.raises(InputError, match="no-such-bucket-dhs"):
        lake.write_table("catalog", "rows", _table(1), partition=PART)
    with pytest.raises(InputError, match="no-such-bucket-dhs"):
        lake.read_table("catalog", "rows")


@pytest.fixture
def moto_auth(s3_server):
    """Make moto check signatures and IAM (off by default); yields a valid key pair for an allowed user."""
    iam = boto3.client("iam", endpoint_url=s3_server.endpoint_url, region_name="us-east-1")
    user = f"lake-writer-{next(_users)}"
    iam.create_user(UserName=user)
    iam.put_user_policy(
        UserName=user,
        PolicyName="lake",
        PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
        ),
    )
    key = iam.create_access_key(UserName=user)["AccessKey"]
    # moto's documented switch: after 0 unauthenticated requests, every request is authenticated.
    requests.post(f"{s3_server.endpoint_url}/moto-api/reset-auth", data=b"0", timeout=5).raise_for_status()
    try:
        yield key["AccessKeyId"], key["SecretAccessKey"]
    finally:
        requests.post(f"{s3_server.endpoint_url}/moto-api/reset-auth", data=b"inf", timeout=5).raise_for_status()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("wrong", ["access_key", "secret"])
def test_invalid_credentials_raise_credential_error_once_without_writing(
    s3_server, proxy, moto_auth, monkeypatch, wrong
):
    key_id, secret = moto_auth
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    bucket = fresh_bucket(s3_server, prefix="auth")  # created with the valid key (auth is on)
    good = _lake(bucket, proxy)
    v1 = _seed_v1(good)  # the valid key works: moto really distinguishes keys
    if wrong == "access_key":
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIA" + "Z" * 16)
    else:
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "w" * 40)
    bad = _lake(bucket, proxy)
    proxy.reset_counters()
    with pytest.raises(CredentialError) as err:
        bad.write_table("catalog", "rows", _table(2), partition=PART)
    assert "AWS_SECRET_ACCESS_KEY" not in str(err.value) or "refresh" in str(err.value)
    assert "w" * 40 not in str(err.value)
    # A rejected key is not retried: one request per distinct call, no repeats of the same one.
    paths = [(m, p) for m, p, _ in proxy.log if "extremelyunlikely" not in p]
    assert len(paths) == len(set(paths)) and len(paths) <= 2, proxy.log
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    _assert_v1_intact(s3_server, bucket, _lake(bucket, proxy), v1)


@pytest.mark.timeout(30)
def test_injected_invalid_access_key_reply_is_a_credential_error(s3_server, proxy):
    # The same S3 XML error body as AWS sends (InvalidAccessKeyId), on a data request.
    bucket = fresh_bucket(s3_server)
    lake = _lake(bucket, proxy)
    v1 = _seed_v1(lake)
    proxy.fail("forbidden", path_re=STAGING_PART)
    with pytest.raises(CredentialError) as err:
        lake.write_table("catalog", "rows", _table(2), partition=PART)
    assert "INVALID_ACCESS_KEY_ID" in str(err.value.__cause__ or err.value)
    assert proxy.actions["forbidden"] == 1  # a 403 is final: the SDK does not retry it
    proxy.clear()
    _assert_v1_intact(s3_server, bucket, lake, v1)


# Error texts produced by pyarrow 26 in the runs above (a wrong secret on a listing; the
# InvalidAccessKeyId reply on an upload): pyarrow spells AWS error codes in SCREAMING_SNAKE_CASE.
PYARROW_CREDENTIAL_TEXTS = [
    "When listing objects under key 'lake/g/a/' in bucket 'bkt': AWS Error SIGNATURE_DOES_NOT_MATCH during "
    "ListObjectsV2 operation: The request signature we calculated does not match the signature you provided.",
    "When uploading part for key 'lake/x/_staging-1.parquet' in bucket 'bkt': AWS Error INVALID_ACCESS_KEY_ID "
    "during UploadPart operation: The AWS Access Key Id you provided does not exist in our records.",
]


@pytest.mark.parametrize("text", PYARROW_CREDENTIAL_TEXTS)
def test_pyarrow_credential_error_texts_map_to_credential_error(text):
    assert isinstance(translate_storage_error(OSError(text), "s3://bkt/lake"), CredentialError)


@pytest.mark.timeout(60)
def test_a_pickled_lake_keeps_its_retries(s3_server, proxy):
    """A lake shipped to a Spark executor (pickled) retries as configured: pyarrow's own pickling
    of an S3 file system drops the retry strategy (back to 3 attempts), so 4 faults would fail it."""
    bucket = fresh_bucket(s3_server)
    clone = pickle.loads(pickle.dumps(_lake(bucket, proxy, attempts=5)))
    proxy.fail("error500", times=4, path_re=STAGING_PART)
    assert clone.write_table("catalog", "rows", _table(2), partition=PART).rows == 2000
    assert proxy.actions["error500"] == 4
    assert (clone.s3_endpoint, clone.fs.region) == (proxy.endpoint_url, "us-east-1")


_COUNTING = """
import sys
import pyarrow as pa
from darkhaloscope import s3_retries
from lake_platform.lake import Lake
lake = Lake(sys.argv[1], s3_endpoint=sys.argv[2], s3_max_attempts=5, s3_connect_timeout_s=1.0, s3_request_timeout_s=1.0)
lake.write_table("catalog", "rows", pa.table({"id": list(range(100))}), partition={"sweep": "s1"})
print(s3_retries.monitored(), s3_retries.retries())
"""


@pytest.mark.timeout(60)
def test_the_sdks_retries_of_slowdown_are_counted(s3_server, proxy):
    """503 SlowDown answers are retried by the AWS SDK with back-off, and counted from its client-side
    monitoring; in a fresh process, as in a Spark task (S3 support initialises once per process)."""
    bucket = fresh_bucket(s3_server)
    proxy.fail("slowdown", times=3, method="PUT")
    out = subprocess.run(
        [sys.executable, "-c", _COUNTING, f"s3://{bucket}/lake", proxy.endpoint_url],
        capture_output=True,
        text=True,
        timeout=50,
        check=True,
    )
    assert out.stdout.split() == ["True", "3"], out.stderr
    assert proxy.actions["slowdown"] == 3


def test_the_pipes_s3_client_takes_the_lakes_timeout_settings(monkeypatch):
    from resources.pipes_transport import s3_client

    monkeypatch.setenv("DHS_S3_CONNECT_TIMEOUT_S", "1.5")
    monkeypatch.setenv("DHS_S3_REQUEST_TIMEOUT_S", "7")
    config = s3_client("http://127.0.0.1:9").meta.config
    assert (config.connect_timeout, config.read_timeout) == (1.5, 7.0)
