"""Data models of Legacy Surveys sweep and Tractor catalogs (DR8, DR9, DR10), as FITS columns.

Every column is a ``(FITS name, TFORM)`` pair in file order; TFORM is the FITS binary-table code
(``E`` >f4, ``D`` >f8, ``I`` >i2, ``J`` >i4, ``K`` >i8, ``B`` u1, ``L`` logical, ``nA`` string,
``5E`` a vector of 5 >f4). ``numpy_dtype_for_tform`` gives the on-disk big-endian numpy dtype and
``arrow_type_for_tform`` the Arrow type the reader produces; both the sweep reader and the mock
survey writer use them, so the file layout and the lake schema come from one place.

Sources: the Legacy Surveys catalog data model (legacysurvey.org/dr10/catalogs, /dr9/catalogs) and
legacypipe's sweep writer:

- DR10 sweeps (``south/sweep/10.1``): legacypipe's ``SWEEP_DTYPE`` (bin/generate-sweep-files.py)
  restricted to the bands DR10 delivers (g, r, i, z, W1–W4), TYPE ``S3``, MASKBITS ``>i4``,
  FITBITS ``>i2``, Sérsic columns, no BRICK_PRIMARY (sweeps hold primary rows only). The LC_*
  light-curve columns live in the ``-lc`` companion files, not in the sweeps.
- DR9 sweeps: as DR10 without the i band; MASKBITS is ``>i2``.
- DR8 sweeps: checked against a real DR8 sweep (``sweep-320m005-330p000.fits``, read by the tests):
  TYPE ``S4`` with ``'PSF '``/``'COMP'``, FRACDEV and separate SHAPEDEV_*/SHAPEEXP_* shapes,
  MASKBITS ``>i2``, no PSFSIZE, no SERSIC.
- Tractor catalogs (``tractor-<brick>.fits``) carry BRICK_PRIMARY plus many more columns; they are
  recognised but not modelled column by column.

Units (the DR10 catalog data model): RA/DEC deg; RA_IVAR/DEC_IVAR 1/deg²; FLUX_* nanomaggies (AB zero point 22.5);
FLUX_IVAR_* 1/nanomaggy²; MW_TRANSMISSION_* linear in [0, 1]; PSFSIZE_* arcsec (FWHM);
PSFDEPTH_*/GALDEPTH_* 1/nanomaggy² (5σ flux = 5/√depth); SHAPE_R arcsec (half-light radius);
SHAPE_E1/E2 dimensionless ((a−b)/(a+b) e^{2iφ}); EBV mag (SFD98); NOBS_* count of images.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa

from ..errors import InputError

#: Optical bands in DR10 sweeps, and WISE bands.
DR10_OPTICAL = ("G", "R", "I", "Z")
DR9_OPTICAL = ("G", "R", "Z")
WISE = ("W1", "W2", "W3", "W4")


def _per_band(prefix: str, bands, tform: str) -> list[tuple[str, str]]:
    return [(f"{prefix}_{b}", tform) for b in bands]


def _sweep_columns(optical: tuple[str, ...], maskbits_tform: str) -> tuple[tuple[str, str], ...]:
    allb = optical + WISE
    cols: list[tuple[str, str]] = [
        ("RELEASE", "I"),
        ("BRICKID", "J"),
        ("BRICKNAME", "8A"),
        ("OBJID", "J"),
        ("TYPE", "3A"),
        ("RA", "D"),
        ("DEC", "D"),
        ("RA_IVAR", "E"),
        ("DEC_IVAR", "E"),
        ("DCHISQ", "5E"),
        ("EBV", "E"),
    ]
    cols += _per_band("FLUX", allb, "E")
    cols += _per_band("FLUX_IVAR", allb, "E")
    cols += _per_band("MW_TRANSMISSION", allb, "E")
    cols += _per_band("NOBS", allb, "I")
    cols += _per_band("RCHISQ", allb, "E")
    cols += _per_band("FRACFLUX", allb, "E")
    cols += _per_band("FRACMASKED", optical, "E")
    cols += _per_band("FRACIN", optical, "E")
    cols += _per_band("ANYMASK", optical, "I")
    cols += _per_band("ALLMASK", optical, "I")
    cols += [("WISEMASK_W1", "B"), ("WISEMASK_W2", "B")]
    cols += _per_band("PSFSIZE", optical, "E")
    cols += _per_band("PSFDEPTH", optical, "E")
    cols += _per_band("GALDEPTH", optical, "E")
    cols += [("PSFDEPTH_W1", "E"), ("PSFDEPTH_W2", "E"), ("WISE_COADD_ID", "8A")]
    cols += [
        ("SHAPE_R", "E"),
        ("SHAPE_R_IVAR", "E"),
        ("SHAPE_E1", "E"),
        ("SHAPE_E1_IVAR", "E"),
        ("SHAPE_E2", "E"),
        ("SHAPE_E2_IVAR", "E"),
    ]
    cols += _per_band("FIBERFLUX", optical, "E")
    cols += _per_band("FIBERTOTFLUX", optical, "E")
    cols += [
        ("REF_CAT", "2A"),
        ("REF_ID", "K"),
        ("REF_EPOCH", "E"),
        ("GAIA_PHOT_G_MEAN_MAG", "E"),
        ("GAIA_PHOT_G_MEAN_FLUX_OVER_ERROR", "E"),
        ("GAIA_PHOT_BP_MEAN_MAG", "E"),
        ("GAIA_PHOT_BP_MEAN_FLUX_OVER_ERROR", "E"),
        ("GAIA_PHOT_RP_MEAN_MAG", "E"),
        ("GAIA_PHOT_RP_MEAN_FLUX_OVER_ERROR", "E"),
        ("GAIA_ASTROMETRIC_EXCESS_NOISE", "E"),
        ("GAIA_DUPLICATED_SOURCE", "L"),
        ("GAIA_PHOT_BP_RP_EXCESS_FACTOR", "E"),
        ("GAIA_ASTROMETRIC_SIGMA5D_MAX", "E"),
        ("GAIA_ASTROMETRIC_PARAMS_SOLVED", "B"),
        ("PARALLAX", "E"),
        ("PARALLAX_IVAR", "E"),
        ("PMRA", "E"),
        ("PMRA_IVAR", "E"),
        ("PMDEC", "E"),
        ("PMDEC_IVAR", "E"),
        ("MASKBITS", maskbits_tform),
        ("FITBITS", "I"),
        ("SERSIC", "E"),
        ("SERSIC_IVAR", "E"),
    ]
    return tuple(cols)


#: DR10 sweep columns (FITS name, TFORM) in file order.
DR10_SWEEP_COLUMNS: tuple[tuple[str, str], ...] = _sweep_columns(DR10_OPTICAL, "J")
#: DR9 sweep columns: DR10 without the i band, MASKBITS int16.
DR9_SWEEP_COLUMNS: tuple[tuple[str, str], ...] = _sweep_columns(DR9_OPTICAL, "I")

_DR8_DIRECT = (
    [("RELEASE", "I"), ("BRICKID", "J"), ("BRICKNAME", "8A"), ("OBJID", "J"), ("TYPE", "4A")]
    + [("RA", "D"), ("RA_IVAR", "E"), ("DEC", "D"), ("DEC_IVAR", "E"), ("DCHISQ", "5E"), ("EBV", "E")]
    + _per_band("FLUX", DR9_OPTICAL, "E")
    + _per_band("FLUX_IVAR", DR9_OPTICAL, "E")
    + _per_band("MW_TRANSMISSION", DR9_OPTICAL, "E")
    + _per_band("FRACFLUX", DR9_OPTICAL, "E")
    + _per_band("FRACMASKED", DR9_OPTICAL, "E")
    + _per_band("FRACIN", DR9_OPTICAL, "E")
    + _per_band("NOBS", DR9_OPTICAL, "I")
    + _per_band("PSFDEPTH", DR9_OPTICAL, "E")
    + _per_band("GALDEPTH", DR9_OPTICAL, "E")
    + _per_band("FLUX", WISE, "E")
    + _per_band("FLUX_IVAR", WISE, "E")
    + _per_band("MW_TRANSMISSION", WISE, "E")
    + _per_band("ALLMASK", DR9_OPTICAL, "I")
    + [("FRACDEV", "E"), ("FRACDEV_IVAR", "E")]
    + [(f"SHAPE{m}_{q}", "E") for m in ("DEV", "EXP") for q in ("R", "E1", "E2", "R_IVAR", "E1_IVAR", "E2_IVAR")]
    + _per_band("FIBERFLUX", DR9_OPTICAL, "E")
    + _per_band("FIBERTOTFLUX", DR9_OPTICAL, "E")
    + [("WISEMASK_W1", "B"), ("WISEMASK_W2", "B"), ("MASKBITS", "I"), ("REF_ID", "K"), ("REF_CAT", "2A")]
    + [
        ("GAIA_PHOT_G_MEAN_MAG", "E"),
        ("GAIA_PHOT_G_MEAN_FLUX_OVER_ERROR", "E"),
        ("GAIA_PHOT_BP_MEAN_MAG", "E"),
        ("GAIA_PHOT_BP_MEAN_FLUX_OVER_ERROR", "E"),
        ("GAIA_PHOT_RP_MEAN_MAG", "E"),
        ("GAIA_PHOT_RP_MEAN_FLUX_OVER_ERROR", "E"),
        ("GAIA_PHOT_BP_RP_EXCESS_FACTOR", "E"),
        ("GAIA_ASTROMETRIC_EXCESS_NOISE", "E"),
        ("GAIA_DUPLICATED_SOURCE", "L"),
        ("GAIA_ASTROMETRIC_SIGMA5D_MAX", "E"),
        ("GAIA_ASTROMETRIC_PARAMS_SOLVED", "B"),
        ("PARALLAX", "E"),
        ("PARALLAX_IVAR", "E"),
        ("PMRA", "E"),
        ("PMRA_IVAR", "E"),
        ("PMDEC", "E"),
        ("PMDEC_IVAR", "E"),
        ("PHOTSYS", "1A"),
    ]
)
#: DR8 sweep columns as found in a real DR8 sweep file.
DR8_SWEEP_COLUMNS: tuple[tuple[str, str], ...] = tuple(_DR8_DIRECT)

SWEEP_COLUMNS_BY_MODEL = {
    "dr8-sweep": DR8_SWEEP_COLUMNS,
    "dr9-sweep": DR9_SWEEP_COLUMNS,
    "dr10-sweep": DR10_SWEEP_COLUMNS,
}

#: Columns every supported catalog (DR8+ sweep or Tractor) must have: the pipeline's core needs.
REQUIRED_COLUMNS: tuple[str, ...] = (
    "RELEASE",
    "BRICKID",
    "BRICKNAME",
    "OBJID",
    "TYPE",
    "RA",
    "DEC",
    "EBV",
    "MASKBITS",
) + tuple(
    f"{p}_{b}" for p in ("FLUX", "FLUX_IVAR", "MW_TRANSMISSION", "NOBS", "PSFDEPTH", "GALDEPTH") for b in DR9_OPTICAL
)
#: Extra columns required from DR9 on (single SHAPE_*, Sérsic index, PSF size); DR8 lacks them.
REQUIRED_DR9PLUS: tuple[str, ...] = ("SHAPE_R", "SHAPE_E1", "SHAPE_E2", "SERSIC") + tuple(
    f"PSFSIZE_{b}" for b in DR9_OPTICAL
)
#: The identifying columns without which a file is not a DR4+ Tractor-derived catalog.
IDENTITY_COLUMNS: tuple[str, ...] = ("RELEASE", "BRICKID", "OBJID", "TYPE", "RA", "DEC")

#: Columns the reader appends after the FITS columns (lower-case lake names).
DERIVED_COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    ("healpix_128", pa.int64()),
    ("healpix_fine", pa.int64()),
    ("sweep_file", pa.string()),
    ("row_index", pa.int64()),
    ("object_id", pa.int64()),
)

_TFORM_RE = re.compile(r"^\s*(\d*)([LXBIJKAEDCMPQ])(.*)$")
_NUMPY_CODE = {"L": "i1", "B": "u1", "I": ">i2", "J": ">i4", "K": ">i8", "E": ">f4", "D": ">f8"}
_ARROW_CODE = {
    "L": pa.bool_(),
    "B": pa.uint8(),
    "I": pa.int16(),
    "J": pa.int32(),
    "K": pa.int64(),
    "E": pa.float32(),
    "D": pa.float64(),
}


def parse_tform(tform: str, column: str = "?") -> tuple[int, str]:
    """(repeat, code) of a FITS binary-table TFORM; InputError for forms the reader does not support."""
    m = _TFORM_RE.match(tform or "")
    if not m:
        raise InputError(f"column {column}: unrecognised TFORM {tform!r}")
    repeat = int(m.group(1)) if m.group(1) else 1
    code = m.group(2)
    if code not in _NUMPY_CODE and code != "A":
        raise InputError(f"column {column}: TFORM {tform!r} (code {code}) is not supported by the sweep reader")
    return repeat, code


def numpy_dtype_for_tform(tform: str, column: str = "?") -> tuple[str, tuple[int, ...]]:
    """(numpy base dtype string, shape) of a column as stored on disk (big-endian; L is int8 'T'/'F')."""
    repeat, code = parse_tform(tform, column)
    if code == "A":
        return f"S{repeat}", ()
    return _NUMPY_CODE[code], ((repeat,) if repeat != 1 else ())


def arrow_type_for_tform(tform: str, column: str = "?") -> pa.DataType:
    """Arrow type of a column in the lake: strings stripped, vectors fixed-size lists, MASKBITS int32."""
    repeat, code = parse_tform(tform, column)
    if code == "A":
        return pa.string()
    if column.upper() == "MASKBITS":
        return pa.int32()
    base = _ARROW_CODE[code]
    return pa.list_(base, repeat) if repeat != 1 else base


def numpy_dtype(columns: tuple[tuple[str, str], ...]) -> np.dtype:
    """Big-endian packed numpy record dtype of a column list (the FITS row layout)."""
    fields = []
    for name, tform in columns:
        base, shape = numpy_dtype_for_tform(tform, name)
        fields.append((name, base, shape) if shape else (name, base))
    return np.dtype(fields)


#: The DR10 sweep row layout as numpy sees the FITS bytes (L columns as int8).
DR10_SWEEP_DTYPE = numpy_dtype(DR10_SWEEP_COLUMNS)


def arrow_schema(columns: tuple[tuple[str, str], ...], data_model: str | None = None) -> pa.Schema:
    """Lake schema of a catalog read by ``darkhaloscope.survey.sweeps``: lower-case FITS columns + derived."""
    fields = [pa.field(name.lower(), arrow_type_for_tform(tform, name)) for name, tform in columns]
    fields += [pa.field(n, t) for n, t in DERIVED_COLUMNS]
    meta = {b"dhs.data_model": data_model.encode()} if data_model else None
    return pa.schema(fields, metadata=meta)


def detect_data_model(columns: dict[str, str], where: str) -> str:
    """Data model name from a FITS table's ``{NAME: TFORM}``; InputError for unsupported schemas.

    ``where`` names the file in error messages. Rules: no RELEASE/BRICKID/OBJID/TYPE/RA/DEC means a
    pre-DR4 layout (e.g. DECAM_FLUX vectors) or not a Tractor catalog; no MASKBITS means DR4–DR7,
    which the pipeline does not support. BRICK_PRIMARY marks a Tractor catalog. DR8 has TYPE
    ``4A`` and SHAPEDEV/SHAPEEXP shapes; DR10 adds the i band (FLUX_I).
    """
    names = set(columns)
    missing = [c for c in IDENTITY_COLUMNS if c not in names]
    if missing:
        hint = " (pre-DR4 vector layout: DECAM_FLUX)" if "DECAM_FLUX" in names else ""
        raise InputError(f"{where}: unsupported catalog schema{hint}: no column(s) {', '.join(missing)}")
    if "MASKBITS" not in names:
        raise InputError(f"{where}: unsupported catalog schema (DR4–DR7: no MASKBITS column); DR8 or later is required")
    kind = "tractor" if "BRICK_PRIMARY" in names else "sweep"
    type_repeat, _ = parse_tform(columns["TYPE"], "TYPE")
    if "SHAPEDEV_R" in names or "FRACDEV" in names or type_repeat == 4:
        gen = "dr8"
    elif "FLUX_I" in names:
        gen = "dr10"
    else:
        gen = "dr9"
    return f"{gen}-{kind}"


def _tform_kind(code: str) -> str:
    return {"A": "string", "L": "logical", "E": "float", "D": "float"}.get(code, "integer")


def check_column_types(columns: dict[str, str], data_model: str, where: str) -> None:
    """InputError naming the column when a modelled column's TFORM is not exactly the data model's.

    ``columns`` is ``{NAME: TFORM}`` of a file recognised as ``data_model``; each column that the
    data model describes (the sweep layout of the same release, also for Tractor files) must have
    the same TFORM: the same code (``E`` float32 is not ``D`` float64, ``I`` int16 is not ``J``
    int32) and the same repeat count or string length. Real DR8 sweeps and DR9 Tractor files
    match their models exactly; anything else was written by another tool and would silently
    change precision (a float32 RA is off by up to ~1 arcsec at RA ~ 300 deg) or meaning.
    """
    reference = dict(SWEEP_COLUMNS_BY_MODEL[data_model.replace("-tractor", "-sweep")])
    for name, tform in columns.items():
        want = reference.get(name)
        if want is None:
            continue
        if parse_tform(tform, name) != parse_tform(want, name):
            raise InputError(
                f"{where}: column {name} has TFORM {tform!r}, expected {want!r} "
                f"({_tform_kind(parse_tform(want, name)[1])}, {numpy_dtype_for_tform(want, name)[0].lstrip('>')}) "
                f"for a {data_model} file"
            )


#: TYPE values of each release's data model (Tractor morphologies; DUP marks a Gaia source fitted
#: by another model; DR8's COMP became SER from DR9 on).
TYPE_VOCABULARY = {
    "dr8": frozenset({"PSF", "REX", "DEV", "EXP", "COMP", "DUP"}),
    "dr9": frozenset({"PSF", "REX", "DEV", "EXP", "SER", "DUP"}),
    "dr10": frozenset({"PSF", "REX", "DEV", "EXP", "SER", "DUP"}),
}


def type_vocabulary(data_model: str) -> frozenset:
    """The TYPE values a file of ``data_model`` may hold."""
    return TYPE_VOCABULARY[data_model.split("-")[0]]


def is_inverse_variance(column: str) -> bool:
    """True for inverse-variance columns (``RA_IVAR``, ``FLUX_IVAR_<band>``, ``SHAPE_R_IVAR``, ...):
    finite and >= 0 in a valid catalog (0 = no measurement)."""
    upper = column.upper()
    return upper.endswith("_IVAR") or "_IVAR_" in upper


def is_flux(column: str) -> bool:
    """True for the model fluxes ``FLUX_<band>`` (nanomaggies), not their inverse variances."""
    upper = column.upper()
    return upper.startswith("FLUX_") and not upper.startswith("FLUX_IVAR")


def required_columns(data_model: str) -> tuple[str, ...]:
    """FITS columns a file of ``data_model`` must carry for the pipeline."""
    if data_model.startswith("dr8"):
        return REQUIRED_COLUMNS
    return REQUIRED_COLUMNS + REQUIRED_DR9PLUS


# ----------------------------------------------------------------------------------------------
# The brick grid (0.25° rows in Dec; an even number of equal-RA bricks per row, one at each pole)

BRICK_SIZE_DEG = 0.25
_ROW_DEC = np.arange(-90.0, 90.0 + BRICK_SIZE_DEG / 2, BRICK_SIZE_DEG)
_NCOL = (np.ceil(360.0 / BRICK_SIZE_DEG * np.cos(np.radians(np.abs(_ROW_DEC) - BRICK_SIZE_DEG / 2)) / 2) * 2).astype(
    np.int64
)
_NCOL[0] = _NCOL[-1] = 1
_ROW_START = np.concatenate([[0], np.cumsum(_NCOL)])


def _digits(values: np.ndarray, width: int) -> np.ndarray:
    """(n, width) uint8 ASCII digits of non-negative integers, zero padded."""
    v = np.asarray(values, dtype=np.int64)
    powers = 10 ** np.arange(width - 1, -1, -1, dtype=np.int64)
    return (48 + (v[:, None] // powers) % 10).astype(np.uint8)


def bricks_for(ra_deg, dec_deg) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(brickid int32, brickname S8, brick-centre RA, brick-centre Dec) of each position in degrees.

    The Legacy Surveys grid: 721 rows of 0.25° centred on Dec = -90, -89.75, …, 90; each row
    holds the even number of equal-RA bricks that keeps bricks ≤ 0.25° wide at the row's edge
    nearest the equator; BRICKID counts from 1 at the south pole, row by row in increasing RA.
    Names are ``<AAAa>c<BBB>``: int(RA_centre×10) as 4 digits, ``p``/``m``, int(|Dec_centre|×10).
    (It reproduces the BRICKID/BRICKNAME of the real DR8 sweep and DR9 Tractor test files.)
    """
    ra = np.mod(np.asarray(ra_deg, dtype=np.float64), 360.0)
    dec = np.asarray(dec_deg, dtype=np.float64)
    row = ((dec + 90.0 + BRICK_SIZE_DEG / 2) / BRICK_SIZE_DEG).astype(np.int64)
    ncol = _NCOL[row]
    col = np.minimum((ra / 360.0 * ncol).astype(np.int64), ncol - 1)
    brickid = (_ROW_START[row] + col + 1).astype(np.int32)
    ra_c = np.where(ncol == 1, 180.0, (col + 0.5) * 360.0 / ncol)
    dec_c = _ROW_DEC[row]
    # Names round centres to 1e-4 deg first so 39.5999999 reads as 0396 (as the survey tools do).
    ra_part = _digits(np.rint(ra_c * 10000).astype(np.int64) // 1000, 4)
    dec_part = _digits(np.rint(np.abs(dec_c) * 10000).astype(np.int64) // 1000, 3)
    sign = np.where(dec_c >= 0, ord("p"), ord("m")).astype(np.uint8)[:, None]
    names = np.ascontiguousarray(np.concatenate([ra_part, sign, dec_part], axis=1)).view("S8").ravel()
    return brickid, names, ra_c, dec_c
