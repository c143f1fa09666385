"""The search assets through dg.materialize on a small lake: targets counted against the funnel,
streamed scores from a cutout service with an unscorable row kept, kept stamps, candidates (one
model version or nothing), the gallery's page and stamps, and grade rounds."""

from __future__ import annotations

import re

import dagster as dg
import numpy as np
import pyarrow as pa

from darkhaloscope.catalog.cuts import NegativeSelectionConfig, funnel_with_selection, select_negatives
from io_managers import LakeIOManager
from lake_platform.lake import Lake
from lens_assets.shared.partitions import injection_batches, sweep_partitions
from resources import ComputeResource, LakeResource, SurveyResource
from resources.imaging import ImagingResource
from table_registry import (
    CANDIDATE_GALLERY,
    CANDIDATES,
    SEARCH_SCORES,
    SEARCH_STAMPS,
    SEARCH_TARGETS,
    VISUAL_GRADES,
)
from tests.spark_fixtures import known_lenses_table
from tests.support.cutout_server import CutoutServer
from tests.support.tiny_finder import publish_tiny_finder
from tests.support.wap import published_files, run_assets
from tests.test_catalog_cuts import rows

CANDS, GALLERY, GRADES = CANDIDATES.key, CANDIDATE_GALLERY.key, VISUAL_GRADES.key
SCORES, STAMPS, TARGETS = SEARCH_SCORES.key, SEARCH_STAMPS.key, SEARCH_TARGETS.key

SWEEP = "sweep-150p000-155p005.fits"
N = 6


def _lake(tmp_path) -> tuple[Lake, pa.Table]:
    lake = Lake(str(tmp_path / "lake"))
    publish_tiny_finder(lake)
    sweep = rows(N + 1, type=["DEV"] * N + ["PSF"], sweep_file=[SWEEP] * (N + 1))
    known = known_lenses_table([{"name": "KNOWN-1", "ra": sweep.column("ra")[1].as_py(), "dec": 1.0}])
    _, funnel = select_negatives(sweep, known)
    lake.write_table("survey", "sweeps", sweep, partition={"sweep_file": SWEEP})
    lake.write_table("survey", "known_lenses", known)
    lake.write_table(
        "catalog",
        "selection_funnel",
        funnel_with_selection(funnel, NegativeSelectionConfig()),
        partition={"sweep_file": SWEEP},
    )
    lake.write_table(
        "evaluation",
        "thresholds",
        pa.table({"name": ["score>0", "fpr_1e-04"], "threshold": pa.array([0.0, None], pa.float64())}),
    )
    inj = pa.table(
        {
            "kind": ["injection"] * 4,
            "injection_id": pa.array(np.arange(4)),
            "success": [True, True, True, False],
            "score": pa.array([0.9, 0.2, 0.5, None], pa.float64()),
            "valid": [True, True, True, False],
            "src_mag_r": pa.array(np.full(4, 22.0)),
        }
    )
    lake.write_table("evaluation", "injection_scores", inj, partition={"injection_batch": "batch-00000"})
    return lake, sweep


def _resources(lake: Lake, tmp_path, server) -> dict:
    res = LakeResource(uri=lake.uri)
    return {
        "lake": res,
        "io_manager": LakeIOManager(uri=res.uri),
        "compute": ComputeResource(device="cpu", profile="demo"),
        "survey": SurveyResource(survey=str(tmp_path / "no-mirror")),
        "imaging": ImagingResource(cutout_source=server.base_url),
    }


def _instance(sweep_files: list[str]) -> dg.DagsterInstance:
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(sweep_partitions.name, sweep_files)
    instance.add_dynamic_partitions(injection_batches.name, ["batch-00000"])
    return instance


def _grades_run(resources, instance, path, raise_on_error=True):
    return run_assets(
        [GRADES],
        resources,
        instance,
        run_config={"ops": {"search__visual_grades": {"config": {"csv_path": str(path)}}}},
        raise_on_error=raise_on_error,
    )


