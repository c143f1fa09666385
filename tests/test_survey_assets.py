"""sweep_files and sweeps through dg.materialize on a DR10-layout mirror: ingest, checks, bad input."""

import dagster as dg
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
