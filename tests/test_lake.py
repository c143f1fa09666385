"""The lake on a local folder and on a real S3 protocol server: layout, atomic commits, reads."""

from __future__ import annotations

import pyarrow as pa
import pytest

from darkhaloscope.errors import InputError
from lake_platform.lake import PART_FILE


def _table(n: int, offset: int = 0) -> pa.Table:
    return pa.table(
        {"object_id": pa.array(range(offset, offset + n), pa.int64()), "flux_r": pa.array([1.5] * n, pa.float32())}
    )


def test_partition_layout_and_roundtrip(lake):
    info = lake.write_table("survey", "sweeps", _table(5), partition={"sweep_file": "sweep-000m010-005m005.fits"})
    assert info.rows == 5
    assert info.uri.endswith(f"survey/sweeps/sweep_file=sweep-000m010-005m005.fits/{PART_FILE}")
    lake.write_table("survey", "sweeps", _table(3, 100), partition={"sweep_file": "sweep-005m010-010m005.fits"})
    assert lake.partitions("survey", "sweeps") == [
        {"sweep_file": "sweep-000m010-005m005.fits"},
        {"sweep_file": "sweep-005m010-010m005.fits"},
    ]
    whole = lake.read_table("survey", "sweeps")
    assert whole.num_rows == 8 and "sweep_file" in whole.column_names
    one = lake.read_table("survey", "sweeps", partition={"sweep_file": "sweep-005m010-010m005.fits"})
    assert one.column("object_id").to_pylist() == [100, 101, 102]
    assert lake.count_rows("survey", "sweeps") == 8
    assert lake.tables() == [("survey", "sweeps")]


def test_rewrite_replaces_partition(lake):
    lake.write_table("catalog", "negatives", _table(4))
    lake.write_table("catalog", "negatives", _table(2, 50))
    assert lake.read_table("catalog", "negatives").column("object_id").to_pylist() == [50, 51]


def test_streamed_batches_and_failed_write_keeps_previous_version(lake):
    lake.write_table("catalog", "negatives", _table(3))

    def exploding_batches():
        yield _table(10, 1000).to_batches()[0]
        raise RuntimeError("upstream died mid-write")

    with pytest.raises(RuntimeError, match="mid-write"):
        lake.write_table("catalog", "negatives", exploding_batches(), schema=_table(1).schema)
    assert lake.read_table("catalog", "negatives").column("object_id").to_pylist() == [0, 1, 2]
    # no staging object is left behind
    folder = lake.partition_path("catalog", "negatives")
    import pyarrow.fs as pafs

    names = [i.base_name for i in lake.fs.get_file_info(pafs.FileSelector(folder))]
    assert names == [PART_FILE]


@pytest.mark.parametrize("bad", ["../escape", "a/b", "..", ".hidden", "_staging", "", "x y"])
def test_partition_keys_with_separators_are_refused(lake, bad):
    with pytest.raises(InputError, match="partition key"):
        lake.write_table("survey", "sweeps", _table(1), partition={"sweep_file": bad})
    assert lake.tables() == []


def test_bytes_artifacts_are_committed_beside_the_table(lake):
    uri = lake.write_bytes("evaluation", "evaluation_report", "report.html", b"<html></html>")
    assert uri.endswith("evaluation/evaluation_report.files/report.html")
    assert lake.read_bytes("evaluation", "evaluation_report", "report.html") == b"<html></html>"
    lake.write_bytes("search", "candidate_gallery", "stamps/12.png", b"png")
    assert lake.read_bytes("search", "candidate_gallery", "stamps/12.png") == b"png"
    with pytest.raises(InputError, match="partition key"):
        lake.write_bytes("search", "candidate_gallery", "../escape.png", b"png")
    lake.write_table("evaluation", "evaluation_report", _table(1))
    # the table's folder holds only Parquet; its files are no table of their own
    assert lake.tables() == [("evaluation", "evaluation_report")]
    assert lake.dataset("evaluation", "evaluation_report").files == [
        f"{lake.table_path('evaluation', 'evaluation_report')}/part-0.parquet"
    ]


def test_missing_table_is_a_clear_error(lake):
    with pytest.raises(InputError, match="no committed data"):
        lake.read_table("catalog", "positives")


def test_deterministic_bytes(lake):
    a = lake.write_table("catalog", "a_table", _table(100))
    b = lake.write_table("catalog", "b_table", _table(100))
    read = lambda uri: lake.fs.open_input_stream(uri.removeprefix("s3://")).read()  # noqa: E731
    assert read(a.uri) == read(b.uri)


def test_missing_bucket_is_named(s3_server):
    from lake_platform.lake import Lake

    lake = Lake("s3://no-such-bucket-dhs/lake", s3_endpoint=s3_server.endpoint_url)
    with pytest.raises(InputError, match="no-such-bucket-dhs"):
        lake.write_table("survey", "sweeps", _table(1))
