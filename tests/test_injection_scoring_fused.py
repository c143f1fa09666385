"""The fused injection pass (render and score chunk by chunk, no stamps stored) against the bank's
path (render the batch, store the bank in a lake, read it back and score it), on a tiny bank with
the tiny lens finder: the same score rows, bit for bit."""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import torch

from darkhaloscope.errors import InputError
from darkhaloscope.evaluation.injection_scoring import render_and_score
from darkhaloscope.evaluation.scoring import INJECTION_META, score_batches
from darkhaloscope.lensing.bank import (
    InjectionConfig,
    bank_columns,
    bank_table,
    plan_injection_grid,
    render_injection_batch,
)
from darkhaloscope.training.models import build_model
from darkhaloscope.training.preprocess import PreprocessSpec
from lake_platform.lake import Lake
from tests.test_injection_bank_lib import _hosts

#: Render chunks of 3 that straddle the score chunks of 4, and Poisson noise on the arc.
CONFIG = InjectionConfig(per_cell=1, poisson_gain=150.0, render_chunk=3)


@pytest.fixture(scope="module")
def bank():
    tasks = plan_injection_grid(_hosts(27), CONFIG).slice(10, 9)
    rng = np.random.default_rng(1)
    host = rng.normal(0, 0.005, (tasks.num_rows, 3, 101, 101)).astype(np.float32)
    host[2, 1, 50, 50] = np.nan  # an unrenderable host: its injection fails, its control is unscorable
    torch.manual_seed(0)
    model = build_model("bottleneck_resnet_tiny", 3).eval()
    return tasks, host, np.full_like(host, 1 / 0.005**2), model, PreprocessSpec(crop=65)


def _sorted(table: pa.Table) -> pa.Table:
    return table.sort_by([("kind", "ascending"), ("injection_id", "ascending")]).combine_chunks()


def _bytes(table: pa.Table) -> bytes:
    """The table's Arrow IPC bytes: equal tables with NaN in the same places give the same bytes
    (``Table.equals`` calls NaN unequal to itself)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


@pytest.fixture
def one_thread():
    """Both paths on one torch thread (the same threads: CPU kernels may sum in another order on more)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_fused_pass_scores_what_the_stored_bank_scores_bit_for_bit(bank, tmp_path, one_thread):
    tasks, host, iv, model, spec = bank
    injected, _, params = render_injection_batch(tasks, host, iv, config=CONFIG)
    lake = Lake(str(tmp_path / "lake"))
    lake.write_table("injection", "injection_bank", bank_table(tasks, params, injected, host), partition={"batch": "b"})
    stored = lake.table("injection", "injection_bank").dataset()
    reference = pa.Table.from_batches(
        [
            b
            for column, kind in (("image", "injection"), ("control", "control"))
            for b in score_batches(stored, INJECTION_META, column, kind, model, spec, "cpu")
        ]
    )
    seen = []
    chunks = list(
        render_and_score(tasks, host, iv, model, spec, config=CONFIG, chunk=4, progress=lambda d, t: seen.append(d))
    )
    fused = pa.Table.from_batches([b for c in chunks for b in c.scores])
    assert seen == [4, 8, 9]
    # the bank's rows come with the scores, chunk by chunk: the stored bank's, less its stamps
    rows = pa.concat_tables([c.bank for c in chunks]).sort_by("injection_id")
    assert _bytes(rows) == _bytes(bank_columns(tasks, params).sort_by("injection_id"))
    assert fused.schema.equals(reference.schema)
    assert _bytes(_sorted(fused)) == _bytes(_sorted(reference))
    inj = fused.filter(pc.equal(fused.column("kind"), "injection")).to_pydict()
    assert inj["invalid_reason"][2] == "injection_failed" and inj["score"][2] is None
    assert sum(inj["valid"]) == tasks.num_rows - 1
    # one control row per task; the unrenderable host (NaN pixels) is an unscorable control too
    controls = _sorted(fused.filter(pc.equal(fused.column("kind"), "control"))).to_pydict()
    assert controls["valid"] == [i != 2 for i in range(tasks.num_rows)]
    assert controls["invalid_reason"][2] != "" and controls["score"][2] is None


def test_fused_pass_refuses_hosts_of_another_shape(bank):
    tasks, host, iv, model, spec = bank
    with pytest.raises(InputError, match="host_images"):
        next(render_and_score(tasks, host[:3], iv[:3], model, spec, config=CONFIG))
