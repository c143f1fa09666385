"""Negative pools N1/N2: the selection cuts on sweep rows, vectorised over Arrow.

The cuts, applied in this order and each counted by the rows it removes, per sweep file:

1. ``dec_footprint``: −18° < δ < 32° (strict on both ends, DECaLS in DR10).
2. ``type``: stripped TYPE in {SER, DEV, REX, EXP}.
3. ``maskbits``: none of bits {1, 5, 6, 7, 11, 12, 13} set.
4. ``nobs``: NOBS_G, NOBS_R and NOBS_Z each >= 3.
5. ``zmag``: z < 20 AB mag, i.e. flux_z > 10 nMgy. flux_z <= 0, NaN or null is rejected; it never
   slips through as a NaN magnitude (a test written as ``isnan(mag) | mag < lim`` would let it).
6. ``known_lens``: farther than 11″ from every known lens (unit-sphere KD-tree, chord radius).
7. ``closure_reserve``: not in the closure reserve (``catalog.reserve``: a stable-hash share of the
   galaxies kept for the selection function's closure test, which the search still covers).

A null in any column a cut reads fails that cut. Surviving rows get the derived columns of
:data:`OBJECT_FIELDS` (magnitudes, colours, HEALPix split, strata) and their pool (N1 or N2).

The same object-column builder (:func:`describe_objects`) and per-cut masks (:func:`cut_masks`)
serve the positives cross-match, so positives and negatives are described and cut identically.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from scipy.spatial import cKDTree

from .. import sky
from ..constants import SPLIT_NSIDE, flux_to_mag, mag_to_flux
from ..errors import InputError
from ..ids import object_id as make_object_id
from .confusers import ConfuserConfig, classify_confusers
from .reserve import DEFAULT_RESERVE_FRACTION, closure_reserved

#: Cut names in the order they are applied (the funnel order).
CUT_STEPS = ("dec_footprint", "type", "maskbits", "nobs", "zmag", "known_lens", "closure_reserve")
#: Cuts a positive is flagged on (all but the footprint and the known-lens exclusion).
QUALITY_CUTS = ("type", "maskbits", "nobs", "zmag")

NOBS_Z_BINS = (("1-2", 1, 2), ("3-5", 3, 5), ("6-10", 6, 10), ("11+", 11, np.iinfo(np.int64).max))
#: nobs_z_bin of rows with nobs_z <= 0 or null (never a negative: they fail the nobs cut).
NOBS_Z_BIN_NONE = "0"
TYPE_BINS = ("SER", "DEV", "REX")
TYPE_BIN_OTHER = "OTHER"

# Columns the cuts cannot run without; everything else in OBJECT_FIELDS is passed through and
# becomes null when absent (older data models such as DR8 lack SERSIC, SHAPE_R and PSFSIZE).
REQUIRED_COLUMNS = ("ra", "dec", "type", "nobs_g", "nobs_r", "nobs_z", "maskbits", "flux_z", "sweep_file", "row_index")

_F32 = pa.float32()
#: Columns describing one sweep source, shared by negatives, positives and the training catalog.
OBJECT_FIELDS: tuple[pa.Field, ...] = (
    pa.field("object_id", pa.int64(), nullable=False),
    pa.field("sweep_file", pa.string(), nullable=False),
    pa.field("row_index", pa.int64(), nullable=False),
    pa.field("release", pa.int32()),
    pa.field("brickid", pa.int32()),
    pa.field("brickname", pa.string()),
    pa.field("objid", pa.int32()),
    pa.field("ra", pa.float64(), nullable=False),
    pa.field("dec", pa.float64(), nullable=False),
    pa.field("type", pa.string()),
    *(pa.field(f"flux_{b}", _F32) for b in ("g", "r", "z", "w1")),
    *(pa.field(f"mag_{b}", _F32) for b in ("g", "r", "z", "w1")),
    pa.field("g_minus_r", _F32),
    pa.field("r_minus_z", _F32),
    pa.field("z_minus_w1", _F32),
    *(pa.field(f"{k}_{b}", _F32) for k in ("psfsize", "psfdepth", "galdepth") for b in ("g", "r", "z")),
    pa.field("ebv", _F32),
    *(pa.field(f"mw_transmission_{b}", _F32) for b in ("g", "r", "z")),
    pa.field("shape_r", _F32),
    pa.field("shape_e1", _F32),
    pa.field("shape_e2", _F32),
    pa.field("sersic", _F32),
    *(pa.field(f"nobs_{b}", pa.int16()) for b in ("g", "r", "z")),
    pa.field("maskbits", pa.int32()),
    pa.field("fitbits", pa.int16()),
    pa.field(f"healpix_{SPLIT_NSIDE}", pa.int64(), nullable=False),
    pa.field("split", pa.string(), nullable=False),
    pa.field("nobs_z_bin", pa.string(), nullable=False),
    pa.field("type_bin", pa.string(), nullable=False),
)
NEGATIVE_SCHEMA = pa.schema(
    [*OBJECT_FIELDS, pa.field("pool", pa.string(), nullable=False), pa.field("confuser_category", pa.string())]
)
#: Columns of a funnel table (see :func:`funnel_table`).
FUNNEL_SCHEMA = pa.schema(
    [
        pa.field("sweep_file", pa.string(), nullable=False),
        pa.field("step_index", pa.int32(), nullable=False),
        pa.field("step", pa.string(), nullable=False),
        pa.field("n_removed", pa.int64(), nullable=False),
        pa.field("n_remaining", pa.int64(), nullable=False),
    ]
)


@dataclass(frozen=True)
class NegativeSelectionConfig:
    """Every knob of the negative selection. Angles in degrees/arcsec as named, magnitudes AB."""

    dec_min: float = -18.0
    dec_max: float = 32.0
    types: frozenset = frozenset({"SER", "DEV", "REX", "EXP"})
    min_nobs: int = 3
    nobs_bands: tuple[str, ...] = ("g", "r", "z")
    zmag_max: float = 20.0
    excluded_maskbits: frozenset = frozenset({1, 5, 6, 7, 11, 12, 13})
    exclusion_radius_arcsec: float = 11.0
    closure_reserve_fraction: float = DEFAULT_RESERVE_FRACTION
    split_fractions: tuple[tuple[str, float], ...] = sky.DEFAULT_SPLIT_FRACTIONS
    confusers: ConfuserConfig = field(default_factory=ConfuserConfig)

    def __post_init__(self) -> None:
        # Accept lists from Dagster config; store frozensets so the config stays hashable.
        object.__setattr__(self, "types", frozenset(str(t).strip() for t in self.types))
        object.__setattr__(self, "excluded_maskbits", frozenset(self.excluded_maskbits))
        object.__setattr__(self, "split_fractions", tuple((str(k), float(v)) for k, v in self.split_fractions))
        if not self.dec_min < self.dec_max:
            raise InputError(f"dec_min {self.dec_min} must be < dec_max {self.dec_max} (degrees)")
        if any((not isinstance(b, int)) or b < 0 or b > 31 for b in self.excluded_maskbits):
            raise InputError(f"excluded_maskbits must be ints in [0, 31], got {sorted(self.excluded_maskbits)!r}")
        if self.exclusion_radius_arcsec < 0:
            raise InputError(f"exclusion_radius_arcsec must be >= 0, got {self.exclusion_radius_arcsec}")
        if not 0.0 <= self.closure_reserve_fraction < 1.0:
            raise InputError(f"closure_reserve_fraction must be in [0, 1), got {self.closure_reserve_fraction}")
        if not np.isclose(sum(f for _, f in self.split_fractions), 1.0):
            raise InputError(f"split fractions must sum to 1, got {self.split_fractions!r}")
        if not self.types:
            raise InputError("types must not be empty")

    @property
    def maskbit_mask(self) -> int:
        """OR of the excluded MASKBITS bits."""
        m = 0
        for b in self.excluded_maskbits:
            m |= 1 << b
        return m

    @property
    def zflux_min(self) -> float:
        """flux_z (nMgy) that a source must exceed: the flux of z = zmag_max."""
        return float(mag_to_flux(self.zmag_max))

    def to_dict(self) -> dict:
        """JSON-friendly dict (sets as sorted lists), for metadata and config hashes."""
        d = asdict(self)
        d["types"] = sorted(self.types)
        d["excluded_maskbits"] = sorted(self.excluded_maskbits)
        d["split_fractions"] = [list(x) for x in self.split_fractions]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "NegativeSelectionConfig":
        """Inverse of :meth:`to_dict` (so a recorded selection can be re-checked as it was run)."""
        d = dict(d)
        d["nobs_bands"] = tuple(d["nobs_bands"])
        d["split_fractions"] = tuple(tuple(x) for x in d["split_fractions"])
        d["confusers"] = ConfuserConfig(**d["confusers"])
        return cls(**d)


class KnownLensIndex:
    """Unit vectors of known lenses and a KD-tree over them (built lazily, rebuilt after pickling).

    Small (thousands of rows), so it is broadcast as is to Spark executors.
    """

    def __init__(self, ra_deg, dec_deg):
        ra = np.asarray(ra_deg, dtype=np.float64)
        dec = np.asarray(dec_deg, dtype=np.float64)
        bad = ~np.isfinite(ra) | ~np.isfinite(dec) | (np.abs(dec) > 90)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InputError(f"known_lenses row {i}: invalid ra={ra[i]!r}, dec={dec[i]!r} (degrees)")
        self.xyz = sky.unit_vectors(ra, dec).reshape(-1, 3)
        self._tree = None

    @classmethod
    def from_table(cls, known_lenses: pa.Table) -> "KnownLensIndex":
        for c in ("ra", "dec"):
            if c not in known_lenses.column_names:
                raise InputError(f"known_lenses table has no column {c!r}")
        return cls(_float(known_lenses, "ra"), _float(known_lenses, "dec"))

    def __len__(self) -> int:
        return len(self.xyz)

    def __getstate__(self):
        return {"xyz": self.xyz}

    def __setstate__(self, state):
        self.xyz = state["xyz"]
        self._tree = None

    @property
    def tree(self) -> cKDTree:
        if self._tree is None:
            self._tree = cKDTree(self.xyz)
        return self._tree

    def within(self, ra_deg, dec_deg, radius_arcsec: float) -> np.ndarray:
        """True where a position is within ``radius_arcsec`` (inclusive) of any known lens."""
        n = len(np.atleast_1d(ra_deg))
        if len(self.xyz) == 0 or n == 0:
            return np.zeros(n, dtype=bool)
        chord = sky.chord_for_arcsec(radius_arcsec)
        # The KD-tree bound is strict; widen it by a hair and apply the inclusive test ourselves.
        d, _ = self.tree.query(sky.unit_vectors(ra_deg, dec_deg), k=1, distance_upper_bound=chord * (1 + 1e-9))
        return d <= chord


# ---------------------------------------------------------------------------------------------
# Column access (defensive normalisation of the few quirks older files have)


def _column(table: pa.Table, name: str) -> pa.ChunkedArray:
    if name not in table.column_names:
        raise InputError(f"sweeps table has no column {name!r} (have {', '.join(table.column_names[:12])}, ...)")
    col = table.column(name)
    return col if isinstance(col, pa.ChunkedArray) else pa.chunked_array([col])


def _float(table: pa.Table, name: str) -> np.ndarray:
    """Numeric column as a numpy array; nulls become NaN (which fails every comparison)."""
    col = _column(table, name)
    if not (pa.types.is_floating(col.type) or pa.types.is_integer(col.type)):
        raise InputError(f"column {name!r} must be numeric, got {col.type}")
    if col.null_count:
        col = pc.cast(col, pa.float64())
    return col.to_numpy()


def _int(table: pa.Table, name: str, null_value: int) -> np.ndarray:
    """Integer column as int64; nulls replaced by ``null_value`` (chosen to fail the cut)."""
    col = _column(table, name)
    if not pa.types.is_integer(col.type):
        raise InputError(f"column {name!r} must be integer, got {col.type}")
    if col.null_count:
        col = pc.fill_null(col, pa.scalar(null_value, col.type))
    return col.to_numpy()


def _maskbits(table: pa.Table, mask: int) -> np.ndarray:
    """MASKBITS as int64; a 16-bit column (DR8) is read as unsigned so bit 15 stays bit 15."""
    col = _column(table, "maskbits")
    if not pa.types.is_integer(col.type):
        raise InputError(f"column 'maskbits' must be integer, got {col.type}")
    if col.null_count:
        col = pc.fill_null(col, pa.scalar(mask, pa.int64()).cast(col.type))
    arr = col.to_numpy()
    if arr.dtype.itemsize == 2:
        arr = arr.view(np.uint16)
    return arr.astype(np.int64, copy=False)


def _types(table: pa.Table) -> pa.ChunkedArray:
    """TYPE as stripped strings (DR8 pads to 4 chars: 'PSF ')."""
    col = _column(table, "type")
    if pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type) or pa.types.is_fixed_size_binary(col.type):
        col = pc.cast(pc.cast(col, pa.binary()), pa.string())
    elif pa.types.is_large_string(col.type) or pa.types.is_dictionary(col.type):
        col = pc.cast(col, pa.string())
    elif not pa.types.is_string(col.type):
        raise InputError(f"column 'type' must be a string, got {col.type}")
    return pc.utf8_trim_whitespace(col)


def as_table(batch: pa.RecordBatch | pa.Table) -> pa.Table:
    if isinstance(batch, pa.RecordBatch):
        return pa.Table.from_batches([batch])
    if isinstance(batch, pa.Table):
        return batch
    raise InputError(f"expected a pyarrow Table or RecordBatch, got {type(batch).__name__}")


# ---------------------------------------------------------------------------------------------
# Cuts


def cut_masks(table: pa.Table, config: NegativeSelectionConfig) -> dict[str, np.ndarray]:
    """Independent pass mask (bool, True = passes) of each cut except ``known_lens``, in CUT_STEPS order."""
    for c in REQUIRED_COLUMNS:
        _column(table, c)
    dec = _float(table, "dec")
    ra = _float(table, "ra")
    bad = ~np.isfinite(ra) | ~np.isfinite(dec)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        where = table.column("sweep_file")[i].as_py()
        raise InputError(f"{where}: non-finite coordinate at row_index {table.column('row_index')[i].as_py()}")
    t = _types(table)
    type_ok = pc.fill_null(pc.is_in(t, value_set=pa.array(sorted(config.types), pa.string())), False)
    nobs_ok = np.ones(table.num_rows, dtype=bool)
    for b in config.nobs_bands:
        nobs_ok &= _int(table, f"nobs_{b}", 0) >= config.min_nobs
    mask = config.maskbit_mask
    return {
        "dec_footprint": (dec > config.dec_min) & (dec < config.dec_max),
        "type": type_ok.to_numpy(zero_copy_only=False),
        "maskbits": (_maskbits(table, mask) & mask) == 0,
        "nobs": nobs_ok,
        "zmag": _float(table, "flux_z") > config.zflux_min,
    }


def _bin_nobs_z(nobs_z: np.ndarray) -> np.ndarray:
    out = np.full(len(nobs_z), NOBS_Z_BIN_NONE, dtype=object)
    for name, lo, hi in NOBS_Z_BINS:
        out[(nobs_z >= lo) & (nobs_z <= hi)] = name
    return out


def _bin_type(types: np.ndarray) -> np.ndarray:
    return np.where(np.isin(types, TYPE_BINS), types, TYPE_BIN_OTHER).astype(object)


def _optional(table: pa.Table, name: str, typ: pa.DataType) -> pa.Array:
    """Pass-through column cast to ``typ``; all-null when the input lacks it (older data models)."""
    if name not in table.column_names:
        return pa.nulls(table.num_rows, typ)
    col = table.column(name)
    if pa.types.is_string(typ):
        if pa.types.is_binary(col.type) or pa.types.is_fixed_size_binary(col.type):
            col = pc.cast(pc.cast(col, pa.binary()), pa.string())
        col = pc.utf8_trim_whitespace(pc.cast(col, pa.string()))
    try:
        return pc.cast(col, typ).combine_chunks()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise InputError(f"column {name!r} of type {col.type} cannot be read as {typ}: {exc}") from exc


def _mag_array(mag: np.ndarray) -> pa.Array:
    return pa.array(mag.astype(np.float32), mask=~np.isfinite(mag))


def _object_ids(table: pa.Table) -> np.ndarray:
    """int64 object ids of sweep rows: the ``object_id`` column, else built from (RELEASE, BRICKID, OBJID)."""
    if "object_id" in table.column_names:
        oid = _int(table, "object_id", -1)
        if (oid < 0).any():
            raise InputError("column 'object_id' has null or negative values")
        return oid
    return make_object_id(_int(table, "release", -1), _int(table, "brickid", -1), _int(table, "objid", -1))


def describe_objects(table: pa.Table, config: NegativeSelectionConfig) -> dict[str, pa.Array]:
    """The :data:`OBJECT_FIELDS` columns of ``table`` (sweep rows), as Arrow arrays by name.

    Magnitudes and colours are null where a flux is <= 0; ``split`` is the split of the source's
    NESTED nside-128 HEALPix pixel (darkhaloscope.sky), recomputed from ra/dec when the input has
    no ``healpix_128`` column.
    """
    n = table.num_rows
    out: dict[str, pa.Array] = {}
    hp_name = f"healpix_{SPLIT_NSIDE}"
    ra = _float(table, "ra")
    dec = _float(table, "dec")
    oid = _object_ids(table)
    types = _types(table)
    types_np = types.to_numpy(zero_copy_only=False).astype(object)
    mags = {
        b: flux_to_mag(_float(table, f"flux_{b}")) if f"flux_{b}" in table.column_names else np.full(n, np.nan)
        for b in ("g", "r", "z", "w1")
    }
    hp = _int(table, hp_name, -1) if hp_name in table.column_names else sky.healpix_nested(ra, dec, SPLIT_NSIDE)
    if (hp < 0).any():
        raise InputError(f"column {hp_name!r} has null or negative values")
    nobs_z = _int(table, "nobs_z", 0)
    for f in OBJECT_FIELDS:
        name = f.name
        if name == "object_id":
            out[name] = pa.array(oid, pa.int64())
        elif name in ("ra", "dec"):
            out[name] = pa.array(ra if name == "ra" else dec, pa.float64())
        elif name == "type":
            out[name] = types.combine_chunks()
        elif name.startswith("mag_"):
            out[name] = _mag_array(mags[name[4:]])
        elif name == "g_minus_r":
            out[name] = _mag_array(mags["g"] - mags["r"])
        elif name == "r_minus_z":
            out[name] = _mag_array(mags["r"] - mags["z"])
        elif name == "z_minus_w1":
            out[name] = _mag_array(mags["z"] - mags["w1"])
        elif name == hp_name:
            out[name] = pa.array(hp, pa.int64())
        elif name == "split":
            out[name] = pa.array(sky.split_for_pixels(hp, config.split_fractions), pa.string())
        elif name == "nobs_z_bin":
            out[name] = pa.array(_bin_nobs_z(nobs_z), pa.string())
        elif name == "type_bin":
            out[name] = pa.array(_bin_type(types_np), pa.string())
        elif name == "maskbits":
            out[name] = pa.array(_maskbits(table, 0).astype(np.int32), pa.int32())
        elif name in ("sweep_file", "row_index"):
            out[name] = _optional(table, name, f.type)
            if out[name].null_count:
                raise InputError(f"column {name!r} has null values")
        else:
            out[name] = _optional(table, name, f.type)
    return out


def confuser_categories(cols: dict[str, pa.Array], config: NegativeSelectionConfig) -> np.ndarray:
    """N2 category (or None) per row of a :func:`describe_objects` result."""

    def f(name):
        return cols[name].to_numpy(zero_copy_only=False).astype(np.float64)

    return classify_confusers(
        cols["type"].to_numpy(zero_copy_only=False).astype(object),
        f("flux_r"),
        f("shape_r"),
        f("shape_e1"),
        f("shape_e2"),
        f("sersic"),
        f("g_minus_r"),
        f("mag_r"),
        config=config.confusers,
    )


def _funnel_counts(files: pa.ChunkedArray, removed: dict[str, np.ndarray]) -> dict[str, dict[str, int]]:
    """Per sweep file: input rows, rows removed by each step, rows selected."""
    enc = pc.dictionary_encode(files).combine_chunks()
    names = enc.dictionary.to_pylist()
    codes = enc.indices.to_numpy(zero_copy_only=False)
    k = len(names)
    n_in = np.bincount(codes, minlength=k)
    result = {}
    counts = {step: np.bincount(codes[mask], minlength=k) for step, mask in removed.items()}
    for j, name in enumerate(names):
        d = {"input": int(n_in[j])}
        left = int(n_in[j])
        for step in CUT_STEPS:
            d[step] = int(counts[step][j])
            left -= d[step]
        d["selected"] = left
        result[name] = d
    return result


def select_negatives(
    batch: pa.RecordBatch | pa.Table,
    known_lenses: KnownLensIndex | pa.Table,
    config: NegativeSelectionConfig = NegativeSelectionConfig(),
) -> tuple[pa.Table, dict[str, dict[str, int]]]:
    """Apply the cuts to sweep rows and describe the survivors.

    Returns ``(negatives, funnel)``: ``negatives`` has :data:`NEGATIVE_SCHEMA` with rows in input
    order; ``funnel`` maps each sweep_file to ``{"input": n, <step>: rows removed by that step, ...,
    "selected": n}`` with the steps of :data:`CUT_STEPS` in order (each step counts only rows that
    survived the previous steps).
    """
    table = as_table(batch)
    rows, funnel = selected_rows(table, known_lenses, config)
    return negatives_from_selected(table.take(pa.array(rows, pa.int64())), config), funnel


def preselection(
    table: pa.Table, config: NegativeSelectionConfig = NegativeSelectionConfig()
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(pass mask, {step: rows that step removed}) of every cut before the known-lens exclusion:
    the galaxies a survey-wide search covers, and the first steps of the negatives' funnel."""
    masks = cut_masks(table, config)
    alive = np.ones(table.num_rows, dtype=bool)
    removed: dict[str, np.ndarray] = {}
    for step in CUT_STEPS[: CUT_STEPS.index("known_lens")]:
        removed[step] = alive & ~masks[step]
        alive &= masks[step]
    return alive, removed


