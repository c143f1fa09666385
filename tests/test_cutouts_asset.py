"""The cutouts asset on a cutout service: stamps as tensors, failures recorded, resume on re-run."""

import dagster as dg
import numpy as np
import pyarrow as pa

from darkhaloscope.catalog.crossmatch import POSITIVE_SCHEMA
from darkhaloscope.catalog.cuts import NEGATIVE_SCHEMA
from darkhaloscope.imaging.cutout_table import FETCHES, load_stamps
from darkhaloscope.stamps import from_tensor_column
from io_managers import LakeIOManager
from lake_platform.lake import Lake
from lens_assets.imaging import cutouts
from lens_assets.shared.partitions import sweep_partitions
from resources import LakeResource, SurveyResource
from resources.imaging import ImagingResource
from tests.support.cutout_server import CutoutServer
from tests.support.wap import run_assets

SWEEP = "sweep-030m005-035p000.fits"


def _catalog(lake: Lake, n: int = 4) -> pa.Table:
    rows = {f.name: [None] * n for f in NEGATIVE_SCHEMA}
    rows.update(
        object_id=list(range(1, n + 1)),
        ra=[31.0 + 0.01 * i for i in range(n)],
        dec=[-2.0] * n,
        type=["DEV"] * n,
        split=["test"] * n,
        sweep_file=[SWEEP] * n,
        row_index=list(range(n)),
        pool=["N1"] * n,
        nobs_z_bin=["3-5"] * n,
        type_bin=["DEV"] * n,
    )
    for b in "grz":
        rows[f"psfsize_{b}"] = [1.2] * n
        rows[f"psfdepth_{b}"] = [1e3] * n
    neg = pa.Table.from_pydict(rows, schema=pa.schema([f.with_nullable(True) for f in NEGATIVE_SCHEMA]))
    lake.write_table("catalog", "negatives", neg, partition={"sweep_file": SWEEP})
    lake.write_table("catalog", "positives", pa.Table.from_pylist([], schema=POSITIVE_SCHEMA))
    lake.write_table("catalog", "training_catalog", pa.table({"object_id": pa.array([1, 2], pa.int64())}))
    return neg


def _resources(tmp_path, server) -> dict:
    lake = LakeResource(uri=str(tmp_path / "lake"))
    return {
        "lake": lake,
        "survey": SurveyResource(survey=str(tmp_path / "no-mirror")),
        "imaging": ImagingResource(cutout_source=server.base_url),
        "io_manager": LakeIOManager(uri=lake.uri),
    }


def test_service_cutouts_are_committed_failures_recorded_and_not_fetched_again(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    neg = _catalog(lake)
    ra = neg.column("ra").to_pylist()
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(sweep_partitions.name, [SWEEP])
    with CutoutServer(size=101, lifetime_s=60) as server:
        server.script(ra[3], -2.0, [404, "ok"])  # the first attempt fails for good (404 is not retried)
        resources = _resources(tmp_path, server)
        assert run_assets([cutouts.key], resources, instance, partition_key=SWEEP).success
        first = lake.read_table("imaging", "cutouts", partition={"sweep_file": SWEEP})
        errors = dict(zip(first.column("object_id").to_pylist(), first.column("fetch_error").to_pylist()))
        assert errors[4].startswith("http_404") and all(errors[i] == "" for i in (1, 2, 3))
        assert not dict(zip(first.column("object_id").to_pylist(), first.column("quality_ok").to_pylist()))[4]
        assert [server.count(r, -2.0) for r in ra] == [1, 1, 1, 1]

        assert run_assets([cutouts.key], resources, instance, partition_key=SWEEP).success
        assert [server.count(r, -2.0) for r in ra] == [1, 1, 1, 2]  # only the failed target again
        second = lake.read_table("imaging", "cutouts", partition={"sweep_file": SWEEP})
    assert sorted(second.column("object_id").to_pylist()) == [1, 2, 3, 4]
    assert set(second.column("fetch_error").to_pylist()) == {""}
    (stamps,), found = load_stamps(lake.dataset("imaging", "cutouts"), [4, 1])
    assert found.all() and stamps.shape == (2, 3, 101, 101)
    assert np.array_equal(
        stamps[1], from_tensor_column(first.column("image"))[first.column("object_id").to_pylist().index(1)]
    )


def test_a_run_that_dies_mid_partition_resumes_chunk_by_chunk(tmp_path, monkeypatch):
    """The first run dies after two chunks of a sweep file; the next run of the partition (a run
    retry, or the user's) fetches only the rest, and the in-flight chunks are dropped once the
    partition is published."""
    import darkhaloscope.imaging.cutout_table as cutout_table
    import lens_assets.imaging as imaging

    lake = Lake(str(tmp_path / "lake"))
    neg = _catalog(lake, n=8)
    ra = neg.column("ra").to_pylist()
    monkeypatch.setattr(cutout_table, "CHUNK", 2)
    real_batches, attempts = imaging.cutout_batches, []

    def dies_once(targets, source, size=101):
        attempts.append(targets.num_rows)
        for i, batch in enumerate(real_batches(targets, source, size)):
            yield batch
            if len(attempts) == 1 and i == 1:
                raise ConnectionError("the machine went away")  # after two chunks, before the third is asked for

    monkeypatch.setattr(imaging, "cutout_batches", dies_once)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(sweep_partitions.name, [SWEEP])
    with CutoutServer(size=101, lifetime_s=60) as server:
        resources = _resources(tmp_path, server)
        died = run_assets([cutouts.key], resources, instance, partition_key=SWEEP, raise_on_error=False)
        assert not died.success  # the step is not retried in place: HTTP faults were retried by the client
        result = run_assets([cutouts.key], resources, instance, partition_key=SWEEP)
        assert result.success
        assert attempts == [8, 4]  # the retry asked only for the targets of the chunks not yet fetched
        assert [server.count(r, -2.0) for r in ra] == [1] * 8
    part = lake.read_table("imaging", "cutouts", partition={"sweep_file": SWEEP})
    assert sorted(part.column("object_id").to_pylist()) == list(range(1, 9))
    assert not lake.inflight().exists(*FETCHES)  # in-flight chunks dropped once published
    assert lake.tables() == [
        ("catalog", "negatives"),
        ("catalog", "positives"),
        ("catalog", "training_catalog"),
        ("imaging", "cutouts"),
    ]
