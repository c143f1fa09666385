"""Fault injection for tests that run the pipeline in other processes (``dagster dev``, its run
workers): Python imports this module at start-up when this folder is on PYTHONPATH.

With ``DHS_TEST_DUPLICATE_ROWS`` naming a file, ``ingest_sweep`` stages every partition with its
first three rows twice — a reader bug — while that file exists; the ``sweeps`` audits must then
refuse to publish it.
"""

import os

if os.environ.get("DHS_TEST_DUPLICATE_ROWS"):
    import pyarrow as pa

    import darkhaloscope.survey.sweeps as _sweeps

    _real_ingest = _sweeps.ingest_sweep

    def _duplicating_ingest(path, sweeps, sweep_file=None, **kwargs):
        info = _real_ingest(path, sweeps, sweep_file=sweep_file, **kwargs)
        if os.path.exists(os.environ["DHS_TEST_DUPLICATE_ROWS"]):
            part = {_sweeps.SWEEP_DIM: sweep_file}
            table = sweeps.read(part)
            sweeps.write(pa.concat_tables([table, table.slice(0, 3)]), partition=part)
        return info

    _sweeps.ingest_sweep = _duplicating_ingest
