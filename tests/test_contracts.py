"""Contracts catch what they are for: missing or mistyped columns, duplicate keys, out-of-range values."""

import pyarrow as pa

import table_registry
from darkhaloscope.survey.sweeps import read_sweep
from lake_platform.contracts import schema_problems, value_problems
from tests.conftest import require_real_file
from tests.support.sweep_rows import dr10_rows

SWEEPS, NEGATIVES = table_registry.SWEEPS.contract, table_registry.NEGATIVES.contract


def _dr10_sweeps(tmp_path, n: int = 12) -> pa.Table:
    from astropy.io import fits

    from darkhaloscope.survey import sweep_model as sm

    rows = dr10_rows(n)
    cols = [fits.Column(name=c, format=t, array=rows[c]) for c, t in sm.DR10_SWEEP_COLUMNS if t != "L"]
    path = tmp_path / "sweep-030m005-035p000.fits"
    fits.HDUList([fits.PrimaryHDU(), fits.BinTableHDU.from_columns(cols)]).writeto(path)
    return read_sweep(path)


def test_dr10_sweeps_conform_and_each_violation_is_named(tmp_path):
    t = _dr10_sweeps(tmp_path)
    assert schema_problems(t.schema, SWEEPS) == [] and value_problems(t, SWEEPS) == []
    no_flux = t.drop_columns(["flux_z"])
    assert schema_problems(no_flux.schema, SWEEPS) == ["sweeps: missing column 'flux_z' (float)"]
    wrong = t.set_column(t.schema.get_field_index("ra"), "ra", t.column("ra").cast(pa.float32()))
    assert schema_problems(wrong.schema, SWEEPS) == ["sweeps: column 'ra' is float, expected double"]
    # an optional column (absent in DR8) must still have its type when present
    sersic = t.set_column(t.schema.get_field_index("sersic"), "sersic", t.column("sersic").cast(pa.float64()))
    assert schema_problems(sersic.schema, SWEEPS) == ["sweeps: column 'sersic' is double, expected float"]
    dup = pa.concat_tables([t, t.slice(3, 1)])
    assert any("duplicate key (release, brickid, objid)" in p for p in value_problems(dup, SWEEPS))
    dec = t.column("dec").to_pylist()
    dec[5] = 91.0
    bad = t.set_column(t.schema.get_field_index("dec"), "dec", pa.array(dec))
    assert any("1 rows with dec outside [-90.0, 90.0]" in p for p in value_problems(bad, SWEEPS))


def test_real_dr8_sweep_meets_the_sweeps_contract():
    path = require_real_file("sweep-320m005-330p000.fits")
    t = read_sweep(path)
    assert "sersic" not in t.column_names  # DR8 has no SERSIC: optional in the contract, not invented
    assert schema_problems(t.schema, SWEEPS) == [] and value_problems(t, SWEEPS) == []


def test_allowed_values_are_enforced():
    t = pa.table(
        {
            "object_id": pa.array([1, 2], pa.int64()),
            "dec": [0.0, 1.0],
            "ra": [1.0, 2.0],
            "pool": ["N1", "N3"],
            "split": ["train", "test"],
        }
    )
    assert value_problems(t, NEGATIVES) == ["negatives: column 'pool' has values [('N3',)] outside ('N1', 'N2')"]
