"""sweep_files and sweeps through dg.materialize on a DR10-layout mirror: ingest, checks, bad input."""

import dagster as dg
import pytest
from astropy.io import fits

from darkhaloscope.lake import PART_FILE, Lake
from darkhaloscope.survey import sweep_model as sm
from lens_assets.survey import sweep_files, sweeps, sweeps_contract, sweeps_inside_box, sweeps_row_count
from resources import LakeResource, SurveyResource
from resources.survey import SWEEP_DIR
from tests.support.sweep_rows import dr10_rows

NAME = "sweep-030m005-035p000.fits"


def _mirror(tmp_path, n_rows: int = 25):
    path = tmp_path / "mirror" / SWEEP_DIR / NAME
    path.parent.mkdir(parents=True)
    rows = dr10_rows(n_rows)
    cols = [fits.Column(name=n, format=t, array=rows[n]) for n, t in sm.DR10_SWEEP_COLUMNS if t != "L"]
    fits.HDUList([fits.PrimaryHDU(), fits.BinTableHDU.from_columns(cols)]).writeto(path)
    return path


def test_sweeps_ingested_with_checks_then_an_empty_file_fails_once_and_keeps_the_partition(tmp_path):
    path = _mirror(tmp_path)
    lake = Lake(str(tmp_path / "lake"))
    instance = dg.DagsterInstance.ephemeral()
    resources = {"survey": SurveyResource(survey=str(tmp_path / "mirror")), "lake": LakeResource(uri=lake.uri)}
    assert dg.materialize([sweep_files], instance=instance, resources=resources).success
    assert instance.get_dynamic_partitions("sweep_file") == [NAME]
    run = dg.materialize([sweeps, sweeps_contract, sweeps_row_count, sweeps_inside_box], instance=instance, resources=resources, partition_key=NAME)
    assert run.success
    assert {e.check_name: e.passed for e in run.get_asset_check_evaluations()} == {
        "sweeps_contract": True, "sweeps_row_count": True, "sweeps_inside_box": True}
    part = f"{lake.partition_path('survey', 'sweeps', {'sweep_file': NAME})}/{PART_FILE}"
    before = open(part, "rb").read()

    path.write_bytes(b"")  # the mirror's file is now empty
    bad = dg.materialize([sweeps], instance=instance, resources=resources, partition_key=NAME, raise_on_error=False)
    assert not bad.success
    failure = next(e for e in bad.all_events if e.event_type_value == "STEP_FAILURE")
    message = str(failure.event_specific_data.error.cause or failure.event_specific_data.error)
    assert NAME in failure.message or NAME in message
    assert "empty file" in (failure.message + message)
    assert not [e for e in bad.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]  # bad input is not retried
    assert open(part, "rb").read() == before


def _survey_defs(tmp_path, lake: Lake) -> dg.Definitions:
    from io_managers import ParquetIOManager
    from resources.alert_sinks import AlertSinksResource

    lake_resource = LakeResource(uri=lake.uri)
    return dg.Definitions(
        assets=[sweep_files, sweeps],
        asset_checks=[sweeps_contract, sweeps_row_count, sweeps_inside_box],
        resources={"survey": SurveyResource(survey=str(tmp_path / "mirror")), "lake": lake_resource,
                   "alert_sinks": AlertSinksResource(lake_uri=lake.uri), "io_manager": ParquetIOManager(lake=lake_resource)},
    )


def test_dhs_materialize_registers_partitions_on_a_fresh_instance_and_names_a_failure(tmp_path):
    """`dhs materialize sweeps`: upstream first with progress lines; a fresh DAGSTER_HOME on an
    existing lake registers the sweep partitions again; a bad file fails naming asset, partition, error."""
    import io

    from lens_assets.cli import MaterializeError, Materializer

    path = _mirror(tmp_path)
    lake = Lake(str(tmp_path / "lake"))
    defs = _survey_defs(tmp_path, lake)
    out = io.StringIO()
    Materializer(defs, dg.DagsterInstance.ephemeral(), out=out).run(["sweeps"])
    lines = out.getvalue().splitlines()
    assert lines[0] == "[1/2] sweep_files ..." and lines[-1].startswith(f"[2/2] sweeps [{NAME}] ok in ")
    assert lake.exists("survey", "sweeps", {"sweep_file": NAME}) and lake.exists("survey", "sweep_files")

    fresh = io.StringIO()
    Materializer(defs, dg.DagsterInstance.ephemeral(), out=fresh).run(["sweeps"])
    assert f"[2/2] sweeps [{NAME}] ok" in fresh.getvalue()  # not "up to date" with no partitions at all

    path.write_bytes(b"")
    with pytest.raises(MaterializeError, match=rf"asset sweeps partition {NAME} failed: .*InputError.*{NAME}.*empty file"):
        Materializer(defs, dg.DagsterInstance.ephemeral(), out=io.StringIO()).run(["sweeps"])
