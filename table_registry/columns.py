"""The columns the lake's tables share, each declared once with its unit and description.

A table's contract (in its stage's module, ``table_registry/<stage>.py``) lists its columns as
:class:`~lake_platform.contracts.Column` entries: the shared ones from here, the table's own beside
its contract. Where a science-library
module builds the table from an Arrow schema, :func:`from_schema` takes each column's type from
that schema (the code that writes the table) and its unit and description from here, and fails at
import when a column is described nowhere. The reference pages and the Dagster UI's column schema
show these descriptions.

The survey columns follow the DR10 sweep data model (legacysurvey.org/dr10/catalogs and
legacypipe's sweep writer; ``darkhaloscope/survey/sweep_model.py``): lower-cased FITS names,
fluxes in nanomaggies (AB zero point 22.5, not corrected for Galactic extinction), inverse
variances in the inverse square of the value's unit.
"""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa

from darkhaloscope.stamps import STAMP_SHAPE, tensor_type
from darkhaloscope.survey import sweep_model as sm
from lake_platform.contracts import Column

#: Unit strings used across the registry (astropy-style, ASCII).
DEG = "deg"
ARCSEC = "arcsec"
NMGY = "nanomaggy"
NMGY_PIX = "nanomaggy/pixel"
IVAR_NMGY = "1/nanomaggy^2"
MAG = "mag (AB)"
PIX = "pixel"
KMS = "km/s"
RAD = "rad"

#: The stamps' bands, the spatial splits, the Arrow types the contracts use most, and the stamp tensor.
BANDS = ("g", "r", "z")
SPLITS = ("train", "val", "test")
F32, F64, I64, STR, BOOL = pa.float32(), pa.float64(), pa.int64(), pa.string(), pa.bool_()
STAMP = tensor_type(STAMP_SHAPE)

_BAND_NAMES = {
    "g": "g",
    "r": "r",
    "i": "i",
    "z": "z",
    "w1": "WISE W1",
    "w2": "WISE W2",
    "w3": "WISE W3",
    "w4": "WISE W4",
}


def _band(b: str) -> str:
    return _BAND_NAMES[b.lower()]


