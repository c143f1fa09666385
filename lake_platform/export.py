"""A lake table written in the formats astronomers exchange (FITS, ECSV, VOTable, Parquet) by
astropy's own writers, with each column's unit and description.

Units and descriptions come from the Parquet field metadata (``Lake.write_table`` writes them),
else from the table's contract. Stamps (Arrow fixed-shape tensors) and fixed-size lists become
multidimensional columns; nulls become masked values. What each format keeps:

- ``ecsv`` (``ascii.ecsv``), ``votable`` and ``parquet``: units and descriptions in astropy's
  own places (the ECSV header, each FIELD's ``unit`` and ``DESCRIPTION``, astropy's Parquet header);
- ``votable``: a stamp's axes in VOTable's order (``arraysize`` names the fastest-varying axis
  first: ``101x101x3``), which :func:`read_export` turns back into (band, y, x);
- ``fits``: units as ``TUNITn``; FITS has no standard place for a column's description, so each
  goes in ``TCOMMn`` (the keyword TOPCAT/STIL reads and writes) in ASCII, and :func:`read_export`
  reads them back; a unit FITS does not define (``nmgy``) keeps astropy's name in ``TUNITn``.

Variable-length list columns have no astropy column type and are refused, naming them (choose
columns with ``columns``).
"""

from __future__ import annotations

import os
import tempfile
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from darkhaloscope.errors import InputError

from .contracts import DESCRIPTION_KEY, UNIT_KEY
from .lake import Lake

#: Formats, each with astropy's writer name and the file suffix it is usually given.
FORMATS = {"fits": ("fits", ".fits"), "ecsv": ("ascii.ecsv", ".ecsv"), "votable": ("votable", ".xml")}
FORMATS["parquet"] = ("parquet", ".parquet")


def table_location(lake: Lake, name: str) -> tuple[str, str]:
    """(group, table) of the published table named ``name`` (its asset name, or ``group/name``)."""
    found = [(g, t) for g, t in lake.tables() if name in (t, f"{g}/{t}")]
    if len(found) != 1:
        known = sorted(t for _, t in lake.tables())
        what = "no published table" if not found else f"{len(found)} tables"
        raise InputError(f"{what} named {name!r} in the lake at {lake.uri}; tables: {known}")
    return found[0]


def astropy_table(table: pa.Table, docs: dict[str, tuple[str, str]] | None = None):
    """``table`` as an ``astropy.table.Table``: each column with the unit and description of its
    field metadata (else of ``docs``: {name: (unit, description)}), tensors and fixed-size lists
    as multidimensional columns, nulls masked."""
    import astropy.units as u
    from astropy.table import Column, MaskedColumn, Table

    docs = docs or {}
    out = Table()
    for field, column in zip(table.schema, table.columns):
        column = column.combine_chunks()
        values, mask = _numpy(field, column)
        meta = field.metadata or {}
        unit, description = docs.get(field.name, ("", ""))
        unit = meta.get(UNIT_KEY, unit.encode()).decode() or None
        description = meta.get(DESCRIPTION_KEY, description.encode()).decode() or None
        common = dict(
            name=field.name, unit=u.Unit(unit, parse_strict="warn") if unit else None, description=description
        )
        out[field.name] = Column(values, **common) if mask is None else MaskedColumn(values, mask=mask, **common)
    return out


def _numpy(field: pa.Field, column: pa.Array) -> tuple[np.ndarray, np.ndarray | None]:
    """(values, null mask or None) of one column."""
    t = column.type
    if isinstance(t, pa.FixedShapeTensorType):
        if column.null_count:
            raise InputError(f"column {field.name!r}: a stamp column with nulls cannot be exported")
        return column.to_numpy_ndarray(), None
    if pa.types.is_fixed_size_list(t):
        if column.null_count:
            raise InputError(f"column {field.name!r}: a fixed-size list column with nulls cannot be exported")
        flat = column.flatten().to_numpy(zero_copy_only=False)
        return flat.reshape(len(column), t.list_size), None
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_struct(t) or pa.types.is_map(t):
        raise InputError(
            f"column {field.name!r} is {t}: no FITS, ECSV or VOTable column holds it; export the other columns "
            "(--columns)"
        )
    if pa.types.is_dictionary(t):
        column = column.dictionary_decode()
        t = column.type
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        column = pc.cast(column, pa.string())
        t = column.type
    mask = column.is_null().to_numpy(zero_copy_only=False) if column.null_count else None
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return np.asarray(column.fill_null("").to_pylist(), dtype=str), mask
    if pa.types.is_boolean(t):
        return column.fill_null(False).to_numpy(zero_copy_only=False).astype(bool), mask
    if mask is not None:
        return column.fill_null(0).to_numpy(zero_copy_only=False), mask
    return column.to_numpy(zero_copy_only=False), None