def selected_rows(
    table: pa.Table,
    known_lenses: "KnownLensIndex | pa.Table",
    config: NegativeSelectionConfig = NegativeSelectionConfig(),
) -> tuple[np.ndarray, dict[str, dict[str, int]]]:
    """Row indices of ``table`` that pass every cut, and the funnel (see :func:`select_negatives`)."""
    index = known_lenses if isinstance(known_lenses, KnownLensIndex) else KnownLensIndex.from_table(known_lenses)
    alive, removed = preselection(table, config)
    idx = np.flatnonzero(alive)
    ra = _float(table, "ra")[idx]
    dec = _float(table, "dec")[idx]
    near = index.within(ra, dec, config.exclusion_radius_arcsec)
    removed["known_lens"] = np.zeros(table.num_rows, dtype=bool)
    removed["known_lens"][idx[near]] = True
    idx = idx[~near]
    reserved = closure_reserved(_object_ids(table)[idx], config.closure_reserve_fraction)
    removed["closure_reserve"] = np.zeros(table.num_rows, dtype=bool)
    removed["closure_reserve"][idx[reserved]] = True
    funnel = _funnel_counts(_column(table, "sweep_file"), removed)
    return idx[~reserved], funnel


def negatives_from_selected(selected: pa.Table, config: NegativeSelectionConfig) -> pa.Table:
    """NEGATIVE_SCHEMA table for rows that already passed every cut (pool and confuser category added)."""
    cols = describe_objects(selected, config)
    cat = confuser_categories(cols, config)
    cols["pool"] = pa.array(np.where(cat == None, "N1", "N2").astype(object), pa.string())  # noqa: E711
    cols["confuser_category"] = pa.array(cat, pa.string())
    return pa.Table.from_arrays([cols[f.name] for f in NEGATIVE_SCHEMA], schema=NEGATIVE_SCHEMA)