# --- the DR10 sweep data model -------------------------------------------------------------------
# name pattern (``{b}`` a band) -> (unit, description); the Arrow type comes from sweep_model.
_SWEEP_DOCS: dict[str, tuple[str, str]] = {
    "release": ("", "Legacy Surveys processing release (10000 for DR10, 10002 for rows reprocessed in DR10.1)"),
    "brickid": ("", "brick identifier, 1 to 662174"),
    "brickname": ("", "brick name <AAAa><p|m><BBB>: RA×10 and |Dec|×10 of the brick centre"),
    "objid": ("", "object number within its brick; (release, brickid, objid) identifies an object"),
    "type": ("", "Tractor morphological model: PSF, REX, DEV, EXP, SER or DUP (DR8: COMP instead of SER)"),
    "ra": (DEG, "right ascension (ICRS, J2000)"),
    "dec": (DEG, "declination (ICRS, J2000)"),
    "ra_ivar": ("1/deg^2", "inverse variance of ra"),
    "dec_ivar": ("1/deg^2", "inverse variance of dec"),
    "dchisq": ("", "χ² improvement over no source of the PSF, REX, DEV, EXP and SER models (5 values)"),
    "ebv": ("mag", "Galactic reddening E(B−V) from Schlegel, Finkbeiner & Davis (1998)"),
    "flux_{b}": (NMGY, "model flux in {band}"),
    "flux_ivar_{b}": (IVAR_NMGY, "inverse variance of flux_{b}"),
    "mw_transmission_{b}": ("", "Galactic transmission in {band}, in [0, 1]; dereddened flux = flux / transmission"),
    "nobs_{b}": ("", "number of images that cover the object's central pixel in {band}"),
    "rchisq_{b}": ("", "profile-weighted reduced χ² of the model fit in {band}"),
    "fracflux_{b}": ("", "profile-weighted fraction of the flux from other sources in {band}"),
    "fracmasked_{b}": ("", "profile-weighted fraction of the pixels masked in all images in {band}"),
    "fracin_{b}": ("", "fraction of the model's flux inside the images in {band}"),
    "anymask_{b}": ("", "bitwise OR of the image masks at the central pixel in {band} (ANYMASK bits)"),
    "allmask_{b}": ("", "bitwise AND of the image masks at the central pixel in {band} (ALLMASK bits)"),
    "wisemask_{b}": ("", "WISE bright-star mask bits in {band}"),
    "psfsize_{b}": (ARCSEC, "weighted mean FWHM of the PSF at the object in {band}"),
    "psfdepth_{b}": (IVAR_NMGY, "point-source depth in {band}: the 5σ flux is 5/√psfdepth"),
    "galdepth_{b}": (IVAR_NMGY, "depth in {band} for a round exponential galaxy of half-light radius 0.45″"),
    "wise_coadd_id": ("", "unWISE coadd tile the WISE photometry comes from"),
    "shape_r": (ARCSEC, "half-light radius of the galaxy model"),
    "shape_r_ivar": ("1/arcsec^2", "inverse variance of shape_r"),
    "shape_e1": ("", "ellipticity component ε₁ of the galaxy model, ε = (a−b)/(a+b) e^{2iφ}"),
    "shape_e1_ivar": ("", "inverse variance of shape_e1"),
    "shape_e2": ("", "ellipticity component ε₂ of the galaxy model"),
    "shape_e2_ivar": ("", "inverse variance of shape_e2"),
    "fiberflux_{b}": (NMGY, "flux of this object in a 1.5″-diameter fibre at 1″ seeing in {band}"),
    "fibertotflux_{b}": (NMGY, "flux of all objects in a 1.5″-diameter fibre at 1″ seeing in {band}"),
    "ref_cat": ("", "reference catalog the object was matched to (G2/G3 Gaia, T2 Tycho-2, L3 SGA), else empty"),
    "ref_id": ("", "identifier of the object in ref_cat"),
    "ref_epoch": ("yr", "epoch of the reference catalog's position"),
    "gaia_phot_g_mean_mag": (MAG, "Gaia G magnitude (Vega)"),
    "gaia_phot_g_mean_flux_over_error": ("", "Gaia G flux over its error"),
    "gaia_phot_bp_mean_mag": (MAG, "Gaia BP magnitude (Vega)"),
    "gaia_phot_bp_mean_flux_over_error": ("", "Gaia BP flux over its error"),
    "gaia_phot_rp_mean_mag": (MAG, "Gaia RP magnitude (Vega)"),
    "gaia_phot_rp_mean_flux_over_error": ("", "Gaia RP flux over its error"),
    "gaia_astrometric_excess_noise": ("mas", "Gaia astrometric excess noise"),
    "gaia_duplicated_source": ("", "Gaia duplicated-source flag"),
    "gaia_phot_bp_rp_excess_factor": ("", "Gaia BP/RP excess factor"),
    "gaia_astrometric_sigma5d_max": ("mas", "Gaia longest semi-major axis of the 5-d error ellipsoid"),
    "gaia_astrometric_params_solved": ("", "Gaia astrometric parameters solved (31: 5-parameter solution)"),
    "parallax": ("mas", "parallax from the reference catalog"),
    "parallax_ivar": ("1/mas^2", "inverse variance of parallax"),
    "pmra": ("mas/yr", "proper motion in RA (times cos Dec) from the reference catalog"),
    "pmra_ivar": ("yr^2/mas^2", "inverse variance of pmra"),
    "pmdec": ("mas/yr", "proper motion in Dec from the reference catalog"),
    "pmdec_ivar": ("yr^2/mas^2", "inverse variance of pmdec"),
    "maskbits": ("", "DR10 MASKBITS of the object (bright star, saturation, large galaxy, …); int32 in the lake"),
    "fitbits": ("", "FITBITS: how the object was fitted (forced point source, frozen, Gaia, …)"),
    "sersic": ("", "Sérsic index of the SER model (1 for EXP and REX, 4 for DEV)"),
    "sersic_ivar": ("", "inverse variance of sersic"),
    # DR8 only
    "fracdev": ("", "DR8: fraction of the COMP model's flux in its de Vaucouleurs part"),
    "fracdev_ivar": ("", "DR8: inverse variance of fracdev"),
    "shape{m}_r": (ARCSEC, "DR8: half-light radius of the {model} component"),
    "shape{m}_e1": ("", "DR8: ellipticity component ε₁ of the {model} component"),
    "shape{m}_e2": ("", "DR8: ellipticity component ε₂ of the {model} component"),
    "shape{m}_r_ivar": ("1/arcsec^2", "DR8: inverse variance of shape{m}_r"),
    "shape{m}_e1_ivar": ("", "DR8: inverse variance of shape{m}_e1"),
    "shape{m}_e2_ivar": ("", "DR8: inverse variance of shape{m}_e2"),
    "photsys": ("", "DR8: photometric system, N (BASS/MzLS) or S (DECaLS)"),
}

