"""Survey stage: the sweep-file manifest, sweep ingestion (one partition per file), known lenses."""


import dagster as dg
import duckdb
import pyarrow as pa
from astropy.io import fits

from darkhaloscope.contracts import KNOWN_LENSES, SWEEPS
from darkhaloscope.survey.known_lenses import load_known_lenses
from darkhaloscope.survey.sweeps import (
    check_one_file_per_box, ingest_sweep, objects_in_other_sweeps, parse_sweep_filename, remove_vanished_sweeps,
)
from resources import LakeResource, SurveyResource

from .common import OWNERS, contract_result, fail_fast_on_bad_input, table_result
from .partitions import sweep_partitions, sync_dynamic_partitions

GROUP = "survey"


@dg.asset(
    key_prefix=[GROUP],
    group_name=GROUP,
    kinds={"parquet"},
    owners=OWNERS,
    code_version="1",
)
def sweep_files(context: dg.AssetExecutionContext, survey: SurveyResource, lake: LakeResource) -> pa.Table:
    """Manifest of the survey's sweep files (name, sky box in degrees, size in bytes); registers one
    dynamic partition of ``sweeps`` per file; for files that disappeared, removes their Dagster
    partitions and their lake partitions (of every table partitioned by sweep file)."""
    from resources.survey import SWEEP_DIR

    with fail_fast_on_bad_input():
        names = survey.sweep_files()
        fs, root = survey.filesystem()
        infos = fs.get_file_info([f"{root}/{SWEEP_DIR}/{n}" for n in names])
        boxes = check_one_file_per_box(names)
        removed = remove_vanished_sweeps(lake.lake(), names)
    new = sync_dynamic_partitions(context.instance, sweep_partitions, names)
    for r in removed:
        context.log.warning(f"removed {r['table']} partition {r['partition']}: its sweep file is no longer in the survey")
    context.add_output_metadata({"removed_partitions": dg.MetadataValue.json(removed), "n_removed_partitions": len(removed)})
    context.log.info(f"{len(names)} sweep files ({len(new)} new partitions) in {survey.survey} survey")
    return pa.table(
        {
            "sweep_file": names,
            "ra_min": [b.ra_min for b in boxes],
            "ra_max": [b.ra_max for b in boxes],
            "dec_min": [b.dec_min for b in boxes],
            "dec_max": [b.dec_max for b in boxes],
            "size_bytes": [i.size for i in infos],
        }
    )


@dg.asset(
    key_prefix=[GROUP],
    group_name=GROUP,
    partitions_def=sweep_partitions,
    deps=[sweep_files],
    kinds={"parquet"},
    owners=OWNERS,
    code_version="1",
)
def sweeps(context: dg.AssetExecutionContext, survey: SurveyResource, lake: LakeResource) -> dg.MaterializeResult:
    """One sweep file read into Arrow (lower-case DR10 columns, HEALPix indices, provenance) and
    committed as one Parquet partition, streamed in record batches."""
    name = context.partition_key
    store = lake.lake()
    with fail_fast_on_bad_input(), survey.local_sweep(name) as path:
        info = ingest_sweep(path, store, sweep_file=name)
        # read only once the library's reader has accepted the file (a bad one raised InputError)
        n_fits = int(fits.getheader(path, 1)["NAXIS2"])
    return table_result(
        store,
        info["uri"],
        store.read_schema(GROUP, "sweeps", partition={"sweep_file": name}),
        info["rows"],
        {"fits_rows": n_fits, "data_model": info["data_model"], "dagster/partition_row_count": dg.MetadataValue.int(info["rows"])},
    )


@dg.asset_check(asset=sweeps, blocking=True, partitions_def=sweep_partitions, description="schema, types, key uniqueness and coordinate ranges match the sweeps contract")
def sweeps_contract(context: dg.AssetCheckExecutionContext, lake: LakeResource) -> dg.AssetCheckResult:
    return contract_result(lake.lake(), GROUP, "sweeps", SWEEPS, partition={"sweep_file": context.partition_key})


