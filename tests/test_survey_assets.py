"""sweep_files and sweeps through Dagster on a DR10-layout mirror: ingest, audits in the asset's
step, write–audit–publish on a contract violation, bad input, and `dhs materialize`."""

import io

import dagster as dg
import numpy as np
import pyarrow as pa
import pytest

import lens_assets.survey as survey
from darkhaloscope.survey.manifest import survey_origin
from dhs.materialize import MaterializeError, Materializer
from io_managers import LakeIOManager
from lake_platform.lake import PART_FILE, Lake
from lake_platform.staging import rejected
from mock_survey.survey import MockSurvey
from resources import LakeResource, SurveyResource
from resources.alert_sinks import AlertSinksResource
from tests.support.sweep_rows import write_sweep
from tests.support.wap import events, published_files, run_alerts

NAME = "sweep-030m005-035p000.fits"


def _mirror(tmp_path, n_rows: int = 25):
    return write_sweep(tmp_path / "mirror", NAME, n_rows)


def _defs(tmp_path, lake: Lake) -> dg.Definitions:
    lake_resource = LakeResource(uri=lake.uri)
    return dg.Definitions(
        assets=[survey.sweep_files, survey.sweeps],
        resources={
            "survey": SurveyResource(survey=str(tmp_path / "mirror")),
            "lake": lake_resource,
            "alert_sinks": AlertSinksResource(lake_uri=lake.uri),
            "io_manager": LakeIOManager(uri=lake_resource.uri),
        },
    )


def test_sweeps_published_after_their_audits_pass_in_the_same_step(tmp_path):
    _mirror(tmp_path)
    lake = Lake(str(tmp_path / "lake"))
    out = io.StringIO()
    Materializer(_defs(tmp_path, lake), dg.DagsterInstance.ephemeral(), out=out).run(["sweeps"])
    lines = out.getvalue().splitlines()
    assert (
        lines[0] == "[1/2] sweep_files ..."
        and lines[-1].startswith(f"[2/2] sweeps [{NAME}] ok in ")
        and "rows=25" in lines[-1]
    )
    assert lake.read_table("survey", "sweeps", partition={"sweep_file": NAME}).num_rows == 25
    assert lake.tables() == [("survey", "sweep_files"), ("survey", "sweeps")]  # nothing staged is listed
    # the lake records which survey its catalogs come from: this mirror (a mock survey: its seed and profile)
    assert survey_origin(lake.dataset("survey", "sweep_files").schema) == {"survey": str(tmp_path / "mirror")}
    assert MockSurvey(seed=2, profile="demo").origin() == {"survey": "mock", "mock_seed": 2, "profile": "demo"}


