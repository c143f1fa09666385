"""injection_plan and the injections (the bank and its scores, rendered and scored in one pass)
through Dagster: the bank's audits pass on real renders, the bank stores no stamp and a stamp
rendered again is the one scored; a batch failing the stamp-flux audit is rejected and the
published batch stays byte for byte."""

import dagster as dg
import numpy as np
import pyarrow as pa
import pytest

import darkhaloscope.lensing.verify as verify
import lens_assets.injection as injection
from darkhaloscope.evaluation.injection_scoring import injection_images
from darkhaloscope.lensing.bank import plan_grid
from darkhaloscope.stamps import to_tensor_array
from io_managers import LakeIOManager
from lake_platform.lake import Lake
from lake_platform.staging import rejected
from lens_assets.ops import deliver_run_alerts
from resources import ComputeResource, LakeResource
from resources.alert_sinks import AlertSinksResource
from tests.support.tiny_finder import publish_tiny_finder
from tests.support.wap import events, published_files, run_alerts, run_assets

SWEEP = "sweep-030m005-035p000.fits"
#: The two tables the injections asset publishes in one step.
INJECTIONS = list(injection.injections.keys)
PLAN = {
    "theta_e_grid": [1.0, 1.5, 0.5],
    "z_l_grid": [0.3, 0.5, 0.2],
    "per_cell": 3,
    "batch_size": 6,
    "min_hosts_per_cell": 1,
}


def _redshift_tables(lake: Lake, n: int) -> None:
    """The hosts' sweep rows, photo-zs (hosts 1, 2 at z 0.3, 3, 4 at 0.31, the rest at 0.5) and
    40 early-type spectra drawn from a luminosity–σ relation (plus host 1's: VDISP measured)."""
    ids = np.arange(1, n + 1)
    z = np.where(ids <= 4, 0.3 + 0.01 * (ids > 2), 0.5)
    f32 = pa.float32()
    lake.write_table(
        "survey",
        "sweeps",
        pa.table(
            {
                "object_id": pa.array(ids, pa.int64()),
                "flux_r": pa.array(np.full(n, 10.0), f32),
                "flux_z": pa.array(np.full(n, 25.0), f32),
                "mw_transmission_r": pa.array(np.ones(n), f32),
                "mw_transmission_z": pa.array(np.ones(n), f32),
                "shape_e1": pa.array(np.full(n, 0.1), f32),
                "shape_e2": pa.array(np.zeros(n), f32),
            }
        ),
        partition={"sweep_file": SWEEP},
    )
    pz = {c: pa.array(np.where(c == "z_phot_median", z, 0.02), f32) for c in ("z_phot_median", "z_phot_std")}
    lake.write_table(
        "survey", "photo_z", pa.table({"object_id": pa.array(ids, pa.int64()), **pz}), partition={"sweep_file": SWEEP}
    )
    rng = np.random.default_rng(5)
    m = 40
    zs = rng.uniform(0.1, 0.6, m)
    mag_r = rng.uniform(16.5, 19.5, m)
    from darkhaloscope.lensing.cosmology import distance_modulus

    log_sig = -0.08 * (mag_r - distance_modulus(zs) + 21.0) + 2.2 + rng.normal(0, 0.06, m)
    spec_ids = np.r_[1, np.arange(1000, 1000 + m)]
    lake.write_table(
        "survey",
        "spectra",
        pa.table(
            {
                "object_id": pa.array(spec_ids, pa.int64()),
                "type": ["DEV"] * (m + 1),
                "flux_r": np.r_[10.0, 10 ** (-0.4 * (mag_r - 22.5))],
                "flux_z": np.r_[25.0, np.full(m, 20.0)],
                "mw_transmission_r": np.ones(m + 1),
                "mw_transmission_z": np.ones(m + 1),
                "z": np.r_[0.3, zs],
                "zwarning": pa.array(np.zeros(m + 1), pa.int32()),
                "class": ["GALAXY"] * (m + 1),
                "vdisp": np.r_[230.0, 10**log_sig],
                "vdisp_err": np.r_[15.0, np.full(m, 12.0)],
            }
        ),
    )