def test_search_end_to_end_on_a_small_lake(tmp_path):
    lake, sweep = _lake(tmp_path)
    instance = _instance([SWEEP])
    ra = sweep.column("ra").to_pylist()
    with CutoutServer(size=101, lifetime_s=120) as server:
        server.script(ra[4], 1.0, [404])  # a target the service cannot deliver
        resources = _resources(lake, tmp_path, server)
        targets = run_assets([TARGETS], resources, instance, partition_key=SWEEP)
        assert {e.check_name: e.passed for e in targets.get_asset_check_evaluations()} == {
            "search_targets_contract": True,
            "search_targets_in_funnel": True,
        }
        cfg = {"ops": {"search_scores": {"config": {"keep_threshold": 0.0, "chunk": 4}}}}
        scored = run_assets([SCORES, STAMPS], resources, instance, partition_key=SWEEP, run_config=cfg)
        assert all(e.passed for e in scored.get_asset_check_evaluations())
        assert run_assets([CANDS], resources, instance).success
        assert run_assets([GALLERY], resources, instance).success
    part = {"sweep_file": SWEEP}
    scores = lake.read_table(*SCORES, partition=part).sort_by("object_id")
    assert scores.num_rows == N and scores.column("valid").to_pylist() == [
        i != 4 for i in range(N)
    ]  # the PSF row is no target
    assert scores.column("invalid_reason")[4].as_py().startswith("fetch_failed: http_404")
    assert len(set(scores.column("model_version").to_pylist())) == 1
    assert lake.read_table(*STAMPS, partition=part).num_rows == N - 1
    cand = lake.read_table(*CANDS).sort_by("rank")
    assert cand.num_rows == N - 1 and cand.column("threshold_name").to_pylist() == ["score>0"] * (N - 1)
    assert [r["known_name"] for r in cand.to_pylist() if r["known"]] == ["KNOWN-1"]
    assert (
        cand.column("completeness")[0].as_py() == 1.0 and cand.column("n_injections")[0].as_py() == 3
    )  # the failed injection is not counted
    gallery = lake.read_table(*GALLERY)
    assert gallery.column("stamps").to_pylist() == [N - 1]
    exported = _check_gallery_files(lake, gallery.column("uri")[0].as_py(), cand)
    _check_grade_rounds(lake, resources, instance, cand, exported, tmp_path)


