"""Known lenses from lenscat's bundled catalog."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from darkhaloscope.errors import InputError
from darkhaloscope.survey.known_lenses import KNOWN_LENS_SCHEMA, load_known_lenses, validate_known_lenses


@pytest.fixture(scope="module")
def lenses():
    return load_known_lenses()


def test_bundled_catalog(lenses):
    assert lenses.schema.equals(KNOWN_LENS_SCHEMA)
    assert lenses.num_rows > 30000
    assert set(lenses.column("kind").unique().to_pylist()) == {"galaxy", "group", "cluster"}
    assert set(lenses.column("grade").unique().to_pylist()) == {"confident", "probable"}
    z = lenses.column("z_lens").to_numpy(zero_copy_only=False)
    known = z[~np.isnan(z)]
    assert 10000 < known.size < lenses.num_rows and known.min() >= 0 and known.max() < 10
    ra, dec = lenses.column("ra").to_numpy(), lenses.column("dec").to_numpy()
    assert ra.min() >= 0 and ra.max() < 360 and dec.min() >= -90 and dec.max() <= 90


def test_z_lens_parsing(tmp_path):
    csv = tmp_path / "cat.csv"
    csv.write_text(
        "name,RA [deg],DEC [deg],zlens,type,grading,ref\n"
        "A,10.0,-1.0,not measured,galaxy,confident,r1\n"
        "B,11.0,-2.0,0.49 | 0.49,galaxy,probable,r2\n"
        "C,12.0,-3.0,0.3?,group,probable,r3\n"
        "D,13.0,-4.0,0.55,cluster,confident,r4\n"
        "E,14.0,-5.0,nan | 0.4,galaxy,probable,r5\n"
    )
    t = load_known_lenses(str(csv))
    assert t.column("z_lens").to_pylist() == [None, 0.49, None, 0.55, None]
    assert t.column("name").to_pylist() == ["A", "B", "C", "D", "E"]


def test_bad_coordinates_name_the_lens(tmp_path):
    csv = tmp_path / "cat.csv"
    csv.write_text(
        "name,RA [deg],DEC [deg],zlens,type,grading,ref\nGood,10.0,-1.0,-,galaxy,confident,r\nJ9999+9999,10.0,95.0,-,galaxy,confident,r\n"
    )
    with pytest.raises(InputError, match="J9999"):
        load_known_lenses(str(csv))
    t = pa.table({"name": ["X1", "NaNLens"], "ra": [1.0, float("nan")], "dec": [0.0, 0.0]})
    with pytest.raises(InputError, match="NaNLens"):
        validate_known_lenses(t)
    with pytest.raises(InputError, match="no column"):
        validate_known_lenses(pa.table({"name": ["a"]}))