_DERIVED_DOCS: dict[str, tuple[str, str]] = {
    "healpix_128": ("", "HEALPix pixel of (ra, dec), NESTED, nside 128: the unit of the train/val/test split"),
    "healpix_fine": ("", "HEALPix pixel of (ra, dec), NESTED, nside 8192 (≈26″): the spatial index of a partition"),
    "sweep_file": ("", "name of the sweep file the row comes from (the partition key)"),
    "row_index": ("", "row of the object in its sweep FITS file (0-based)"),
    "object_id": ("", "64-bit object identifier: release << 44 | brickid << 20 | objid (darkhaloscope/ids.py)"),
}


def _sweep_doc(name: str) -> tuple[str, str]:
    """(unit, description) of a lower-case sweep column name, from the patterns above."""
    if name in _SWEEP_DOCS:
        return _SWEEP_DOCS[name]
    if name in _DERIVED_DOCS:
        return _DERIVED_DOCS[name]
    for m, model in (("dev", "de Vaucouleurs"), ("exp", "exponential")):
        for key, (unit, text) in _SWEEP_DOCS.items():
            if "{m}" in key and key.format(m=m) == name:
                return unit, text.format(m=m, model=model)
    head, _, band = name.rpartition("_")
    key = f"{head}_{{b}}"
    if band in _BAND_NAMES and key in _SWEEP_DOCS:
        unit, text = _SWEEP_DOCS[key]
        return unit, text.format(band=_band(band), b=band)
    raise KeyError(f"sweep column {name!r} has no description in table_registry/columns.py")


#: Columns an older release stores with another type (a real DR8 sweep: GAIA_ASTROMETRIC_PARAMS_SOLVED
#: is a signed byte, DR10's data model an unsigned one).
_OTHER_TYPES = {"gaia_astrometric_params_solved": (pa.int8(),)}


def _sweep_columns() -> tuple[Column, ...]:
    """Every column a sweep partition can hold, in DR10 file order, then the DR8-only columns and
    the reader's derived columns; required = the pipeline's core (every supported release has them)."""
    required = {c.lower() for c in (*sm.REQUIRED_COLUMNS, *sm.REQUIRED_DR9PLUS)} - {
        # DR8 lacks them (SHAPEEXP_*/SHAPEDEV_* instead), so they may be absent
        *(f"psfsize_{b}" for b in "grz"),
        "shape_r",
        "shape_e1",
        "shape_e2",
        "sersic",
    }
    dr10 = [c for c, _ in sm.DR10_SWEEP_COLUMNS]
    ordered = dr10 + [c for c, _ in sm.DR8_SWEEP_COLUMNS if c not in dr10]
    tforms = {**dict(sm.DR8_SWEEP_COLUMNS), **dict(sm.DR10_SWEEP_COLUMNS)}
    cols = []
    for fits_name in ordered:
        name = fits_name.lower()
        unit, text = _sweep_doc(name)
        typ = sm.arrow_type_for_tform(tforms[fits_name], fits_name)
        other = tuple(_OTHER_TYPES.get(name, ()))
        cols.append(Column(name, typ, unit, text, required=name in required, other_types=other))
    for name, typ in sm.DERIVED_COLUMNS:
        unit, text = _DERIVED_DOCS[name]
        cols.append(Column(name, typ, unit, text))
    return tuple(cols)


