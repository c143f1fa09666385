"""Cutouts per second from local coadd bricks: BrickImageSource vs astropy at its best.

Writes two mock DR10 bricks (g, r, z image + invvar + maskbits, fpack-compressed as DR10's are:
RICE_1, SUBTRACTIVE_DITHER_2, 100² tiles) to benchmarks/out/mock_dr10_rice from the mock sky
(once; reused when present), then cuts 101² stamps at ~125 and at 10 targets per brick,
measuring throughput and peak traced memory (tracemalloc), and at one target per brick (the
training cutouts' density on DR10), measuring throughput:
- BrickImageSource (targets grouped by brick, each file opened once, one band in memory, each
  compression tile a stamp touches decoded once by darkhaloscope.imaging.tiled_fits);
- the peer at its best, what an astropy user would write for the same job: targets grouped by
  brick, each file opened once, ``astropy.wcs`` for the pixel position and ``Cutout2D`` either on
  the decompressed image (``hdu.data``, once per file) or on ``hdu.section`` (astropy decompresses
  only the tiles a stamp touches); the faster of the two is the baseline for each setting;
- for the record, the naive loop (per target, open every file and decompress it whole), timed on
  a few targets since its per-target cost does not depend on targets per brick.
Also times the mock sky rendering the same kind of cutouts without files. Prints one JSON line.
Run on one core: ``taskset -c 0 python -m benchmarks.bench_cutouts``.
"""

from __future__ import annotations

import json
import os
import time
import tracemalloc
from pathlib import Path

import numpy as np

from darkhaloscope.constants import BANDS
from darkhaloscope.imaging.bricks import BrickTable
from darkhaloscope.imaging.coadd import BrickImageSource, coadd_path
from darkhaloscope.seeding import rng_for
from mock_survey.sky import MockSky

OUT = Path(__file__).resolve().parent / "out" / "mock_dr10_rice"
RA0, DEC0 = 150.12, 2.13
SIZE = 101


def mock_catalog(n=19000):
    rng = rng_for("bench-cutouts-catalog")
    types = rng.choice(["PSF", "REX", "EXP", "DEV", "SER"], n, p=[0.45, 0.35, 0.1, 0.05, 0.05])
    return {
        "ra": RA0 + rng.uniform(-0.15, 0.8, n),
        "dec": DEC0 + rng.uniform(-0.2, 0.3, n),
        "type": types,
        "flux_g": 10 ** rng.uniform(-0.3, 1.5, n),
        "flux_r": 10 ** rng.uniform(0, 1.8, n),
        "flux_z": 10 ** rng.uniform(0, 2, n),
        "shape_r": np.where(types == "PSF", 0.0, rng.lognormal(np.log(0.6), 0.5, n)),
        "shape_e1": rng.uniform(-0.3, 0.3, n),
        "shape_e2": rng.uniform(-0.3, 0.3, n),
        "sersic": np.where(types == "SER", rng.uniform(0.8, 5, n), 0.0),
        **{f"psfsize_{b}": np.full(n, f) for b, f in zip(BANDS, (1.5, 1.35, 1.25))},
        **{f"psfdepth_{b}": np.full(n, d) for b, d in zip(BANDS, (2500.0, 900.0, 180.0))},
    }


def ensure_bricks(n_bricks: int = 2):
    """(brick table, the first ``n_bricks`` brick names by RA then Dec, seconds spent writing):
    the bricks' files are written once, compressed as DR10's coadds are (RICE_1, dithered)."""
    table = BrickTable.generate((RA0 - 0.01, RA0 + 0.8), (DEC0 - 0.01, DEC0 + 0.2))
    names = [str(table.brickname[i]) for i in np.lexsort((table.dec, table.ra))[:n_bricks]]
    t0 = time.perf_counter()
    missing = [n for n in names if not os.path.exists(coadd_path(str(OUT), n, "maskbits"))]
    if missing:
        sky = MockSky(mock_catalog(), bricks=table)
        for n in missing:
            sky.write_mock_brick(n, str(OUT), lossless=False)
        table.write_fits(str(OUT / "survey-bricks.fits.gz"))
    return table, names, time.perf_counter() - t0


def targets(table, names, per_brick, key):
    rng = rng_for("bench-cutouts-targets", key)
    ra, dec = [], []
    for n in names:
        w = table.wcs(table.index_of(n))
        x, y = rng.uniform(150, 3450, per_brick), rng.uniform(150, 3450, per_brick)
        r, d = w.pixel_to_world(x, y)
        ra.append(r)
        dec.append(d)
    return np.concatenate(ra), np.concatenate(dec)


def _files(name):
    """The brick's 7 files in the (band image, band invvar) ..., maskbits order of the comparison."""
    paths = [coadd_path(str(OUT), name, k, b) for b in BANDS for k in ("image", "invvar")]
    return paths + [coadd_path(str(OUT), name, "maskbits")]


def naive(table, ra, dec):
    """Per target: open every file of its brick, decompress it whole, cut with astropy Cutout2D."""
    from astropy.io import fits
    from astropy.nddata import Cutout2D
    from astropy.wcs import WCS

    idx = table.bricks_containing(ra, dec)
    out = np.zeros((len(ra), 7, SIZE, SIZE), np.float32)
    for i in range(len(ra)):
        for j, p in enumerate(_files(str(table.brickname[idx[i]]))):
            with fits.open(p) as h:
                x, y = WCS(h[1].header).world_to_pixel_values(ra[i], dec[i])
                out[i, j] = Cutout2D(h[1].data, (float(x), float(y)), SIZE, mode="partial", fill_value=0).data
    return out