@dg.asset_check(asset=sweeps, blocking=True, partitions_def=sweep_partitions, description="row count equals the FITS row count")
def sweeps_row_count(context: dg.AssetCheckExecutionContext, lake: LakeResource, survey: SurveyResource) -> dg.AssetCheckResult:
    name = context.partition_key
    with survey.local_sweep(name) as path:
        n_fits = int(fits.getheader(path, 1)["NAXIS2"])
    n_lake = lake.lake().read_table(GROUP, "sweeps", partition={"sweep_file": name}, columns=["row_index"]).num_rows
    return dg.AssetCheckResult(passed=n_fits == n_lake, metadata={"fits_rows": n_fits, "lake_rows": n_lake})


@dg.asset_check(asset=sweeps, blocking=True, partitions_def=sweep_partitions, description="every row lies inside the sky box in its file name")
def sweeps_inside_box(context: dg.AssetCheckExecutionContext, lake: LakeResource) -> dg.AssetCheckResult:
    name = context.partition_key
    box = parse_sweep_filename(name)
    tbl = lake.lake().read_table(GROUP, "sweeps", partition={"sweep_file": name}, columns=["ra", "dec"])
    con = duckdb.connect()
    con.register("tbl", tbl)
    n_out = con.execute(
        f"SELECT count(*) FROM tbl WHERE NOT (ra >= {box.ra_min} AND ra < {box.ra_max} AND dec >= {box.dec_min} AND dec < {box.dec_max})"
    ).fetchone()[0]
    con.close()
    return dg.AssetCheckResult(
        passed=n_out == 0,
        metadata={"rows_outside_box": n_out, "box": dg.MetadataValue.json(vars(box) if hasattr(box, "__dict__") else list(box))},
    )


@dg.asset_check(asset=sweeps, blocking=True, partitions_def=sweep_partitions, description="no object of this sweep file is also in another sweep file's partition")
def sweeps_unique_across_partitions(context: dg.AssetCheckExecutionContext, lake: LakeResource) -> dg.AssetCheckResult:
    audit = objects_in_other_sweeps(lake.lake(), context.partition_key)
    return dg.AssetCheckResult(
        passed=audit["duplicates"] == 0,
        metadata={"duplicates": audit["duplicates"], "with": dg.MetadataValue.json(audit["with"]),
                  "examples": dg.MetadataValue.json(audit["examples"]), "compared_with": dg.MetadataValue.json(audit["compared_with"])},
        description=None if audit["duplicates"] == 0 else f"{audit['duplicates']} object(s) also in {sorted(audit['with'])}",
    )


@dg.asset(key_prefix=[GROUP], group_name=GROUP, kinds={"parquet"}, owners=OWNERS, code_version="1")
def known_lenses(context: dg.AssetExecutionContext) -> pa.Table:
    """The lenscat catalog of known strong lenses, normalised: name, ra, dec (deg), z_lens (null when
    unknown), grade (confident/probable), kind (galaxy/group/cluster), reference."""
    tbl = load_known_lenses()
    context.add_output_metadata({"by_kind": dg.MetadataValue.json(_counts(tbl, "kind")), "by_grade": dg.MetadataValue.json(_counts(tbl, "grade"))})
    return tbl


def _counts(tbl: pa.Table, col: str) -> dict:
    vc = tbl.column(col).value_counts().to_pylist()
    return {str(d["values"]): int(d["counts"]) for d in vc}


@dg.asset_check(asset=known_lenses, blocking=True, description="schema, unique names and valid coordinates")
def known_lenses_contract(lake: LakeResource) -> dg.AssetCheckResult:
    return contract_result(lake.lake(), GROUP, "known_lenses", KNOWN_LENSES)


survey_defs = dg.Definitions(
    assets=[sweep_files, sweeps, known_lenses],
    asset_checks=[sweeps_contract, sweeps_row_count, sweeps_inside_box, sweeps_unique_across_partitions, known_lenses_contract],
)
