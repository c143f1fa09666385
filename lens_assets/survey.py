"""Survey stage: the sweep-file manifest, sweep ingestion (one partition per file), known lenses.

Every table is staged in the run's staging area, audited there and published by the lake IO
manager (``common.gate``). ``sweeps`` streams each sweep file into its staged partition (a sweep
file holds millions of rows at survey scale) rather than holding it in memory.
"""

import dagster as dg
import pyarrow as pa
from astropy.io import fits

from darkhaloscope import audits as au
from darkhaloscope.contracts import KNOWN_LENSES, SWEEP_FILES, SWEEPS
from darkhaloscope.survey.known_lenses import load_known_lenses
from darkhaloscope.survey.manifest import sweep_manifest
from darkhaloscope.survey.sweeps import SWEEP_DIM, check_one_file_per_box, ingest_sweep, objects_in_other_sweeps, parse_sweep_filename, remove_vanished_sweeps
from resources import LakeResource, SurveyResource

from .common import OWNERS, as_metadata, check_specs, fail_fast_on_bad_input, gate
from .partitions import sweep_partitions

GROUP = "survey"
SWEEP_FILES_AUDITS = (au.SWEEP_FILES_CONTRACT,)
SWEEPS_AUDITS = (au.SWEEPS_CONTRACT, au.SWEEPS_ROW_COUNT, au.SWEEPS_INSIDE_BOX, au.SWEEPS_UNIQUE_ACROSS_PARTITIONS)
KNOWN_LENSES_AUDITS = (au.KNOWN_LENSES_CONTRACT,)


@dg.asset(key=[GROUP, "sweep_files"], group_name=GROUP, kinds={"parquet"}, owners=OWNERS, code_version="3",
          check_specs=check_specs([GROUP, "sweep_files"], SWEEP_FILES_AUDITS))
def sweep_files(context: dg.AssetExecutionContext, survey: SurveyResource, lake: LakeResource):
    """Manifest of the survey's sweep files (name, sky box in degrees, size in bytes), recording in
    its schema and metadata which survey they come from (the mock realisation's seed and profile,
    or the mirror's root); two files for overlapping sky boxes are refused. The partitions of
    files that left the survey are removed from every table partitioned by sweep file (logged and
    in the metadata); the ``sweep_file`` partitions themselves are kept in step by
    ``sweep_file_sensor`` (and by ``dhs``)."""
    from resources.survey import SWEEP_DIR

    with fail_fast_on_bad_input():
        names = survey.sweep_files()
        check_one_file_per_box(names)
        fs, root = survey.filesystem()
        sizes = [i.size for i in fs.get_file_info([f"{root}/{SWEEP_DIR}/{n}" for n in names])]
        origin = survey.location().origin()
        table = sweep_manifest(names, sizes, origin)
    staged = lake.stage(context).table(GROUP, "sweep_files")
    staged.write(table)
    outcomes = [au.contract_audit(au.SWEEP_FILES_CONTRACT, staged.read(), SWEEP_FILES)]
    with fail_fast_on_bad_input():
        removed = remove_vanished_sweeps(lake.lake(), names) if not au.blocking_failures(outcomes) else []
    for r in removed:
        context.log.warning(f"removed {r['table']} partition {r['partition']}: its sweep file is no longer in the survey")
    md = as_metadata({"removed_partitions": removed, "n_removed_partitions": len(removed), "survey_origin": origin})
    yield from gate(context, {(GROUP, "sweep_files"): ([staged], outcomes)}, {(GROUP, "sweep_files"): md})


@dg.asset(key=[GROUP, "sweeps"], group_name=GROUP, partitions_def=sweep_partitions, deps=[sweep_files], kinds={"parquet"},
          owners=OWNERS, code_version="2", check_specs=check_specs([GROUP, "sweeps"], SWEEPS_AUDITS))
def sweeps(context: dg.AssetExecutionContext, survey: SurveyResource, lake: LakeResource):
    """One sweep file read into Arrow (lower-case DR10 columns, HEALPix indices, provenance),
    streamed in record batches into its staged partition, audited (contract, row count against
    the FITS header, rows inside the file's sky box, no object also in another published
    partition) and published."""
    name = context.partition_key
    staged = lake.stage(context).table(GROUP, "sweeps", {SWEEP_DIM: name})
    with fail_fast_on_bad_input(), survey.local_sweep(name) as path:
        info = ingest_sweep(path, staged.area, sweep_file=name)
        # read only once the library's reader has accepted the file (a bad one raised InputError)
        n_fits = int(fits.getheader(path, 1)["NAXIS2"])
        box = parse_sweep_filename(name)
    outcomes = [
        au.contract_audit(au.SWEEPS_CONTRACT, staged.dataset(), SWEEPS),
        au.equal_counts_audit(au.SWEEPS_ROW_COUNT, n_fits, staged.num_rows(), name),
        au.inside_box_audit(au.SWEEPS_INSIDE_BOX, staged.read(columns=["ra", "dec"]), box.ra_min, box.ra_max, box.dec_min, box.dec_max),
        _unique_across_partitions(lake.lake(), name, staged.read(columns=["object_id"]).column("object_id").to_numpy()),
    ]
    md = {(GROUP, "sweeps"): {"fits_rows": n_fits, "data_model": info["data_model"]}}
    yield from gate(context, {(GROUP, "sweeps"): ([staged], outcomes)}, md)


def _unique_across_partitions(store, name: str, object_ids) -> au.AuditOutcome:
    found = objects_in_other_sweeps(store, name, object_ids=object_ids)
    return au.count_audit(au.SWEEPS_UNIQUE_ACROSS_PARTITIONS, found["duplicates"], f"object(s) of {name} also in {sorted(found['with'])}", found)


@dg.asset(key=[GROUP, "known_lenses"], group_name=GROUP, kinds={"parquet"}, owners=OWNERS, code_version="2",
          check_specs=check_specs([GROUP, "known_lenses"], KNOWN_LENSES_AUDITS))
def known_lenses(context: dg.AssetExecutionContext, lake: LakeResource):
    """The lenscat catalog of known strong lenses, normalised: name, ra, dec (deg), z_lens (null when
    unknown), grade (confident/probable), kind (galaxy/group/cluster), reference."""
    with fail_fast_on_bad_input():
        table = load_known_lenses()
    staged = lake.stage(context).table(GROUP, "known_lenses")
    staged.write(table)
    outcomes = [au.contract_audit(au.KNOWN_LENSES_CONTRACT, staged.read(), KNOWN_LENSES)]
    md = {(GROUP, "known_lenses"): as_metadata({"by_kind": _counts(table, "kind"), "by_grade": _counts(table, "grade")})}
    yield from gate(context, {(GROUP, "known_lenses"): ([staged], outcomes)}, md)


def _counts(tbl: pa.Table, col: str) -> dict:
    return {str(d["values"]): int(d["counts"]) for d in tbl.column(col).value_counts().to_pylist()}


survey_defs = dg.Definitions(assets=[sweep_files, sweeps, known_lenses])