def _check_gallery_files(lake: Lake, uri: str, cand: pa.Table) -> str:
    """The published page beside its table, every stamp it links (relatively) published beside it,
    new candidates before known ones, no viewer link for the mock-free test sky (a cutout service
    here: not the real survey's mirror either, so no link); returns an export as the page writes it
    (its browser behaviour is tested in tests/test_gallery_chromium.py)."""
    folder = lake.files_path(*GALLERY)
    assert uri == f"{folder}/gallery.html"
    with open(uri, encoding="utf-8") as f:
        page = f.read()
    srcs = re.findall(r'<img class="stamp"[^>]*src="([^"]+)"', page)
    assert sorted(srcs) == sorted(f"stamps/{i}.png" for i in cand.column("object_id").to_pylist())
    for src in srcs:
        with open(f"{folder}/{src}", "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    statuses = re.findall(r'<div class="card" id="cand-\d+" data-status="(\w+)"', page)
    assert statuses == sorted(statuses, key=lambda s: s != "new")  # the new candidates first
    rows = cand.sort_by("rank").to_pylist()
    grades = ["A"] + ["ungraded"] * (len(rows) - 1)
    return "object_id,grade,ra,dec,score,model_version,known\n" + "".join(
        f"{r['object_id']},{g},{r['ra']!r},{r['dec']!r},{r['score']!r},{r['model_version']},{str(r['known']).lower()}\n"
        for r, g in zip(rows, grades)
    )


def _check_grade_rounds(lake: Lake, resources, instance, cand: pa.Table, exported: str, tmp_path):
    first, second, bad = tmp_path / "round1.csv", tmp_path / "round2.csv", tmp_path / "bad.csv"
    first.write_text(exported)  # the gallery's own export lands as it is
    c = cand.sort_by("rank").to_pylist()
    second.write_text(
        "object_id,grade,ra,dec,score,model_version,known\n"
        + "".join(
            f"{r['object_id']},{g},{r['ra']!r},{r['dec']!r},{r['score']!r},{r['model_version']},"
            f"{str(r['known']).lower()}\n"
            for r, g in zip(c, ["B", "not_a_lens"])
        )
    )
    bad.write_text(exported.replace(",A,", ",maybe,"))
    assert run_assets([GRADES], resources, instance).success  # nothing to land: an empty table, no round
    assert lake.read_table(*GRADES).num_rows == 0
    assert _grades_run(resources, instance, first).success
    assert _grades_run(resources, instance, second).success
    grades = lake.read_table(*GRADES)
    shown = len(c)  # the export holds every candidate shown: one graded, the others awaiting inspection
    assert grades.column("round").to_pylist() == [1] * shown + [2, 2]
    assert grades.column("grade").to_pylist() == ["A"] + ["ungraded"] * (shown - 1) + ["B", "not_a_lens"]
    assert grades.column("ra").to_pylist() == [r["ra"] for r in c] + [
        c[0]["ra"],
        c[1]["ra"],
    ]  # what the grader saw, at full precision
    before = published_files(lake)
    failed = _grades_run(resources, instance, bad, raise_on_error=False)
    assert not failed.success and published_files(lake) == before


def test_candidates_of_two_models_are_refused_and_nothing_is_published(tmp_path):
    lake, _ = _lake(tmp_path)
    row = {
        "object_id": 1,
        "sweep_file": SWEEP,
        "brickname": "x",
        "ra": 150.0,
        "dec": 1.0,
        "type": "DEV",
        "mag_r": 19.0,
        "shape_r": 0.8,
        "split": "test",
        "score": 0.9,
        "valid": True,
        "invalid_reason": "",
        "stamp_kept": False,
    }
    lake.write_table(
        *SCORES, pa.Table.from_pylist([{**row, "model_version": "a" * 64}]), partition={"sweep_file": SWEEP}
    )
    lake.write_table(
        *SCORES,
        pa.Table.from_pylist(
            [
                {
                    **row,
                    "object_id": 2,
                    "ra": 151.0,
                    "sweep_file": "sweep-155p000-160p005.fits",
                    "model_version": "b" * 64,
                }
            ]
        ),
        partition={"sweep_file": "sweep-155p000-160p005.fits"},
    )
    instance = _instance([SWEEP, "sweep-155p000-160p005.fits"])
    with CutoutServer(size=101, lifetime_s=60) as server:
        resources = _resources(lake, tmp_path, server)
        result = run_assets([CANDS], resources, instance, raise_on_error=False)
    assert not result.success and not lake.exists(*CANDS)
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "mixes 2 model versions" in str(failure.event_specific_data.error.message)


def test_dhs_grade_lands_rounds_and_refuses_bad_files(tmp_path, monkeypatch, capsys):
    from dhs.main import main

    lake = Lake(str(tmp_path / "lake"))
    cand = pa.table(
        {
            "object_id": pa.array([7, 8], pa.int64()),
            "ra": [150.0, 150.1],
            "dec": [1.0, 1.0],
            "score": [0.9, 0.8],
            "model_version": ["v1", "v1"],
            "known": [False, True],
        }
    )
    lake.write_table(*CANDS, cand)
    monkeypatch.setenv("DHS_LAKE", lake.uri)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DHS_LOG_LEVEL", "ERROR")
    header = "object_id,grade,ra,dec,score,model_version,known\n"
    bad = tmp_path / "bad.csv"
    bad.write_text(header + "7,A,150.0,1.0,0.9,v1,false\n9,B,150.2,1.0,0.7,v1,false\n")
    assert main(["grade", str(bad)]) == 2
    assert "not candidates, e.g. [9]" in capsys.readouterr().err and not lake.exists(*GRADES)
    bad.write_text(header + "7,lens,150.0,1.0,0.9,v1,false\n")
    assert main(["grade", str(bad)]) == 2
    assert f"{bad}:2: grade 'lens'" in capsys.readouterr().err
    bad.write_text(header + "7,A,150.0,1.0,0.9,v0,false\n")
    assert main(["grade", str(bad)]) == 2
    assert "graded on model v0" in capsys.readouterr().err and not lake.exists(*GRADES)
    assert main(["grade", str(tmp_path / "missing.csv")]) == 2
    good = tmp_path / "good.csv"
    good.write_text(header + "7,A,150.0,1.0,0.9,v1,false\n8,not_a_lens,150.1,1.0,0.8,v1,true\n")
    assert main(["grade", str(good)]) == 0 and main(["grade", str(good)]) == 2  # the same bytes twice
    assert f"{good}: already landed as round 1 (the same bytes, sha256 " in capsys.readouterr().err
    assert main(["grade", str(good), "--again"]) == 0
    assert "as round 2 of visual_grades" in capsys.readouterr().out
    grades = lake.read_table(*GRADES)
    assert (
        grades.column("round").to_pylist() == [1, 1, 2, 2]
        and grades.column("grade").to_pylist() == ["A", "not_a_lens"] * 2
    )