def _hosts(lake: Lake, n: int = 8) -> None:
    rng = np.random.default_rng(11)
    lake.write_table(
        "imaging",
        "cutouts",
        pa.table(
            {
                "object_id": pa.array(np.arange(1, n + 1), pa.int64()),
                "ra": np.linspace(31, 32, n),
                "dec": np.full(n, -2.0),
                "split": ["test", "train"] * (n // 2),
                "type": ["DEV", "SER"] * (n // 2),
                **{f"psfsize_{b}": pa.array(np.full(n, s), pa.float32()) for b, s in zip("grz", (1.4, 1.25, 1.1))},
                **{f"psfdepth_{b}": pa.array(np.full(n, d), pa.float32()) for b, d in zip("grz", (2e3, 1e3, 2e2))},
                "dx_pix": pa.array(rng.uniform(-0.5, 0.5, n), pa.float32()),
                "dy_pix": pa.array(rng.uniform(-0.5, 0.5, n), pa.float32()),
                "label": pa.array(np.zeros(n), pa.int8()),
                "quality_ok": [True] * n,
                "image": to_tensor_array(rng.normal(0, 0.01, (n, 3, 101, 101)).astype(np.float32)),
                "invvar": to_tensor_array(np.full((n, 3, 101, 101), 1e4, np.float32)),
            }
        ),
        partition={"sweep_file": SWEEP},
    )
    _redshift_tables(lake, n)


def _plan(tmp_path):
    """A lake with host cutouts, its instance and resources, and a function that materializes the
    injection plan and returns its hosts' ids."""
    lake = Lake(str(tmp_path / "lake"))
    _hosts(lake)
    publish_tiny_finder(lake)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("sweep_file", [SWEEP])
    resource = LakeResource(uri=lake.uri)
    resources = {
        "lake": resource,
        "io_manager": LakeIOManager(uri=resource.uri),
        "compute": ComputeResource(device="cpu", profile="demo"),
    }

    def plan_hosts() -> set[int]:
        run_assets(
            [injection.injection_plan.key],
            resources,
            instance,
            run_config={"ops": {"injection__injection_plan": {"config": PLAN}}},
        )
        return set(lake.read_table("injection", "injection_plan").column("host_object_id").to_pylist())

    return lake, instance, resources, plan_hosts


@pytest.fixture
def planned(tmp_path):
    """A lake with host cutouts and a published injection plan; its batches registered."""
    from lens_assets.shared.partitions import injection_batch_change

    lake, instance, resources, plan_hosts = _plan(tmp_path)
    plan_hosts()
    injection_batch_change(instance, lake).apply(instance)
    return lake, instance, resources


def test_plan_records_its_grid_and_bank_audits_pass_on_real_renders(planned):
    lake, instance, resources = planned
    tasks = lake.read_table("injection", "injection_plan")
    assert set(tasks.column("host_split").to_pylist()) == {"test"}  # selection-function hosts are unseen
    assert plan_grid(tasks) == ([1.0, 1.5], [0.3, 0.5])
    key = instance.get_dynamic_partitions("injection_batch")[0]
    bank = run_assets(INJECTIONS, resources, instance, partition_key=key)
    assert {e.check_name: e.passed for e in bank.get_asset_check_evaluations()} == {
        "injection_matches_lenstronomy": True,
        "injection_physics_valid": True,
        "injection_hosts_in_bin": True,
        "injection_scores_contract": True,
    }
    assert lake.exists("injection", "injection_bank", {"injection_batch": key})
    bank_table = lake.read_table("injection", "injection_bank", {"injection_batch": key})
    assert not {"image", "control"} & set(bank_table.column_names)  # no stamp stored
    scores = lake.read_table("evaluation", "injection_scores", {"injection_batch": key})
    assert sorted(scores.column("kind").value_counts().field(1).to_pylist()) == [bank_table.num_rows] * 2
    # the hosts lie in their bins, at their own redshift, host 1 with its measured VDISP
    rows = bank_table.to_pydict()
    for oid, z, zbin, src in zip(rows["host_object_id"], rows["host_z"], rows["z_l_bin"], rows["sigma_v_source"]):
        assert zbin == (0.3 if oid <= 4 else 0.5) and abs(z - zbin) <= 0.011
        assert src == ("measured" if oid == 1 else "relation")


def test_a_stamp_rendered_again_is_the_one_the_pass_scored(planned):
    """The bank stores no stamp: a reader (the realism probe, the report) renders it again from its
    plan row and host cutout, and the lens finder scores that stamp as the fused pass scored it."""
    from darkhaloscope.errors import InputError
    from darkhaloscope.evaluation.scoring import published_lens_finder
    from darkhaloscope.training.inference import score_with_members

    lake, instance, resources = planned
    key = instance.get_dynamic_partitions("injection_batch")[0]
    run_assets(INJECTIONS, resources, instance, partition_key=key)
    plan, cutouts = lake.read_table("injection", "injection_plan"), lake.table("imaging", "cutouts").dataset()
    scores = lake.read_table("evaluation", "injection_scores", {"injection_batch": key}).to_pydict()
    scored = {
        i: sc
        for i, k, sc, ok in zip(scores["injection_id"], scores["kind"], scores["score"], scores["valid"])
        if k == "injection" and ok
    }
    ids = sorted(scored)[:4]
    stamps = injection_images(plan, cutouts, ids)
    with published_lens_finder(lake.table("training", "lens_finder"), "cpu") as (model, spec):
        again = score_with_members(model, spec, np.stack([stamps[i] for i in ids]), device="cpu")[0]
    assert again == pytest.approx([scored[i] for i in ids], abs=1e-6)
    with pytest.raises(InputError, match=r"injection ids \[-1\] are not in injection_plan"):
        injection_images(plan, cutouts, [-1])


def test_a_bank_with_a_host_outside_its_bin_is_refused(planned):
    """A plan whose host lies outside its cell's z_l bin (tampered here) is refused by the bank's
    blocking check, naming the injections; nothing is published."""
    lake, instance, resources = planned
    tasks = lake.read_table("injection", "injection_plan")
    meta = tasks.schema.metadata
    moved = pa.array(np.where(np.array(tasks.column("z_l_bin").to_pylist()) == 0.3, 0.5, 0.3))
    tampered = tasks.set_column(tasks.schema.get_field_index("z_l_bin"), "z_l_bin", moved)
    lake.write_table("injection", "injection_plan", tampered.replace_schema_metadata(meta))
    key = instance.get_dynamic_partitions("injection_batch")[0]
    run = run_assets(INJECTIONS, resources, instance, partition_key=key, raise_on_error=False)
    assert not run.success
    failed = {e.check_name: e for e in run.get_asset_check_evaluations() if not e.passed}
    assert set(failed) == {"injection_hosts_in_bin"}
    assert "outside its z_l bin" in failed["injection_hosts_in_bin"].description
    assert not lake.exists("injection", "injection_bank", {"injection_batch": key})


def test_hosts_graded_a_lens_are_not_injection_hosts(tmp_path):
    """After an inspection round grades a host a lens, the plan leaves it out: its control would be a lens."""
    from darkhaloscope.search.grades import new_round, parse_grades_csv
    from table_registry import VISUAL_GRADES

    lake, instance, resources, plan_hosts = _plan(tmp_path)
    assert plan_hosts() == {1, 3, 5, 7}  # the test-split hosts
    header = b"object_id,grade,ra,dec,score,model_version,known\n"
    csv = header + b"3,A,31.3,-2.0,0.99,v1,false\n5,not_a_lens,31.6,-2.0,0.9,v1,false\n"
    first = new_round(None, parse_grades_csv(csv, "round1.csv"), "round1.csv", csv)
    lake.write_table(*VISUAL_GRADES.key, first)
    assert plan_hosts() == {1, 5, 7}

    # every test-split host graded a lens: the plan fails, naming the split it found no host in, and
    # the published plan stays
    csv = header + b"1,B,31.0,-2.0,0.9,v1,false\n5,A,31.6,-2.0,0.9,v1,false\n7,A,31.9,-2.0,0.9,v1,false\n"
    lake.write_table(*VISUAL_GRADES.key, new_round(first, parse_grades_csv(csv, "round2.csv"), "round2.csv", csv))
    failed = run_assets(
        [injection.injection_plan.key],
        resources,
        instance,
        raise_on_error=False,
        run_config={"ops": {"injection__injection_plan": {"config": PLAN}}},
    )
    assert not failed.success
    [event] = failed.get_step_failure_events()
    assert "no host has split in ('test',)" in event.step_failure_data.error.message
    assert set(lake.read_table("injection", "injection_plan").column("host_object_id").to_pylist()) == {1, 5, 7}


def test_a_batch_failing_the_flux_audit_is_rejected_once_and_the_published_batch_is_kept(planned, monkeypatch):
    lake, instance, resources = planned
    key = instance.get_dynamic_partitions("injection_batch")[0]
    run_assets(INJECTIONS, resources, instance, partition_key=key)
    before = published_files(lake)

    monkeypatch.setattr(verify, "FLUX_TOL_MAX", 1e-9)  # no render meets this: the audit must block publication
    strict = run_assets(INJECTIONS, resources, instance, partition_key=key, raise_on_error=False)
    assert not strict.success
    failed = {e.check_name: e for e in strict.get_asset_check_evaluations() if not e.passed}
    assert set(failed) == {"injection_physics_valid"}
    assert "stamp arc flux vs source flux × μ" in failed["injection_physics_valid"].description
    assert not events(strict, "ASSET_MATERIALIZATION") and not events(strict, "STEP_UP_FOR_RETRY")
    assert published_files(lake) == before

    sinks = AlertSinksResource(lake_uri=lake.uri).build_sinks()
    assert len(deliver_run_alerts(instance, strict.run_id, sinks)) == 1
    assert deliver_run_alerts(instance, strict.run_id, sinks) == []  # delivered once, never again
    [alert] = run_alerts(lake, strict.run_id)
    assert (alert["kind"], alert["check"], alert["severity"]) == ("check_failed", "injection_physics_valid", "ERROR")
    # the step's two tables, the bank and its scores, are kept together, rejected for the bank's check
    kept = rejected(lake)
    assert sorted(k["table"] for k in kept) == ["evaluation/injection_scores", "injection/injection_bank"]
    for k in kept:
        assert k["partition"] == {"injection_batch": key}
        assert k["failed_checks"][0]["check"] == "injection_physics_valid"


def test_another_realisation_is_planned_from_the_launchpad_and_a_bad_one_keeps_the_plan(tmp_path):
    """``realisation`` in the run config draws the plan again (recorded in its metadata); a negative
    one fails the step, naming the config, and the published plan stays."""
    lake, instance, resources, plan_hosts = _plan(tmp_path)
    plan_hosts()
    first = lake.read_table("injection", "injection_plan")
    run = run_assets(
        [injection.injection_plan.key],
        resources,
        instance,
        run_config={"ops": {"injection__injection_plan": {"config": {**PLAN, "realisation": 2}}}},
    )
    [mat] = [e.materialization for e in run.get_asset_materialization_events()]
    assert mat.metadata["realisation"].value == 2 and mat.metadata["seed_salt"].value.endswith("/realisation-2")
    again = lake.read_table("injection", "injection_plan")
    assert plan_grid(again) == plan_grid(first)
    assert not set(again.column("seed").to_pylist()) & set(first.column("seed").to_pylist())
    failed = run_assets(
        [injection.injection_plan.key],
        resources,
        instance,
        raise_on_error=False,
        run_config={"ops": {"injection__injection_plan": {"config": {**PLAN, "realisation": -1}}}},
    )
    assert not failed.success
    [event] = failed.get_step_failure_events()
    assert "injection realisation must be an integer >= 0, got -1" in event.step_failure_data.error.message
    assert lake.read_table("injection", "injection_plan").equals(again)
