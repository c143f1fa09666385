"""One sweeps partition in, one negatives partition out: the catalog stage's unit of work, in-process."""

from __future__ import annotations

import pyarrow as pa
import pytest

from darkhaloscope.catalog.cuts import NEGATIVE_SCHEMA, KnownLensIndex, select_negatives
from darkhaloscope.catalog.sweep_tasks import build_negative_partition, sweep_file_names
from darkhaloscope.errors import InputError
from lake_platform.lake import PART_FILE
from tests.spark_fixtures import known_lenses_table, synthetic_sweeps

NAME = "sweep-150p000-155p005.fits"


def _file(n: int = 3000) -> pa.Table:
    return synthetic_sweeps(n, key="sweep-tasks", ra0=150.0, dec0=0.0, size_deg=1.0, sweep_file=NAME)


def _lenses(t: pa.Table) -> KnownLensIndex:
    ra, dec = t.column("ra").to_numpy(), t.column("dec").to_numpy()
    return KnownLensIndex.from_table(
        known_lenses_table([{"ra": ra[i], "dec": dec[i]} for i in range(0, t.num_rows, 50)])
    )


@pytest.mark.parametrize("lake", ["local", "s3"], indirect=True)
def _tables(lake, name: str, lenses: KnownLensIndex) -> tuple:
    """build_negative_partition's leading arguments: the lake's sweeps, the file, the lenses, its negatives."""
    return lake.table("survey", "sweeps"), name, lenses, lake.table("catalog", "negatives")


def test_batched_partition_equals_whole_file_selection(lake):
    """Streaming a file in small batches selects the same rows, in object_id order, with the same
    funnel as one select_negatives over the whole file; a rebuild commits the same bytes."""
    t = _file()
    lenses = _lenses(t)
    lake.write_table("survey", "sweeps", t, partition={"sweep_file": NAME}, row_group_size=500)
    assert sweep_file_names(lake.table("survey", "sweeps")) == [NAME]
    expected, expected_funnel = select_negatives(t, lenses)
    funnel = build_negative_partition(*_tables(lake, NAME, lenses), batch_rows=333)
    got = lake.read_table("catalog", "negatives", partition={"sweep_file": NAME})
    assert expected.num_rows > 30 and funnel[NAME]["known_lens"] > 0
    assert got.equals(expected.sort_by("object_id"))
    assert funnel == expected_funnel
    path = f"{lake.partition_path('catalog', 'negatives', {'sweep_file': NAME})}/{PART_FILE}"
    first = lake.fs.open_input_file(path).read()
    build_negative_partition(*_tables(lake, NAME, lenses), batch_rows=1000)
    assert lake.fs.open_input_file(path).read() == first


@pytest.mark.parametrize("lake", ["local"], indirect=True)
def test_sweep_file_without_survivors_gets_an_empty_partition(lake):
    t = _file(200)
    t = t.set_column(t.schema.get_field_index("dec"), "dec", pa.array([-40.0] * t.num_rows))  # outside the footprint
    lake.write_table("survey", "sweeps", t, partition={"sweep_file": NAME})
    funnel = build_negative_partition(*_tables(lake, NAME, _lenses(t)))
    assert funnel[NAME]["input"] == 200 and funnel[NAME]["dec_footprint"] == 200 and funnel[NAME]["selected"] == 0
    part = lake.read_table("catalog", "negatives", partition={"sweep_file": NAME})
    assert part.num_rows == 0 and part.schema.names == NEGATIVE_SCHEMA.names


@pytest.mark.parametrize("lake", ["local"], indirect=True)
def test_partition_holding_another_sweep_file_is_refused_and_nothing_written(lake):
    t = _file(100)
    other = synthetic_sweeps(50, key="other", sweep_file="sweep-000p000-005p005.fits")
    # the lake refuses to write rows of another sweep file into the partition (its key is the
    # folder name); the catalog's own guard holds for partitions written before
    with pytest.raises(InputError, match=r"sweep_file='sweep-000p000-005p005.fits', but the partition is"):
        lake.write_table("survey", "sweeps", pa.concat_tables([t, other]), partition={"sweep_file": NAME})
    assert not lake.exists("survey", "sweeps")
    assert not lake.exists("catalog", "negatives")


@pytest.mark.parametrize("lake", ["local"], indirect=True)
def test_missing_sweeps_partition_names_it(lake):
    with pytest.raises(
        InputError, match=r"partition \{'sweep_file': 'sweep-nowhere.fits'\} of survey/sweeps is not in the lake"
    ):
        build_negative_partition(
            *_tables(lake, "sweep-nowhere.fits", KnownLensIndex.from_table(known_lenses_table([])))
        )