#: The sweeps table: the DR10 sweep data model (DR8-only columns optional), plus the reader's columns.
SWEEP_COLUMNS: tuple[Column, ...] = _sweep_columns()

# --- the pipeline's own shared columns -----------------------------------------------------------
_SPLIT_TEXT = "spatial split of the object's HEALPix pixel (nside 128): train, val or test (70/15/15)"

_SHARED: dict[str, tuple[str, str]] = {
    "split": ("", _SPLIT_TEXT),
    "mag_{b}": (MAG, "{band} magnitude 22.5 − 2.5 log10(flux_{b}), not dereddened; null where the flux is ≤ 0"),
    "g_minus_r": (MAG, "colour mag_g − mag_r"),
    "r_minus_z": (MAG, "colour mag_r − mag_z"),
    "z_minus_w1": (MAG, "colour mag_z − mag_w1"),
    "nobs_z_bin": ("", "stratum of nobs_z: 1-2, 3-5, 6-10 or 11+ (0 when nobs_z ≤ 0)"),
    "type_bin": ("", "stratum of type: SER, DEV, REX or OTHER"),
    "pool": ("", "negative pool: N1 (representative galaxies) or N2 (confusers: rings, edge-on, blue clumpy, large)"),
    "confuser_category": (
        "",
        "N2 confuser category (ring_proxy, edge_on_proxy, blue_clumpy, large_galaxy); null in N1",
    ),
    "label": ("", "1 for a lens (positive), 0 for a non-lens (negative)"),
    "tier": ("", "lens tier: A (confident) or B (probable) from lenscat's grading; A/B/C for a graded candidate"),
    "name": ("", "name of the known lens (lenscat), null for a non-lens"),
    "z_lens": ("", "lens redshift from the catalog, null where unknown"),
    "separation_arcsec": (ARCSEC, "separation between the catalogued lens and its matched sweep source"),
    "in_training_catalog": ("", "whether the object is a row of training_catalog (else a held-out pool negative)"),
    "score": ("", "calibrated lens-finder score in [0, 1] (sigmoid of the mean logit over the scored views / T)"),
    "valid": ("", "whether the row could be scored; an unscorable row keeps a null score and its reason"),
    "invalid_reason": ("", "why the row could not be scored (empty when valid)"),
    "model_version": ("", "the published lens finder's weights sha256 (with the number of views averaged)"),
    "threshold_name": (
        "",
        "name of the score threshold (a row of thresholds): fpr=1e-2, fpr=1e-3, fpr=1e-4, top=0.01%",
    ),
    "threshold": ("", "the score threshold: a row is detected when its score exceeds it"),
    "ci68_lo": ("", "lower end of the 68 % Jeffreys interval"),
    "ci68_hi": ("", "upper end of the 68 % Jeffreys interval"),
    "ci95_lo": ("", "lower end of the 95 % Jeffreys interval"),
    "ci95_hi": ("", "upper end of the 95 % Jeffreys interval"),
    "uri": ("", "location of the published file (a local path or s3:// URI)"),
    "bytes": ("byte", "size of the published file"),
    "image": (NMGY_PIX, "g, r, z stamp [band, y, x], 101×101 pixels of 0.262″, target at pixel (50, 50), North up"),
    "invvar": ("pixel^2/nanomaggy^2", "inverse variance of image, per pixel and band (0: no data)"),
    "dx_pix": (PIX, "sub-pixel offset of the target from the stamp's centre pixel along x"),
    "dy_pix": (PIX, "sub-pixel offset of the target from the stamp's centre pixel along y"),
    "host_object_id": ("", "object_id of the host galaxy the arc is painted on"),
    "theta_e_arcsec": (ARCSEC, "Einstein radius θ_E of the SIE lens"),
    "z_l": ("", "lens redshift z_l"),
    "z_s": ("", "source redshift z_s"),
    "sigma_v_kms": (
        KMS,
        "velocity dispersion σ_v of the SIE lens: the host's own (sigma_v_source); θ_E follows from it",
    ),
    "host_z": ("", "redshift of the host galaxy: its spectroscopic z, else its photo-z median"),
    "host_z_source": ("", "where host_z comes from: spec (SDSS spectrum) or phot (DR10 photo-z)"),
    "sigma_v_source": ("", "where σ_v comes from: measured (SDSS VDISP) or relation (luminosity–σ with its scatter)"),
    "lens_mag_z": (MAG, "dereddened z magnitude of the host galaxy (the lens light)"),
    "z_l_bin": ("", "centre of the grid's z_l bin the host's redshift lies in"),
    "bin": ("", "θ_E bin [lo, hi) in arcsec, or 'all'"),
    "theta_e_lo": (ARCSEC, "lower edge of the θ_E bin (null for 'all')"),
    "theta_e_hi": (ARCSEC, "upper edge of the θ_E bin (null for 'all')"),
    "arc_snr": ("", "matched-filter S/N of the noise-free arc in r against the host's noise: √(Σ arc² · invvar)"),
    "magnification": ("", "total magnification μ of the source: lensed flux over unlensed flux"),
    "src_mag_r": (MAG, "unlensed source magnitude in r"),
    "lensed_mag_r": (MAG, "magnitude of the lensed arc in r"),
    "psf_fwhm_{b}": (ARCSEC, "PSF FWHM of the host in {band} used to render the arc"),
    "psfdepth_{b}": (IVAR_NMGY, "point-source depth in {band}: the 5σ flux is 5/√psfdepth"),
    "psfsize_{b}": (ARCSEC, "weighted mean FWHM of the PSF at the object in {band}"),
    "success": ("", "whether the injection was rendered (else failure_reason says why)"),
    "failure_reason": ("", "why the injection could not be rendered (empty on success)"),
}


