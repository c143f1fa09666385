"""Survey stage: the sweep-file manifest, sweep ingestion (one partition per file), known lenses,
and the sensor that registers one ``sweep_file`` partition per sweep file.

``sweeps`` streams each sweep file into its staged partition (a sweep file holds millions of rows
at survey scale) rather than holding it in memory.
"""

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
from astropy.io import fits

from darkhaloscope.survey.inputs import SPECTRA_PATHS, brick_paths, companion_paths, sweep_bricks
from darkhaloscope.survey.known_lenses import load_known_lenses
from darkhaloscope.survey.manifest import sweep_manifest
from darkhaloscope.survey.redshifts import (
    DR10_PHOTO_Z_DIR,
    DR10_SPECOBJ_SDSS,
    DR10_SPECOBJ_SURVEY,
    empty_spectra,
    photo_z_missing,
    pz_filename,
    read_photo_z,
    read_spectra,
)
from darkhaloscope.survey.sweeps import (
    SWEEP_DIM,
    check_one_file_per_box,
    ingest_sweep,
    objects_in_other_sweeps,
    parse_sweep_filename,
)
from lake_platform import audits as au
from resources import LakeResource, SurveyResource
from resources.survey import SWEEP_DIR
from table_registry import KNOWN_LENSES, PHOTO_Z, SPECTRA, SWEEP_FILES, SWEEPS
from table_registry import survey as checks

from .shared.automation import NEW_PARTITION, survey_flow_sensor
from .shared.partitions import per_file_backfill, sweep_file_change
from .shared.publish import Publish, lake_asset, per_partition, staged_table


@lake_asset(SWEEP_FILES, code_version="3", kinds={"parquet"})
def sweep_files(context: dg.AssetExecutionContext, survey: SurveyResource, lake: LakeResource) -> Publish:
    """Manifest of the survey's sweep files (name, sky box in degrees, size in bytes), recording in
    its schema and metadata which survey they come from (the mock realisation's seed and profile,
    or the mirror's root); two files for overlapping sky boxes are refused. The partitions of
    files that left the survey are removed from every table partitioned by sweep file (logged and
    in the metadata); the ``sweep_file`` partitions themselves are kept in step by
    ``sweep_file_sensor`` (and by ``dhs``)."""
    names = survey.sweep_files()
    check_one_file_per_box(names)
    fs, root = survey.filesystem()
    sizes = [i.size for i in fs.get_file_info([f"{root}/{SWEEP_DIR}/{n}" for n in names])]
    origin = survey.origin()
    removed = lake.lake().remove_partitions(SWEEP_DIM, names, probe=SWEEPS.key)
    for r in removed:
        context.log.warning(
            f"removed {r['table']} partition {r['partition']}: its sweep file is no longer in the survey"
        )
    md = {"removed_partitions": removed, "n_removed_partitions": len(removed), "survey_origin": origin}
    return Publish({SWEEP_FILES: sweep_manifest(names, sizes, origin)}, metadata={SWEEP_FILES: md})


@lake_asset(
    SWEEPS,
    code_version="2",
    kinds={"parquet"},
    deps=[sweep_files],
    backfill_policy=per_file_backfill(),
    automation_condition=NEW_PARTITION,
)
def sweeps(context: dg.AssetExecutionContext, survey: SurveyResource, lake: LakeResource) -> Publish:
    """Each sweep file of the run read into Arrow (lower-case DR10 columns, HEALPix indices,
    provenance), streamed in record batches into its staged partition, audited (contract, row count
    against the FITS header, rows inside the file's sky box, no object also in another published
    partition) and published; a run covers one sweep file or several (``per_file_backfill``)."""
    names = list(context.partition_keys)
    done = [_ingest(context, survey, lake, name) for name in names]
    return Publish(
        {SWEEPS: [staged for staged, _, _ in done]},
        audits={
            SWEEPS: au.combine([o for _, outcomes, _ in done for o in outcomes], [n for n in names for _ in range(3)])
        },
        metadata={SWEEPS: per_partition({n: md for n, (_, _, md) in zip(names, done)})},
    )


