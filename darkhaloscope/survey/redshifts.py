"""Redshifts and velocity dispersions of DR10 sources: the photo-z sweeps and the SDSS-matched spectra.

Data models (``reference/science.md`` §2.3a):

- **Photo-z sweeps**: ``south/sweep/10.1-photo-z/sweep-<brickmin>-<brickmax>-pz.fits``, one per sweep
  file, row N of the pz file is row N of its sweep (Zhou et al. 2023, arXiv:2309.06443, whose
  photo-zs work using them must cite). RELEASE, BRICKID, OBJID repeat the sweep's key and are
  checked row by row; Z_PHOT_MEAN, Z_PHOT_MEDIAN, Z_PHOT_STD, Z_PHOT_L68/U68/L95/U95 (float32) hold
  −99 where the object lacks an exposure in g, r or z; Z_SPEC (float32) a spectroscopic redshift where
  one trained the forest (the fill value is undocumented: non-finite or ≤ 0 counts as none).
- **Spectra**: ``survey-dr10.1-south-specObj-dr16.fits`` (one HDU) holds the Tractor photometry of
  the nearest DR10 source (1.5″) of each row of SDSS DR16's ``specObj-dr16.fits``, row by row, OBJID
  −1 where none matched; the survey file copies PLATE, MJD and FIBERID from the SDSS file, so the
  pairing is checked on them. The SDSS file holds Z, ZWARNING, CLASS, VDISP and VDISP_ERR (km/s).

Nothing is guessed: a −99 or a missing companion is a null redshift, counted by the caller.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..errors import InputError
from ..ids import object_id

#: Photo-z sweeps of a DR10 mirror, relative to its root.
DR10_PHOTO_Z_DIR = "south/sweep/10.1-photo-z"
#: The SDSS DR16 spectra matched to DR10-south Tractor sources, and the SDSS file they match, relative
#: to a mirror's root (the Legacy Surveys' external-catalog folder; the SDSS file is SDSS's own, put
#: beside it).
DR10_SPECOBJ_SURVEY = "south/external/survey-dr10.1-south-specObj-dr16.fits"
DR10_SPECOBJ_SDSS = "south/external/specObj-dr16.fits"
#: Value the photo-z sweeps hold where an object has no photo-z.
PZ_FILL = -99.0
#: Photo-z columns of the grz+W1W2 set (the ``_I`` set repeats them with a suffix).
PZ_COLUMNS = (
    "Z_PHOT_MEAN",
    "Z_PHOT_MEDIAN",
    "Z_PHOT_STD",
    "Z_PHOT_L68",
    "Z_PHOT_U68",
    "Z_PHOT_L95",
    "Z_PHOT_U95",
)
_KEY = ("RELEASE", "BRICKID", "OBJID")
#: SDSS columns the spectra table keeps (specObj data model), and the pairing columns of both files.
SPEC_COLUMNS = ("Z", "ZWARNING", "CLASS", "VDISP", "VDISP_ERR")
SPEC_PAIRING = ("PLATE", "MJD", "FIBERID")
#: Tractor photometry the spectra table keeps (what a luminosity–σ relation is calibrated on).
SPEC_PHOTOMETRY = ("flux_r", "flux_z", "mw_transmission_r", "mw_transmission_z")

PHOTO_Z_SCHEMA = pa.schema(
    [
        pa.field("object_id", pa.int64(), nullable=False),
        pa.field("sweep_file", pa.string(), nullable=False),
        pa.field("row_index", pa.int64(), nullable=False),
        *(
            pa.field(c.lower(), pa.float32(), metadata={"description": f"{c} of the pz file; null where it was -99"})
            for c in PZ_COLUMNS
        ),
        pa.field("z_spec", pa.float32(), metadata={"description": "Z_SPEC; null where not finite or <= 0"}),
        pa.field("pz_file", pa.string(), metadata={"description": "the companion read; null when it is missing"}),
    ]
)

SPECTRA_SCHEMA = pa.schema(
    [
        pa.field("object_id", pa.int64(), nullable=False),
        pa.field("ra", pa.float64(), metadata={"unit": "deg", "description": "Tractor RA of the matched source"}),
        pa.field("dec", pa.float64(), metadata={"unit": "deg"}),
        pa.field("type", pa.string(), metadata={"description": "Tractor TYPE of the matched source"}),
        *(
            pa.field(c, pa.float64(), metadata={"unit": "nmgy" if c.startswith("flux") else ""})
            for c in SPEC_PHOTOMETRY
        ),
        pa.field("z", pa.float64(), metadata={"description": "SDSS redshift Z"}),
        pa.field("zwarning", pa.int32(), metadata={"description": "SDSS ZWARNING (0 = no known problem)"}),
        pa.field("class", pa.string(), metadata={"description": "SDSS CLASS (GALAXY, QSO, STAR)"}),
        pa.field("vdisp", pa.float64(), metadata={"unit": "km/s", "description": "SDSS VDISP"}),
        pa.field("vdisp_err", pa.float64(), metadata={"unit": "km/s", "description": "SDSS VDISP_ERR"}),
        pa.field("plate", pa.int64()),
        pa.field("mjd", pa.int64()),
        pa.field("fiberid", pa.int64()),
        pa.field("row_index", pa.int64(), metadata={"description": "row in the specObj files"}),
    ]
)


def pz_filename(sweep_file: str) -> str:
    """The photo-z companion of a sweep file name: ``sweep-A-B.fits`` -> ``sweep-A-B-pz.fits``."""
    base = sweep_file[:-3] if sweep_file.endswith(".gz") else sweep_file
    if not base.endswith(".fits") or not base.startswith("sweep-"):
        raise InputError(f"{sweep_file!r} is not a sweep file name (sweep-<brickmin>-<brickmax>.fits)")
    return base[: -len(".fits")] + "-pz.fits"


def _open_table(path: str, what: str):
    from astropy.io import fits

    try:
        hdul = fits.open(path, memmap=True)
    except FileNotFoundError as exc:
        raise InputError(f"{what} {path}: no such file") from exc
    except OSError as exc:
        raise InputError(f"{what} {path}: not a readable FITS file ({exc})") from exc
    if len(hdul) < 2 or not hasattr(hdul[1], "columns"):
        hdul.close()
        raise InputError(f"{what} {path}: HDU 1 is not a binary table")
    return hdul


def _column(data, names, name: str, path: str, what: str) -> np.ndarray:
    if name not in names:
        raise InputError(f"{what} {path}: missing column {name!r}")
    return np.asarray(data[name])


def _nullable_f32(values: np.ndarray, valid: np.ndarray) -> pa.Array:
    v = np.asarray(values, dtype=np.float32)
    return pa.array(np.where(valid, v, 0.0).astype(np.float32), mask=~valid)


def read_photo_z(path: str, sweep_keys: pa.Table, sweep_file: str) -> pa.Table:
    """The photo-zs of one sweep file (PHOTO_Z_SCHEMA), from its pz companion at ``path``.

    ``sweep_keys``: the sweep's rows (release, brickid, objid, row_index) in file order. The pz file
    must hold the same number of rows with the same RELEASE, BRICKID, OBJID in the same order;
    otherwise InputError names the file and the first mismatched row. −99 and non-finite photo-zs
    become nulls, as do Z_SPEC values that are not finite and > 0."""
    what = "photo-z sweep"
    order = np.argsort(np.asarray(sweep_keys.column("row_index").to_numpy(), dtype=np.int64), kind="stable")
    keys = {k: np.asarray(sweep_keys.column(k.lower()).to_numpy(), dtype=np.int64)[order] for k in _KEY}
    n = len(order)
    with _open_table(path, what) as hdul:
        data, names = hdul[1].data, hdul[1].columns.names
        n_pz = 0 if data is None else len(data)
        if n_pz != n:
            raise InputError(f"{what} {path}: {n_pz} rows, but its sweep {sweep_file} has {n} (not row-matched)")
        for k in _KEY:
            got = _column(data, names, k, path, what).astype(np.int64)
            bad = np.flatnonzero(got != keys[k])
            if bad.size:
                i = int(bad[0])
                raise InputError(
                    f"{what} {path}: row {i} has {k}={got[i]} but row {i} of {sweep_file} has {keys[k][i]} "
                    f"(not row-matched; first mismatched row {i})"
                )
        cols = {
            "object_id": pa.array(object_id(keys["RELEASE"], keys["BRICKID"], keys["OBJID"])),
            "sweep_file": pa.array([sweep_file] * n, pa.string()),
            "row_index": pa.array(np.arange(n, dtype=np.int64)),
        }
        for c in PZ_COLUMNS:
            v = _column(data, names, c, path, what).astype(np.float64)
            cols[c.lower()] = _nullable_f32(v, np.isfinite(v) & (v != PZ_FILL))
        zs = _column(data, names, "Z_SPEC", path, what).astype(np.float64)
        cols["z_spec"] = _nullable_f32(zs, np.isfinite(zs) & (zs > 0))
    cols["pz_file"] = pa.array([path.rsplit("/", 1)[-1]] * n, pa.string())
    return pa.table(cols, schema=PHOTO_Z_SCHEMA)


def photo_z_missing(sweep_keys: pa.Table, sweep_file: str) -> pa.Table:
    """The rows of a sweep whose pz companion is missing: every redshift null, ``pz_file`` null."""
    rows = np.asarray(sweep_keys.column("row_index").to_numpy(), dtype=np.int64)
    order = np.argsort(rows, kind="stable")
    n = len(order)
    ids = object_id(*(np.asarray(sweep_keys.column(k.lower()).to_numpy())[order] for k in _KEY))
    null = pa.nulls(n, pa.float32())
    cols = {"object_id": pa.array(ids), "sweep_file": pa.array([sweep_file] * n, pa.string())}
    cols["row_index"] = pa.array(rows[order])
    cols.update({c.lower(): null for c in PZ_COLUMNS})
    cols["z_spec"] = null
    cols["pz_file"] = pa.nulls(n, pa.string())
    return pa.table(cols, schema=PHOTO_Z_SCHEMA)


def read_spectra(survey_path: str, sdss_path: str) -> tuple[pa.Table, dict]:
    """The SDSS spectra matched to DR10 sources (SPECTRA_SCHEMA) and counts: ``n_rows`` of the files,
    ``n_unmatched`` (OBJID −1: no DR10 source within the match radius), ``n_kept``.

    Both files must have the same number of rows and the same PLATE, MJD, FIBERID row by row
    (InputError naming the file and the first mismatched row otherwise). A DR10 source matched by
    several spectra keeps the first good one (ZWARNING 0, then the lowest row)."""
    what = "SDSS-matched spectra"
    with _open_table(survey_path, what) as sh, _open_table(sdss_path, "SDSS specObj") as qh:
        s, sn = sh[1].data, sh[1].columns.names
        q, qn = qh[1].data, qh[1].columns.names
        n, nq = (0 if s is None else len(s)), (0 if q is None else len(q))
        if n != nq:
            raise InputError(f"{what} {survey_path}: {n} rows, but {sdss_path} has {nq} (not row-matched)")
        for c in SPEC_PAIRING:
            a = _column(s, sn, c, survey_path, what).astype(np.int64)
            b = _column(q, qn, c, sdss_path, "SDSS specObj").astype(np.int64)
            bad = np.flatnonzero(a != b)
            if bad.size:
                i = int(bad[0])
                raise InputError(
                    f"{what} {survey_path}: row {i} has {c}={a[i]} but row {i} of {sdss_path} has {b[i]} "
                    f"(not row-matched; first mismatched row {i})"
                )
        keys = {k: _column(s, sn, k, survey_path, what).astype(np.int64) for k in _KEY}
        matched = keys["OBJID"] >= 0
        pick = np.flatnonzero(matched)
        ra = _column(s, sn, "RA", survey_path, what).astype(np.float64)[pick]
        dec = _column(s, sn, "DEC", survey_path, what).astype(np.float64)[pick]
        typ = np.char.strip(_column(s, sn, "TYPE", survey_path, what).astype(str))[pick]
        spec = {c: _column(q, qn, c, sdss_path, "SDSS specObj")[pick] for c in SPEC_COLUMNS}
        phot = {c: _column(s, sn, c.upper(), survey_path, what).astype(np.float64)[pick] for c in SPEC_PHOTOMETRY}
        pairing = {c: _column(s, sn, c, survey_path, what).astype(np.int64)[pick] for c in SPEC_PAIRING}
    ids = object_id(keys["RELEASE"][pick], keys["BRICKID"][pick], keys["OBJID"][pick])
    zwarn = spec["ZWARNING"].astype(np.int32)
    table = pa.table(
        {
            "object_id": pa.array(ids),
            "ra": pa.array(ra),
            "dec": pa.array(dec),
            "type": pa.array(typ.tolist(), pa.string()),
            **{c: pa.array(phot[c]) for c in SPEC_PHOTOMETRY},
            "z": pa.array(spec["Z"].astype(np.float64)),
            "zwarning": pa.array(zwarn),
            "class": pa.array(np.char.strip(spec["CLASS"].astype(str)).tolist(), pa.string()),
            "vdisp": pa.array(spec["VDISP"].astype(np.float64)),
            "vdisp_err": pa.array(spec["VDISP_ERR"].astype(np.float64)),
            "plate": pa.array(pairing["PLATE"]),
            "mjd": pa.array(pairing["MJD"]),
            "fiberid": pa.array(pairing["FIBERID"]),
            "row_index": pa.array(pick.astype(np.int64)),
        },
        schema=SPECTRA_SCHEMA,
    )
    # one spectrum per source: good redshifts first, then file order
    order = np.lexsort((pick, zwarn != 0, ids))
    first = np.r_[True, np.diff(ids[order]) != 0] if len(order) else np.zeros(0, bool)
    table = table.take(pa.array(np.sort(order[first])))
    return table, {"n_rows": int(n), "n_unmatched": int((~matched).sum()), "n_kept": table.num_rows}


def empty_spectra() -> pa.Table:
    """The spectra table of a survey without the SDSS-matched files."""
    return SPECTRA_SCHEMA.empty_table()
