"""Time of one small mock survey (the size of tests/test_mock_hidden_lenses.py) and of painting its
known lenses: ``python benchmarks/mock_truth_render_time.py`` (run once, at this tiny size)."""

from __future__ import annotations

import tempfile
import time

import pyarrow as pa
import pyarrow.parquet as pq

from darkhaloscope.survey.sweeps import read_sweep
from mock_survey.hidden_lenses import HOST_COLUMNS
from mock_survey.lenses import lens_arc_stamps
from mock_survey.survey import MockSurveyConfig, generate_mock_survey


def main() -> None:
    cfg = MockSurveyConfig(n_rows_per_file=9000, chunk_rows=3000, seed=3, blocks=((30, -5),), n_hidden_lenses=5)
    with tempfile.TemporaryDirectory() as root:
        t0 = time.perf_counter()
        m = generate_mock_survey(root, cfg)
        t1 = time.perf_counter()
        known = pq.read_table(m.truth_path)
        catalog = pa.concat_tables([read_sweep(p, columns=HOST_COLUMNS) for p in m.sweep_files])
        lens_arc_stamps(known, catalog)
        t2 = time.perf_counter()
    print(f"generate_mock_survey (draws + {m.n_hidden_lenses} hidden arcs): {t1 - t0:.1f} s")
    print(f"painting the {m.n_known_lenses} known lenses: {t2 - t1:.1f} s")


if __name__ == "__main__":
    main()
