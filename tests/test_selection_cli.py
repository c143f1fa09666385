"""``dhs selection``: C for a population from a published lake; a bad population table (a missing
column, a value outside the proposal, a non-positive weight, too few samples) or an unknown
threshold exits 2 naming the column and the range (or the usable thresholds), and writes nothing."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from darkhaloscope.lensing.bank import PLAN_SUMMARY_KEY, with_conditioning
from darkhaloscope.lensing.priors import PROPOSALS
from dhs.main import main
from lake_platform.lake import Lake
from tests.test_closure import THETA_E, Z_L, _injections, _user_table


@pytest.fixture(scope="module")
def lake_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("lake")
    lake = Lake(str(root))
    bank = _injections(1500).append_column("kind", pa.array(["injection"] * 1500))
    lake.write_table("evaluation", "injection_scores", bank, partition={"injection_batch": "batch-00000"})
    lake.write_table(
        "evaluation",
        "thresholds",
        pa.table({"name": ["fpr=1e-2"], "threshold": [0.5], "threshold_ci68_lo": [0.48], "threshold_ci68_hi": [0.52]}),
    )
    priors = {k: [p.kind, p.lo, p.hi, p.mu, p.sigma] for k, p in PROPOSALS["broad"].priors.items()}
    summary = {"theta_e_values": THETA_E, "z_l_values": Z_L}
    plan = pa.table({"injection_id": [0]}).replace_schema_metadata({PLAN_SUMMARY_KEY: json.dumps(summary).encode()})
    lake.write_table("injection", "injection_plan", with_conditioning(plan, {"priors": priors}))
    return root


def _run(monkeypatch, lake_dir, *args) -> int:
    monkeypatch.setenv("DHS_LAKE", str(lake_dir))
    return main(["selection", *args])


def test_named_and_user_populations_print_c(monkeypatch, lake_dir, tmp_path, capsys):
    assert _run(monkeypatch, lake_dir, "mock", "--threshold", "fpr=1e-2", "--merge", "1", "--kind", "cell") == 0
    out = capsys.readouterr().out
    assert "population mock" in out and out.count("cell") >= len(THETA_E) * len(Z_L)
    path = tmp_path / "mine.parquet"
    pq.write_table(_user_table(800), path)
    assert _run(monkeypatch, lake_dir, str(path), "--threshold", "fpr=1e-2", "--merge", "1", "--format", "csv") == 0
    assert "user:mine" in capsys.readouterr().out


@pytest.mark.parametrize(
    "table, message",
    [
        (_user_table().drop_columns(["src_n_sersic"]), "missing column(s) ['src_n_sersic']"),
        (_user_table(src_r_sersic_arcsec=np.full(600, 2.0)), "column 'src_r_sersic_arcsec' has 600 value(s) outside"),
        (_user_table(weight=-np.ones(600)), "column 'weight' must be finite and > 0"),
        (_user_table(120), "needs >= 200"),
    ],
)
def test_bad_population_tables_exit_2_naming_the_column(monkeypatch, lake_dir, tmp_path, capsys, table, message):
    path = tmp_path / "bad.parquet"
    pq.write_table(table, path)
    before = sorted(p.name for p in lake_dir.rglob("*"))
    assert _run(monkeypatch, lake_dir, str(path), "--threshold", "fpr=1e-2") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err
    assert sorted(p.name for p in lake_dir.rglob("*")) == before


def test_an_unknown_threshold_lists_the_usable_ones(monkeypatch, lake_dir, capsys):
    assert _run(monkeypatch, lake_dir, "lenspop", "--threshold", "fpr=1e-9") == 2
    assert "usable thresholds: ['fpr=1e-2']" in capsys.readouterr().err