def astropy_grouped(table, ra, dec, sections: bool):
    """Per brick, per file: open once, then Cutout2D for each of its targets, on the decompressed
    image (``sections=False``) or on astropy's tile-aware ``hdu.section`` (``sections=True``)."""
    from astropy.io import fits
    from astropy.nddata import Cutout2D
    from astropy.wcs import WCS

    idx = table.bricks_containing(ra, dec)
    out = np.zeros((len(ra), 7, SIZE, SIZE), np.float32)
    for b in np.unique(idx):
        rows = np.flatnonzero(idx == b)
        for j, p in enumerate(_files(str(table.brickname[b]))):
            with fits.open(p) as h:
                xs, ys = WCS(h[1].header).world_to_pixel_values(ra[rows], dec[rows])
                data = h[1].section if sections else h[1].data
                for r, x, y in zip(rows, xs, ys):
                    out[r, j] = Cutout2D(data, (float(x), float(y)), SIZE, mode="partial", fill_value=0).data
    return out


def measure(fn):
    """(result, seconds, peak traced MB): peak memory from one tracemalloc pass, time from a second
    pass without tracing (tracing slows Python allocations, which would penalise astropy's loop)."""
    tracemalloc.start()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    t0 = time.perf_counter()
    res = fn()
    return res, time.perf_counter() - t0, peak / 2**20


def one_per_brick(table, names, src, calls: int = 15) -> dict:
    """The training cutouts' density on DR10 (≈ 99 stamps per sweep file over its ≈ 400 bricks):
    each stamp in a brick of its own, so every file is opened and its header read for one stamp.
    ``calls`` cuts of one target per brick, the files kept in the page cache (a DR10 reader pays
    the disk or network too: this rate is an upper bound); astropy at its best beside it."""
    draws = [targets(table, names, 1, f"one-per-brick-{i}") for i in range(calls)]
    n = sum(len(ra) for ra, _ in draws)
    rates = {}
    for form, cut in (
        ("brick_image_source", lambda ra, dec: src.cutouts(ra, dec, SIZE)),
        ("astropy_data", lambda ra, dec: astropy_grouped(table, ra, dec, False)),
        ("astropy_section", lambda ra, dec: astropy_grouped(table, ra, dec, True)),
    ):
        t0 = time.perf_counter()
        for ra, dec in draws:
            cut(ra, dec)
        rates[form] = round(n / (time.perf_counter() - t0), 1)
    best = max(rates["astropy_data"], rates["astropy_section"])
    return {
        "targets": n,
        "cutouts_per_s": rates["brick_image_source"],
        "astropy_cutouts_per_s": {k: v for k, v in rates.items() if k != "brick_image_source"},
        "speedup_vs_astropy_best": round(rates["brick_image_source"] / best, 2),
    }


def main():
    table, names, t_write = ensure_bricks()
    result = {"bench": "cutouts", "size": SIZE, "bricks": len(names), "mock_brick_write_s": round(t_write, 1)}
    src = BrickImageSource(str(OUT))
    ra_b, dec_b = targets(table, names, 3, "baseline")
    base, t_naive, _ = measure(lambda: naive(table, ra_b, dec_b))
    got, _ = src.cutouts(ra_b, dec_b, SIZE)
    # same pixels as astropy (Cutout2D rounds the centre the same way)
    agree = bool(np.array_equal(got.image[:, 0], base[:, 0]) and np.array_equal(got.invvar[:, 1], base[:, 3]))
    result.update(naive_cutouts_per_s=round(len(ra_b) / t_naive, 2), pixels_agree_with_astropy=agree)
    for per_brick in (125, 10):
        ra, dec = targets(table, names, per_brick, per_brick)
        (b, _), dt, mem = measure(lambda: src.cutouts(ra, dec, SIZE))
        peers = {}
        for form, sections in (("astropy_data", False), ("astropy_section", True)):
            cut, t, m = measure(lambda: astropy_grouped(table, ra, dec, sections))
            assert np.array_equal(cut[:, 0], b.image[:, 0]), f"{form} cut different pixels"
            peers[form] = {"cutouts_per_s": round(len(ra) / t, 1), "peak_mb": round(m, 1)}
        best = max(v["cutouts_per_s"] for v in peers.values())
        rate = len(ra) / dt
        result[f"grouped_{per_brick}_per_brick"] = {
            "targets": len(ra),
            "seconds": round(dt, 2),
            "cutouts_per_s": round(rate, 1),
            "peak_mb": round(mem, 1),
            "astropy": peers,
            "speedup_vs_astropy_best": round(rate / best, 2),
            "speedup_vs_naive": round(rate * t_naive / len(ra_b), 1),
            "one_brick_band_mb": round(3600 * 3600 * 4 / 2**20, 1),
        }
    result["one_per_brick"] = one_per_brick(table, names, src)
    # the mock sky itself (DHS_SURVEY=mock renders cutouts without files): cold tile cache
    sky = MockSky(mock_catalog(), bricks=table)
    ra, dec = targets(table, names, 250, "mock")
    _, dt, mem = measure(lambda: sky.cutouts(ra, dec, SIZE))
    result["mock_sky_500_targets"] = {
        "seconds": round(dt, 2),
        "cutouts_per_s": round(len(ra) / dt, 1),
        "peak_mb": round(mem, 1),
        "catalog_sources": len(mock_catalog()["ra"]),
    }
    result["load_avg_1m"] = round(os.getloadavg()[0], 2)
    result["cpu_affinity"] = sorted(os.sched_getaffinity(0))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