def merge_funnels(*funnels: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """Sum funnels of several batches (a sweep file split over batches adds up), keys sorted."""
    out: dict[str, dict[str, int]] = {}
    for f in funnels:
        for name, d in f.items():
            acc = out.setdefault(name, {k: 0 for k in ("input", *CUT_STEPS, "selected")})
            for k, v in d.items():
                acc[k] += int(v)
    return {k: out[k] for k in sorted(out)}


def funnel_table(funnel: dict[str, dict[str, int]]) -> pa.Table:
    """Long form of a funnel: one row per (sweep_file, step) with rows removed and remaining."""
    rows = {f.name: [] for f in FUNNEL_SCHEMA}
    for name in sorted(funnel):
        d = funnel[name]
        left = d["input"]
        for i, step in enumerate(CUT_STEPS):
            left -= d[step]
            for k, v in zip(rows, (name, i, step, d[step], left)):
                rows[k].append(v)
    return pa.Table.from_pydict(rows, schema=FUNNEL_SCHEMA)


#: Column of the published funnel holding the selection (JSON of ``NegativeSelectionConfig.to_dict``)
#: the negatives of that sweep file were built with: checks and the positives' flags re-use it.
SELECTION_COLUMN = "selection"


def funnel_with_selection(funnel: dict[str, dict[str, int]], config: NegativeSelectionConfig) -> pa.Table:
    """:func:`funnel_table` plus the selection as run, on every row."""
    table = funnel_table(funnel)
    return table.append_column(
        SELECTION_COLUMN, pa.array([json.dumps(config.to_dict(), sort_keys=True)] * table.num_rows, pa.string())
    )


def recorded_selection(funnel: pa.Table) -> NegativeSelectionConfig:
    """The one selection every partition of a published funnel was built with; InputError when
    partitions were built with different selections (or none is recorded)."""
    if SELECTION_COLUMN not in funnel.column_names or funnel.num_rows == 0:
        raise InputError("selection_funnel records no selection: materialize negatives again")
    found = pc.unique(funnel.column(SELECTION_COLUMN)).to_pylist()
    if len(found) != 1:
        raise InputError(
            f"negatives partitions were built with {len(found)} different selections: materialize negatives (every "
            "partition) again"
        )
    return NegativeSelectionConfig.from_dict(json.loads(found[0]))


def funnel_from_table(table: pa.Table) -> dict[str, dict[str, int]]:
    """Inverse of :func:`funnel_table`; rows repeated for one sweep file (several batches) are summed."""
    last = len(CUT_STEPS) - 1
    out: dict[str, dict[str, int]] = {}
    d = table.to_pydict()
    for name, i, step, rem, left in zip(d["sweep_file"], d["step_index"], d["step"], d["n_removed"], d["n_remaining"]):
        if step not in CUT_STEPS or CUT_STEPS.index(step) != i:
            raise InputError(f"funnel row for {name!r} has unknown step {step!r} at index {i}")
        acc = out.setdefault(name, {k: 0 for k in ("input", *CUT_STEPS, "selected")})
        acc[step] += int(rem)
        if i == 0:
            acc["input"] += int(rem) + int(left)
        if i == last:
            acc["selected"] += int(left)
    return {k: out[k] for k in sorted(out)}
