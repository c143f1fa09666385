"""Small valid DR10 sweep rows for tests (big-endian FITS layout of the DR10 sweep data model)."""

from pathlib import Path

import numpy as np
from astropy.io import fits

from darkhaloscope.constants import DR10_SWEEP_DIR
from darkhaloscope.survey import sweep_model as sm
from darkhaloscope.survey.sweeps import SweepBox


def dr10_rows(n: int, box: SweepBox = SweepBox(30, 35, -5, 0)) -> np.ndarray:
    """``n`` rows inside ``box`` with unique (release, brickid, objid) on the real brick grid."""
    rows = np.zeros(n, dtype=sm.DR10_SWEEP_DTYPE)
    rows["RA"] = np.linspace(box.ra_min + 0.1, box.ra_max - 0.1, n)
    rows["DEC"] = np.linspace(box.dec_min + 0.1, box.dec_max - 0.1, n)
    bid, bname, _, _ = sm.bricks_for(rows["RA"], rows["DEC"])
    rows["RELEASE"], rows["BRICKID"], rows["BRICKNAME"] = 10000, bid, bname
    rows["OBJID"] = np.arange(n)
    rows["TYPE"] = b"REX"
    rows["FLUX_G"] = np.arange(n, dtype=np.float32)
    rows["FLUX_R"] = np.arange(n, dtype=np.float32)
    rows["MASKBITS"] = 0x10000 + np.arange(n)  # needs more than 16 bits: int32 must survive
    rows["DCHISQ"] = np.arange(5 * n, dtype=np.float32).reshape(n, 5)
    rows["GAIA_DUPLICATED_SOURCE"] = ord("F")
    return rows


def write_sweep(mirror: Path, name: str, n: int = 20, box: SweepBox = SweepBox(30, 35, -5, 0)) -> Path:
    """A DR10 sweep file ``name`` of ``n`` rows (:func:`dr10_rows`) under the DR10 mirror ``mirror``."""
    path = Path(mirror) / DR10_SWEEP_DIR / name
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = dr10_rows(n, box)
    cols = [fits.Column(name=c, format=t, array=rows[c]) for c, t in sm.DR10_SWEEP_COLUMNS if t != "L"]
    fits.HDUList([fits.PrimaryHDU(), fits.BinTableHDU.from_columns(cols)]).writeto(path, overwrite=True)
    return path