def test_a_contract_violation_is_rejected_and_the_published_partition_stays_byte_for_byte(tmp_path, monkeypatch):
    """A reader bug that duplicates rows: the staged partition fails sweeps_contract (duplicate
    key) and sweeps_row_count; nothing is published, one alert, no retry, the data is kept."""
    _mirror(tmp_path)
    lake = Lake(str(tmp_path / "lake"))
    defs = _defs(tmp_path, lake)
    instance = dg.DagsterInstance.ephemeral()
    Materializer(defs, instance, out=io.StringIO()).run(["sweeps"])
    before = published_files(lake)

    real_ingest = survey.ingest_sweep

    def duplicating_ingest(path, out, sweep_file):
        info = real_ingest(path, out, sweep_file=sweep_file)
        part = {"sweep_file": sweep_file}
        table = out.read(part)
        out.write(pa.concat_tables([table, table.slice(0, 3)]), partition=part)
        return info

    monkeypatch.setattr(survey, "ingest_sweep", duplicating_ingest)
    with pytest.raises(
        MaterializeError,
        match=rf"asset sweeps partition {NAME} failed: .*BlockingAuditFailed.*sweeps_contract.*duplicate key",
    ):
        Materializer(defs, instance, out=io.StringIO()).run(["sweeps"])

    assert published_files(lake) == before
    run = instance.get_runs(limit=1)[0]
    evaluations = {e.check_name: e.passed for e in _evaluations(instance, run.run_id)}
    assert evaluations == {
        "sweeps_contract": False,
        "sweeps_row_count": False,
        "sweeps_inside_box": True,
        "sweeps_unique_across_partitions": True,
    }
    assert not [
        e
        for e in instance.all_logs(run.run_id)
        if e.dagster_event and e.dagster_event.event_type_value in ("ASSET_MATERIALIZATION", "STEP_UP_FOR_RETRY")
    ]
    alerts = run_alerts(lake, run.run_id)
    assert [(a["kind"], a["check"]) for a in alerts if a["severity"] == "ERROR"] == [
        ("check_failed", "sweeps_contract"),
        ("check_failed", "sweeps_row_count"),
    ]
    assert not [a for a in alerts if a["kind"] == "run_failed"]  # one incident, said by its checks
    [kept] = rejected(lake)
    assert (
        kept["table"] == "survey/sweeps" and kept["partition"] == {"sweep_file": NAME} and kept["owner"] == run.run_id
    )
    assert Lake(kept["uri"]).fs.get_file_info(f"{kept['uri']}/{PART_FILE}").size > 0


def _evaluations(instance, run_id):
    return [
        e.dagster_event.event_specific_data
        for e in instance.all_logs(run_id)
        if e.dagster_event and e.dagster_event.event_type_value == "ASSET_CHECK_EVALUATION"
    ]


def test_an_empty_file_fails_once_without_retry_naming_asset_partition_and_error(tmp_path):
    path = _mirror(tmp_path)
    lake = Lake(str(tmp_path / "lake"))
    defs = _defs(tmp_path, lake)
    instance = dg.DagsterInstance.ephemeral()
    Materializer(defs, instance, out=io.StringIO()).run(["sweeps"])
    before = published_files(lake)
    path.write_bytes(b"")
    with pytest.raises(
        MaterializeError, match=rf"asset sweeps partition {NAME} failed: .*InputError.*{NAME}.*empty file"
    ):
        Materializer(defs, instance, out=io.StringIO()).run(["sweeps"])
    run = instance.get_runs(limit=1)[0]
    assert not [
        e
        for e in instance.all_logs(run.run_id)
        if e.dagster_event and e.dagster_event.event_type_value == "STEP_UP_FOR_RETRY"
    ]
    assert published_files(lake) == before


def test_a_fresh_instance_registers_the_sweep_partitions_and_reruns_what_it_has_no_record_of(tmp_path):
    _mirror(tmp_path)
    lake = Lake(str(tmp_path / "lake"))
    defs = _defs(tmp_path, lake)
    Materializer(defs, dg.DagsterInstance.ephemeral(), out=io.StringIO()).run(["sweeps"])
    fresh = io.StringIO()
    instance = dg.DagsterInstance.ephemeral()
    Materializer(defs, instance, out=fresh).run(["sweeps"])
    assert instance.get_dynamic_partitions("sweep_file") == [NAME]
    assert "[1/2] sweep_files ok" in fresh.getvalue() and f"[2/2] sweeps [{NAME}] ok" in fresh.getvalue()
    again = io.StringIO()
    Materializer(defs, instance, out=again).run(["sweeps"])
    assert "[1/2] sweep_files: up to date, skipped" in again.getvalue()  # Dagster's record says so