def export_table(lake: Lake, name: str, fmt: str, out: str, columns: list[str] | None = None) -> dict:
    """Write the published table ``name`` (every partition, or the ``columns`` given) to ``out`` in
    ``fmt`` (a key of :data:`FORMATS`) with astropy's writer, committing the file only once it is
    complete; returns {"path", "rows", "columns", "format"}."""
    if fmt not in FORMATS:
        raise InputError(f"export format {fmt!r} is not one of {sorted(FORMATS)}")
    group, table_name = table_location(lake, name)
    dataset = lake.dataset(group, table_name)
    unknown = sorted(set(columns or ()) - set(dataset.schema.names))
    if unknown:
        raise InputError(f"table {name} has no column(s) {unknown}; its columns: {dataset.schema.names}")
    table = dataset.to_table(columns=columns)
    contract = lake.contracts(group, table_name) if lake.contracts else None
    docs = {c.name: (c.unit, c.description) for c in contract.columns} if contract is not None else {}
    result = astropy_table(table, docs)
    result.meta["table"] = f"{group}/{table_name}"
    result.meta["lake"] = lake.uri
    folder = os.path.dirname(os.path.abspath(out))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".dhs-export-", suffix=FORMATS[fmt][1], dir=folder)
    os.close(fd)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result.write(tmp, format=FORMATS[fmt][0], overwrite=True)
        kept = _fits_descriptions(tmp, result) if fmt == "fits" else []
        os.replace(tmp, out)
    except BaseException:
        os.unlink(tmp)
        raise
    # what the format's standard lacks (a unit FITS or VOUnit does not define), once each
    notes = sorted({str(w.message) for w in caught if not (kept and "native FITS format" in str(w.message))})
    if kept:
        notes.append(f"FITS defines no unit {', '.join(kept)}: TUNITn holds astropy's name (astropy reads it back)")
    return {
        "path": os.path.abspath(out),
        "rows": len(result),
        "columns": len(result.colnames),
        "format": fmt,
        "notes": notes,
    }


#: The letters and signs of the registry's descriptions spelled in ASCII, which a FITS header holds.
_ASCII = {
    "σ": "sigma", "Σ": "Sigma", "θ": "theta", "ε": "eps", "μ": "mu", "χ": "chi", "γ": "gamma", "φ": "phi",
    "″": " arcsec", "′": " arcmin", "×": "x", "²": "^2", "√": "sqrt", "−": "-", "–": "-", "≤": "<=", "≥": ">=",
    "≈": "~", "±": "+/-", "…": "...", "·": ".", "₁": "1", "₂": "2", "⟨": "<", "⟩": ">", "§": "section ",
}  # fmt: skip


def fits_text(text: str) -> str:
    """``text`` in printable ASCII for a FITS header: the registry's Greek letters and signs spelled
    out, accents dropped, anything else as ``?``."""
    import unicodedata

    spelled = "".join(_ASCII.get(ch, ch) for ch in text)
    plain = unicodedata.normalize("NFKD", spelled).encode("ascii", "ignore").decode()
    return "".join(ch if " " <= ch <= "~" else "?" for ch in plain)


def _fits_descriptions(path: str, table) -> list[str]:
    """Put each column's description in ``TCOMMn`` of the FITS table HDU (long strings continue),
    and astropy's name of each unit FITS does not define in ``TUNITn`` (astropy's writer leaves
    those out); returns the latter's names."""
    from astropy.io import fits

    written = []
    with fits.open(path, mode="update") as hdul:
        header = hdul[1].header
        for i, name in enumerate(table.colnames, start=1):
            if table[name].description:
                header[f"TCOMM{i}"] = fits_text(table[name].description)
            unit = table[name].unit
            if unit is not None and f"TUNIT{i}" not in header:
                header[f"TUNIT{i}"] = unit.to_string()
                written.append(unit.to_string())
    return sorted(set(written))


def read_export(path: str, fmt: str):
    """The exported file read back with astropy: for FITS, with the ``TCOMMn`` descriptions; a
    unit the format does not define (``nmgy`` in FITS or VOUnit) as astropy's unit of that name."""
    import astropy.units as u
    from astropy.io import fits
    from astropy.table import Table

    with warnings.catch_warnings():
        # a unit the format's standard lacks (FITS, VOUnit) warns and is read as astropy's name below
        warnings.simplefilter("ignore", u.UnitsWarning)
        table = Table.read(path, format=FORMATS[fmt][0])
    header = fits.getheader(path, 1) if fmt == "fits" else {}
    for i, name in enumerate(table.colnames, start=1):
        if f"TCOMM{i}" in header:
            table[name].description = header[f"TCOMM{i}"]
        if table[name].unit is not None:  # the format's reader may have made its own unit of that name
            table[name].unit = u.Unit(table[name].unit.to_string())
        shape = table[name].shape[1:]
        if fmt == "votable" and len(shape) > 1:
            # a VOTable arraysize names the fastest-varying axis first (VOTable 1.4 §2.2), which is how
            # astropy writes it; its reader returns the axes in that order over the same C-order values
            column = table[name]
            table[name] = type(column)(
                np.asarray(column).reshape(len(column), *shape[::-1]),
                name=name,
                unit=column.unit,
                description=column.description,
            )
    return table
