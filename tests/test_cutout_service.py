"""The fits-cutout client against a scripted loopback server (no network, sub-second timeouts)."""

import numpy as np
import pytest

from darkhaloscope.errors import InputError
from darkhaloscope.imaging.service import CutoutServiceClient, FetchOutcome, targets_from_columns
from tests.support.cutout_server import CutoutServer, expected_cube, fits_bytes

SIZE = 15


class SleepRecorder:
    def __init__(self):
        self.calls = []

    def __call__(self, s):
        self.calls.append(s)


@pytest.fixture
def make_client():
    made = []

    def factory(srv, **kw):
        sleep = SleepRecorder()
        opts = dict(size=SIZE, timeout_s=0.25, max_retries=3, backoff_base_s=1.0, backoff_max_s=30.0, max_concurrency=4)
        opts.update(kw)
        client = CutoutServiceClient(srv.base_url, sleep=sleep, **opts)
        made.append(client)
        return client, sleep

    yield factory
    for client in made:
        client.close()


def test_happy_path_returns_exact_cube_and_invvar(make_client):
    with CutoutServer(size=SIZE) as srv:
        client, sleep = make_client(srv)
        res = client.fetch(150.1, 2.2, key="a")
        img, ivar = expected_cube(150.1, 2.2, SIZE)
        assert res.image.dtype == np.float32 and res.image.shape == (3, SIZE, SIZE)
        np.testing.assert_array_equal(res.image, img)
        np.testing.assert_array_equal(res.invvar, ivar)
        assert res.bands == "grz" and res.attempts == 1 and res.flags == ()
        assert "fits-cutout?ra=150.1000000&dec=2.2000000&layer=ls-dr10" in res.url and res.url.endswith("&invvar")
        assert sleep.calls == []


def test_missing_invvar_is_flagged_not_invented(make_client):
    with CutoutServer(size=SIZE) as srv:
        srv.script(10.0, 0.0, ["no_invvar"])
        client, _ = make_client(srv)
        res = client.fetch(10.0, 0.0)
        assert res.invvar is None and "no_invvar" in res.flags


def test_retries_through_500s_with_deterministic_jittered_backoff(make_client):
    with CutoutServer(size=SIZE) as srv:
        srv.script(20.0, 1.0, [500, 503, "ok"])
        client, sleep = make_client(srv)
        res = client.fetch(20.0, 1.0)
        assert res.attempts == 3 and srv.count(20.0, 1.0) == 3
        assert len(sleep.calls) == 2
        assert 0 <= sleep.calls[0] <= 1.0 and 0 <= sleep.calls[1] <= 2.0
        assert sleep.calls == [client.backoff_s(20.0, 1.0, 0), client.backoff_s(20.0, 1.0, 1)]
        # Different targets jitter differently (no thundering herd), the same target identically.
        assert client.backoff_s(20.0, 1.0, 3) != client.backoff_s(21.0, 1.0, 3)
        assert all(client.backoff_s(20.0, 1.0, 10) <= 30.0 for _ in range(3))


def test_truncated_body_is_retried(make_client):
    with CutoutServer(size=SIZE) as srv:
        srv.script(30.0, -1.0, ["truncate", "ok"])
        client, sleep = make_client(srv)
        res = client.fetch(30.0, -1.0)
        assert res.attempts == 2 and len(sleep.calls) == 1
        np.testing.assert_array_equal(res.image, expected_cube(30.0, -1.0, SIZE)[0])


def test_stall_times_out_retries_and_is_recorded_as_failure_not_zeros(make_client):
    with CutoutServer(size=SIZE, stall_s=0.6) as srv:
        srv.script(40.0, 5.0, ["stall"])
        client, sleep = make_client(srv, timeout_s=0.15, max_retries=1)
        out = client.fetch_many([("stuck", 40.0, 5.0), ("fine", 41.0, 5.0)])
        assert [r.key for r in out.results] == ["fine"]
        (fail,) = out.failures
        assert fail.key == "stuck" and fail.kind == "retries_exhausted" and fail.attempts == 2
        assert "40.0000000" in fail.url and fail.message
        assert not hasattr(fail, "image")
        assert srv.count(40.0, 5.0) == 2 and len(sleep.calls) == 1
        with pytest.raises(InputError, match="not obtained after 2 attempts"):
            client.fetch(40.0, 5.0)