def test_asset_events_are_recorded_with_content_data_versions(tmp_path):
    _mirror(tmp_path)
    lake = Lake(str(tmp_path / "lake"))
    defs = _defs(tmp_path, lake)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("sweep_file", [NAME])
    job = defs.resolve_implicit_global_asset_job_def()
    first = job.execute_in_process(instance=instance, asset_selection=[survey.sweeps.key], partition_key=NAME)
    second = job.execute_in_process(instance=instance, asset_selection=[survey.sweeps.key], partition_key=NAME)
    versions = [
        ev.materialization.tags["dagster/data_version"]
        for r in (first, second)
        for ev in r.get_asset_materialization_events()
    ]
    assert len(versions) == 2 and versions[0] == versions[1]  # same file, same bytes, same version
    assert events(first, "ASSET_CHECK_EVALUATION") and all(
        e.step_key == "survey__sweeps" for e in events(first, "ASSET_CHECK_EVALUATION")
    )


def test_photo_z_read_against_its_sweep_refused_when_not_row_matched_and_counted_when_missing(tmp_path):
    """The photo_z partition of a sweep: without its companion every row has a null redshift,
    counted; with a companion whose rows are out of order the step fails naming the file and the
    first mismatched row, and the published partition stays; with a matching one the redshifts are read."""
    from astropy.io import fits

    from darkhaloscope.survey.redshifts import DR10_PHOTO_Z_DIR, PZ_COLUMNS, pz_filename

    _mirror(tmp_path)
    lake = Lake(str(tmp_path / "lake"))
    defs = dg.Definitions(
        assets=[survey.sweep_files, survey.sweeps, survey.photo_z, survey.spectra],
        resources=_defs(tmp_path, lake).resources,
    )
    instance = dg.DagsterInstance.ephemeral()
    out = io.StringIO()
    Materializer(defs, instance, out=out).run(["photo_z", "spectra"])
    pz = lake.read_table("survey", "photo_z", partition={"sweep_file": NAME})
    assert pz.num_rows == 25 and pz.column("z_phot_median").null_count == 25
    assert lake.read_table("survey", "spectra").num_rows == 0
    mat = instance.get_latest_materialization_event(dg.AssetKey(["survey", "photo_z"])).asset_materialization
    assert mat.metadata["companion_missing"].value is True and mat.metadata["n_without_photo_z"].value == 25

    keys = lake.read_table("survey", "sweeps", partition={"sweep_file": NAME}, columns=["release", "brickid", "objid"])
    order = [1, 0, *range(2, 25)]
    cols = [fits.Column(k.upper(), f, array=keys.column(k).to_numpy()[order]) for k, f in zip(keys.column_names, "IJJ")]
    cols += [fits.Column("Z_SPEC", "E", array=np.full(25, -99.0))]
    cols += [fits.Column(c, "E", array=np.full(25, 0.4)) for c in PZ_COLUMNS]
    path = tmp_path / "mirror" / DR10_PHOTO_Z_DIR / pz_filename(NAME)
    path.parent.mkdir(parents=True)
    fits.HDUList([fits.PrimaryHDU(), fits.BinTableHDU.from_columns(cols)]).writeto(path)
    with pytest.raises(MaterializeError, match=r"-pz\.fits: row 0 has .*first mismatched row 0"):
        Materializer(defs, instance, out=io.StringIO()).run(["photo_z"])
    assert lake.read_table("survey", "photo_z", partition={"sweep_file": NAME}).column("z_phot_median").null_count == 25

    cols = [fits.Column(k.upper(), f, array=keys.column(k).to_numpy()) for k, f in zip(keys.column_names, "IJJ")]
    cols += [fits.Column("Z_SPEC", "E", array=np.full(25, -99.0))]
    cols += [fits.Column(c, "E", array=np.full(25, 0.4)) for c in PZ_COLUMNS]
    fits.HDUList([fits.PrimaryHDU(), fits.BinTableHDU.from_columns(cols)]).writeto(path, overwrite=True)
    Materializer(defs, instance, out=io.StringIO()).run(["photo_z"])
    pz = lake.read_table("survey", "photo_z", partition={"sweep_file": NAME})
    assert pz.column("z_phot_median").null_count == 0 and pz.column("z_spec").null_count == 25