def shared(name: str) -> tuple[str, str]:
    """(unit, description) of a column name shared by several tables: the pipeline's own, else the
    DR10 sweep data model's. KeyError naming the column when it is described nowhere."""
    if name in _SHARED:
        return _SHARED[name]
    head, _, band = name.rpartition("_")
    key = f"{head}_{{b}}"
    if band in _BAND_NAMES and key in _SHARED:
        unit, text = _SHARED[key]
        return unit, text.format(band=_band(band), b=band)
    return _sweep_doc(name)


def from_schema(schema: pa.Schema, own: dict[str, tuple[str, str]] | None = None, optional=()) -> tuple[Column, ...]:
    """The columns of a library schema: each field's type from ``schema``, its (unit, description)
    from ``own`` (this table's meaning of the name), else from the shared columns. KeyError when a
    field is described nowhere; ValueError when ``own`` describes a column the schema lacks."""
    own = own or {}
    stray = sorted(set(own) - set(schema.names))
    if stray:
        raise ValueError(f"descriptions of columns the schema lacks: {stray}")
    return tuple(
        Column(f.name, f.type, *(own[f.name] if f.name in own else shared(f.name)), required=f.name not in optional)
        for f in schema
    )


def col(name: str, typ: pa.DataType, unit: str | None = None, description: str | None = None, **kw) -> Column:
    """A column; ``unit`` and ``description`` default to the shared column of that name."""
    if description is None:
        shared_unit, description = shared(name)
        unit = shared_unit if unit is None else unit
    return Column(name, typ, unit or "", description, **kw)


def optional(columns: tuple[Column, ...], *required: str) -> tuple[Column, ...]:
    """``columns`` with every column but ``required`` marked optional (may be absent, typed when present)."""
    return tuple(c if c.name in required else replace(c, required=False) for c in columns)


def described(schema: pa.Schema, own: dict[str, tuple[str, str]]) -> dict[str, tuple[str, str]]:
    """``own`` (unit, description) of ``schema``'s columns, completed by the descriptions its writer
    put in the fields' metadata (``unit``, ``description``)."""
    meta = {
        f.name: (f.metadata.get(b"unit", b"").decode(), f.metadata[b"description"].decode())
        for f in schema
        if f.metadata and b"description" in f.metadata
    }
    return {**meta, **own}