def _ingest(context: dg.AssetExecutionContext, survey: SurveyResource, lake: LakeResource, name: str):
    """One sweep file staged: (staged partition, its three audit outcomes, its metadata)."""
    staged = staged_table(context, SWEEPS, name)
    with survey.local_sweep(name) as path:
        info = ingest_sweep(path, staged.area.table(*SWEEPS.key), sweep_file=name)
        # read only once the library's reader has accepted the file (a bad one raised InputError)
        n_fits = int(fits.getheader(path, 1)["NAXIS2"])
    box = parse_sweep_filename(name)
    ids = staged.read(columns=["object_id"]).column("object_id").to_numpy()
    found = objects_in_other_sweeps(lake.lake().table(*SWEEPS.key), name, object_ids=ids)
    outcomes = [
        au.equal_counts_audit(checks.SWEEPS_ROW_COUNT, n_fits, staged.num_rows(), name),
        au.inside_box_audit(
            checks.SWEEPS_INSIDE_BOX,
            staged.read(columns=["ra", "dec"]),
            box.ra_min,
            box.ra_max,
            box.dec_min,
            box.dec_max,
        ),
        au.count_audit(
            checks.SWEEPS_UNIQUE_ACROSS_PARTITIONS,
            found["duplicates"],
            f"object(s) of {name} also in {sorted(found['with'])}",
            found,
        ),
    ]
    return staged, outcomes, {"fits_rows": n_fits, "data_model": info["data_model"]}


@lake_asset(PHOTO_Z, code_version="1", kinds={"parquet"}, deps=[sweeps])
def photo_z(context: dg.AssetExecutionContext, survey: SurveyResource, lake: LakeResource) -> Publish:
    """The photo-zs of one sweep file from its DR10 photo-z sweep (``10.1-photo-z/…-pz.fits``), whose
    rows must match the published sweep partition row by row on RELEASE, BRICKID, OBJID (a file that
    does not is refused, naming it and the first mismatched row); −99 becomes null. A sweep without
    its companion keeps its rows with null redshifts, counted in the metadata, never guessed."""
    name = context.partition_key
    keys = (
        lake.lake()
        .table(*SWEEPS.key)
        .read(partition={SWEEPS.partitioned_by: name}, columns=["release", "brickid", "objid", "row_index"])
    )
    relpath = f"{DR10_PHOTO_Z_DIR}/{pz_filename(name)}"
    with survey.local_file(relpath) as path:
        table = photo_z_missing(keys, name) if path is None else read_photo_z(path, keys, name)
    if path is None:
        context.log.warning(f"{survey.root()}/{relpath} is missing: the galaxies of {name} have no photo-z")
    outcomes = [au.equal_counts_audit(checks.PHOTO_Z_COVERS_SWEEP, keys.num_rows, table.num_rows, name)]
    md = {
        "companion": relpath,
        "companion_missing": path is None,
        "n_rows": table.num_rows,
        "n_without_photo_z": table.column("z_phot_median").null_count,
        "n_with_z_spec": table.num_rows - table.column("z_spec").null_count,
    }
    return Publish({PHOTO_Z: table}, audits={PHOTO_Z: outcomes}, metadata={PHOTO_Z: md})


@lake_asset(SPECTRA, code_version="1", kinds={"parquet"}, deps=[sweep_files])
def spectra(context: dg.AssetExecutionContext, survey: SurveyResource, lake: LakeResource) -> Publish:
    """SDSS DR16 spectra matched to the survey's sources: ``survey-dr10.1-south-specObj-dr16.fits``
    (Tractor photometry, row-matched to SDSS's ``specObj-dr16.fits``, checked on PLATE, MJD, FIBERID)
    and the SDSS file's Z, ZWARNING, CLASS, VDISP, VDISP_ERR; rows that matched no source are
    dropped and counted. Without the files the table is empty (counted), so every host's σ_v then
    needs a luminosity–σ relation calibrated elsewhere."""
    with survey.local_file(DR10_SPECOBJ_SURVEY) as survey_path, survey.local_file(DR10_SPECOBJ_SDSS) as sdss_path:
        if survey_path is None or sdss_path is None:
            missing = [p for p, q in ((DR10_SPECOBJ_SURVEY, survey_path), (DR10_SPECOBJ_SDSS, sdss_path)) if q is None]
            context.log.warning(f"{survey.root()}: missing {missing}: no spectra")
            table, counts = empty_spectra(), {"missing": missing}
        else:
            table, counts = read_spectra(survey_path, sdss_path)
    return Publish({SPECTRA: table}, metadata={SPECTRA: {**counts, "n_spectra": table.num_rows}})


