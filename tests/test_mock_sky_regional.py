"""The mock sky drawn by region (``mock_survey.regional_sky``) renders the whole survey's pixels:
every window, wherever it lies (inside a file, at the corner of four), in whatever batches and
order it is asked for, equals the sky drawn from every sweep file with every lens painted; the
sky's arcs and summary are built once per survey and a corrupt summary is refused by name."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from darkhaloscope.errors import InputError
from darkhaloscope.survey.sweeps import read_sweep
from mock_survey.lenses import mock_sky_with_lenses
from mock_survey.regional_sky import SKY_DIR, SUMMARY_NAME, RegionalMockSky
from mock_survey.sky import MOCK_SKY_COLUMNS
from mock_survey.survey import MockSurveyConfig, generate_mock_survey

#: Four 5°x5° blocks meeting at (60°, 5°), with 11 known lenses between them.
BLOCKS = ((55, 0), (60, 0), (55, 5), (60, 5))


@pytest.fixture(scope="module")
def survey(tmp_path_factory):
    root = tmp_path_factory.mktemp("mock4")
    return generate_mock_survey(root, MockSurveyConfig(blocks=BLOCKS, n_rows_per_file=700, n_hidden_lenses=1, seed=3))


def _whole_sky(manifest):
    files = sorted(manifest.sweep_files, key=lambda p: p.name)
    catalog = pa.concat_tables([read_sweep(p, columns=MOCK_SKY_COLUMNS) for p in files])
    truths = [pq.read_table(p) for p in manifest.lens_truth_paths()]
    return mock_sky_with_lenses(catalog.select([*MOCK_SKY_COLUMNS, "object_id", "sweep_file"]), truths, manifest.seed)


def _windows(manifest) -> tuple[np.ndarray, np.ndarray]:
    """Every lens (arcs), the four blocks' corner and edges, and catalog sources."""
    truths = [pq.read_table(p) for p in manifest.lens_truth_paths()]
    catalog = pa.concat_tables([read_sweep(p, columns=["ra", "dec"]) for p in manifest.sweep_files])
    pick = np.random.default_rng(1).choice(catalog.num_rows, 24, replace=False)
    ra = np.concatenate(
        [
            *(t.column("ra").to_numpy() for t in truths),
            [60.0, 59.999, 60.001, 57.5, 62.5],
            catalog["ra"].to_numpy()[pick],
        ]
    )
    dec = np.concatenate(
        [
            *(t.column("dec").to_numpy() for t in truths),
            [5.0, 4.999, 5.001, 0.01, 9.99],
            catalog["dec"].to_numpy()[pick],
        ]
    )
    return ra, dec


def _same(a, b) -> bool:
    fields = ("image", "invvar", "maskbits")
    return all(np.array_equal(getattr(a, f), getattr(b, f)) for f in fields) and list(a.brickname) == list(b.brickname)


def test_windows_drawn_by_region_are_the_whole_survey_s_pixels(survey):
    whole = _whole_sky(survey)
    ra, dec = _windows(survey)
    order = np.argsort(ra)  # neighbouring windows together, as a sweep file's targets come
    regional, partial = RegionalMockSky(survey), False
    for batch in np.array_split(order, 5):
        cut, failures = regional.cutouts(ra[batch], dec[batch])
        assert _same(cut, whole.cutouts(ra[batch], dec[batch])[0]) and not any(failures)
        partial |= len(regional.drawn_files) < len(BLOCKS)
    assert partial  # some batches really were drawn from part of the survey
    # another process asking in another order and batching gets the same bytes
    again = RegionalMockSky(survey)
    for batch in np.array_split(np.random.default_rng(2).permutation(len(ra)), 3):
        assert _same(again.cutouts(ra[batch], dec[batch])[0], whole.cutouts(ra[batch], dec[batch])[0])


def test_the_sky_folder_is_built_once_and_a_corrupt_summary_is_refused(survey):
    RegionalMockSky(survey)
    folder = survey.root / SKY_DIR
    stamps = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    RegionalMockSky(survey)
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == stamps
    (folder / SUMMARY_NAME).write_text("{not json")
    with pytest.raises(InputError, match=SUMMARY_NAME):
        RegionalMockSky(survey)
    (folder / SUMMARY_NAME).unlink()  # rebuilt by the next opening