def test_trickling_body_hits_total_deadline(make_client):
    with CutoutServer(size=SIZE, trickle_s=0.05) as srv:
        srv.script(45.0, 5.0, ["trickle", "ok"])
        client, sleep = make_client(srv, timeout_s=0.2)
        res = client.fetch(45.0, 5.0)
        assert res.attempts == 2 and len(sleep.calls) == 1
        np.testing.assert_array_equal(res.image, expected_cube(45.0, 5.0, SIZE)[0])


def test_html_body_raises_input_error_naming_url(make_client):
    with CutoutServer(size=SIZE) as srv:
        srv.script(50.0, 3.0, ["html"])
        client, sleep = make_client(srv)
        with pytest.raises(InputError) as ei:
            client.fetch(50.0, 3.0)
        msg = str(ei.value)
        assert srv.base_url + "/fits-cutout?ra=50.0000000" in msg and "HTML" in msg and "<!DOCTYPE html>" in msg
        assert srv.count(50.0, 3.0) == 1 and sleep.calls == []
        # In a batch it aborts the run: a service answering HTML is misconfigured for every target.
        with pytest.raises(InputError, match="HTML"):
            client.fetch_many([("x", 50.0, 3.0)])


def test_404_is_not_retried(make_client):
    with CutoutServer(size=SIZE) as srv:
        srv.script(60.0, 4.0, [404])
        client, sleep = make_client(srv)
        out = client.fetch_many([("gone", 60.0, 4.0)])
        assert out.results == [] and out.failures[0].kind == "http_404" and out.failures[0].attempts == 1
        assert srv.count(60.0, 4.0) == 1 and sleep.calls == []


def test_wrong_shape_or_bands_is_input_error():
    client = CutoutServiceClient("http://127.0.0.1:9", size=SIZE + 2)
    body = fits_bytes(*expected_cube(1.0, 1.0, SIZE), "grz")
    with pytest.raises(
        InputError, match=r"http://x/fits-cutout: primary HDU has shape \(3, 15, 15\), expected \(3, 17, 17\)"
    ):
        client.parse_fits(body, "http://x/fits-cutout")
    client = CutoutServiceClient("http://127.0.0.1:9", size=SIZE)
    with pytest.raises(InputError, match="BANDS='gri'"):
        client.parse_fits(fits_bytes(*expected_cube(1.0, 1.0, SIZE), "gri"), "http://x/fits-cutout")


def test_resume_skips_done_keys_and_keeps_target_order(make_client):
    with CutoutServer(size=SIZE) as srv:
        client, _ = make_client(srv)
        targets = [(f"k{i}", 100.0 + i, 1.0) for i in range(6)]
        committed = []
        out = client.fetch_many(targets, already_done={"k1", "k4"}, on_result=lambda r: committed.append(r.key))
        assert isinstance(out, FetchOutcome)
        assert [r.key for r in out.results] == ["k0", "k2", "k3", "k5"]
        assert out.skipped == ["k1", "k4"] and sorted(committed) == ["k0", "k2", "k3", "k5"]
        assert srv.count(101.0, 1.0) == 0 and srv.count(104.0, 1.0) == 0
        assert out.stacked_images().shape == (4, 3, SIZE, SIZE)
        with pytest.raises(InputError, match="more than once"):
            client.fetch_many([("a", 1.0, 1.0), ("a", 2.0, 1.0)])


def test_concurrency_is_bounded(make_client):
    with CutoutServer(size=SIZE, hold_s=0.06) as srv:
        client, _ = make_client(srv, max_concurrency=3)
        out = client.fetch_many([(i, 200.0 + i, -2.0) for i in range(12)])
        assert len(out.results) == 12 and not out.failures
        assert 2 <= srv.max_in_flight <= 3


def test_bad_configuration_and_targets():
    with pytest.raises(InputError, match="base URL"):
        CutoutServiceClient("ftp://example.org")
    with pytest.raises(InputError, match="invalid coordinates"):
        targets_from_columns(["a", "b"], [10.0, 400.0], [0.0, 0.0])
    assert targets_from_columns(["a"], [10.0], [-5.0]) == [("a", 10.0, -5.0)]


def test_service_source_fetches_the_requested_stamp_size():
    """`dhs cutout --size 64` through a cutout service: the client asks for, and decodes, 64 px."""
    from darkhaloscope.imaging.sources import ServiceSource

    with CutoutServer(size=64) as srv:
        batch, failed = ServiceSource(srv.base_url, max_retries=0).cutouts([200.0, 201.0], [-2.0, -2.0], size=64)
    assert batch.image.shape == (2, 3, 64, 64) and failed.tolist() == ["", ""]
    assert np.allclose(batch.image[1], expected_cube(201.0, -2.0, 64, "grz")[0])