@lake_asset(KNOWN_LENSES, code_version="2", kinds={"parquet"})
def known_lenses(context: dg.AssetExecutionContext, lake: LakeResource) -> Publish:
    """The lenscat catalog of known strong lenses, normalised: name, ra, dec (deg), z_lens (null when
    unknown), grade (confident/probable), kind (galaxy/group/cluster), reference."""
    table = load_known_lenses()
    md = {"by_kind": _counts(table, "kind"), "by_grade": _counts(table, "grade")}
    return Publish({KNOWN_LENSES: table}, metadata={KNOWN_LENSES: md})


def _counts(tbl: pa.Table, col: str) -> dict:
    return {str(d["values"]): int(d["counts"]) for d in tbl.column(col).value_counts().to_pylist()}


#: What each asset needs of a DR10 mirror besides the sweep files (``darkhaloscope.survey.inputs``):
#: ``injection_plan`` the photo-z companions (its hosts' redshifts; ``photo_z`` itself publishes
#: null redshifts without them) and the spectra its hosts' σ_v relation is calibrated on;
#: ``cutouts`` and ``search_scores`` the coadds of the bricks the sweeps' objects lie in (when the
#: imaging source is the mirror's own bricks).
MIRROR_INPUTS = {
    "injection/injection_plan": ("photo-z", "spectra"),
    "imaging/cutouts": ("coadds",),
    "search/search_scores": ("coadds",),
}


def missing_mirror_inputs(survey: SurveyResource, imaging, lake, assets) -> list[str]:
    """The files of the DR10 mirror that the assets ``assets`` (keys as ``group/name``) will read
    (``imaging``: the ImagingResource, None without one) and the mirror lacks, as full paths, in
    the order of ``darkhaloscope.survey.inputs``; empty for the mock survey. The bricks of a sweep
    file come from its published ``sweeps`` partition, else from the file's BRICKNAME column."""
    if survey.is_mock:
        return []
    needs = {kind for a in assets for kind in MIRROR_INPUTS.get(a, ())}
    if imaging is None or imaging.cutout_source != "auto":  # a cutout service, not the mirror's bricks
        needs.discard("coadds")
    names = survey.sweep_files()
    paths: list[str] = []
    if "photo-z" in needs:
        paths += [p for n in names for p in companion_paths(n)]
    if "spectra" in needs:
        paths += list(SPECTRA_PATHS)
    if "coadds" in needs:
        bricks = sorted({b for n in names for b in _sweep_bricks(survey, lake, n)})
        paths += [p for b in bricks for p in brick_paths(b)]
    fs, root = survey.filesystem()
    infos = fs.get_file_info([f"{root}/{p}" for p in paths]) if paths else []
    return [f"{survey.root()}/{p}" for p, i in zip(paths, infos) if i.type != pafs.FileType.File]


def _sweep_bricks(survey: SurveyResource, lake, name: str) -> list[str]:
    table = lake.table(*SWEEPS.key)
    partition = {SWEEPS.partitioned_by: name}
    if table.exists(partition):
        return [b for b in pc.unique(table.read(partition=partition, columns=["brickname"]).column(0)).to_pylist() if b]
    with survey.local_sweep(name) as path:
        return sweep_bricks(path)


@dg.sensor(
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Registers one sweep_file partition per survey sweep file; removes those of vanished files.",
)
def sweep_file_sensor(context: dg.SensorEvaluationContext, survey: SurveyResource) -> dg.SensorResult:
    change = sweep_file_change(context.instance, survey)
    return dg.SensorResult(
        dynamic_partitions_requests=change.requests(),
        skip_reason=None if change.requests() else "sweep files unchanged",
    )


survey_defs = dg.Definitions(
    assets=[sweep_files, sweeps, photo_z, spectra, known_lenses], sensors=[sweep_file_sensor, survey_flow_sensor()]
)
