"""Shared test helpers for the catalog stage: this process's local[2] SparkSession and a
vectorised synthetic sweeps generator (also used by benchmarks/bench_negatives.py).

The synthetic table has the lower-cased DR10 sweep columns with rough DR10-like distributions
(TYPE mix, z magnitudes, colours, nobs, maskbits, sizes, ellipticities); it is deterministic in
its ``key`` through darkhaloscope.seeding.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest

from darkhaloscope import sky
from darkhaloscope.ids import object_id
from darkhaloscope.seeding import rng_for

_TYPES = np.array(["PSF", "REX", "EXP", "DEV", "SER"], dtype=object)
_TYPE_P = np.array([0.45, 0.25, 0.12, 0.08, 0.10])
_MASK_BITS = np.array([0, 1, 2, 5, 6, 7, 8, 9, 11, 12, 13, 16])


def synthetic_sweeps(
    n: int,
    key: str = "synthetic",
    ra0: float = 150.0,
    dec0: float = 0.0,
    size_deg: float = 5.0,
    sweep_file: str | None = None,
) -> pa.Table:
    """A sweeps-like Arrow table of ``n`` rows covering [ra0, ra0+size) x [dec0, dec0+size) degrees."""
    rng = rng_for("synthetic-sweeps", key, n)
    sweep_file = sweep_file or f"sweep-{int(ra0):03d}{'m' if dec0 < 0 else 'p'}{int(abs(dec0)):03d}-synthetic.fits"
    ra = ra0 + size_deg * rng.random(n)
    s0, s1 = np.sin(np.radians(dec0)), np.sin(np.radians(dec0 + size_deg))
    dec = np.degrees(np.arcsin(s0 + (s1 - s0) * rng.random(n)))
    types = _TYPES[rng.choice(len(_TYPES), size=n, p=_TYPE_P)]
    mag_z = 24.0 - rng.exponential(1.6, n)
    flux_z = (10 ** (0.4 * (22.5 - mag_z)) + rng.normal(0, 0.3, n)).astype(np.float32)
    r_z = rng.normal(0.6, 0.4, n)
    g_r = rng.normal(0.8, 0.45, n)
    z_w1 = rng.normal(0.3, 0.7, n)
    flux_r = (flux_z * 10 ** (-0.4 * r_z)).astype(np.float32)
    flux_g = (flux_r * 10 ** (-0.4 * g_r)).astype(np.float32)
    flux_w1 = (flux_z * 10 ** (0.4 * z_w1)).astype(np.float32)
    nobs = {
        b: (rng.poisson(lam, n) + rng.integers(0, 2, n)).astype(np.int16)
        for b, lam in (("g", 3.5), ("r", 3.5), ("z", 4.5))
    }
    masked = rng.random(n) < 0.15
    bits = _MASK_BITS[rng.integers(0, len(_MASK_BITS), n)]
    maskbits = np.where(masked, 1 << bits, 0).astype(np.int32)
    is_psf = types == "PSF"
    shape_r = np.where(is_psf, 0.0, rng.lognormal(np.log(0.7), 0.6, n)).astype(np.float32)
    e1 = np.clip(rng.normal(0, 0.25, n), -0.9, 0.9)
    e2 = np.clip(rng.normal(0, 0.25, n), -0.9, 0.9)
    round_ = is_psf | (types == "REX")
    e1 = np.where(round_, 0.0, e1).astype(np.float32)
    e2 = np.where(round_, 0.0, e2).astype(np.float32)
    sersic = np.select(
        [types == "SER", types == "DEV", (types == "EXP") | (types == "REX")],
        [rng.uniform(0.5, 6.0, n), 4.0, 1.0],
        0.0,
    ).astype(np.float32)
    # Bricks of 0.25 deg: id and name from the integer brick grid.
    bra = np.floor(ra / 0.25).astype(np.int64)
    bdec = np.floor((dec + 90) / 0.25).astype(np.int64)
    brickid = bdec * 1440 + bra + 1
    ub, binv = np.unique(brickid, return_inverse=True)
    order = np.argsort(binv, kind="stable")
    objid = np.empty(n, np.int64)
    counts = np.bincount(binv)
    objid[order] = np.arange(n) - np.repeat(np.cumsum(counts) - counts, counts)
    brick_ra, brick_dec = (ub - 1) % 1440 * 0.25, ((ub - 1) // 1440) * 0.25 - 90
    names = np.array(
        [f"{r * 10:04.0f}{'p' if d >= 0 else 'm'}{abs(d) * 10:03.0f}" for r, d in zip(brick_ra, brick_dec)],
        dtype=object,
    )
    release = np.full(n, 10000, np.int16)
    cols = {
        "release": release,
        "brickid": brickid.astype(np.int32),
        "brickname": names[binv],
        "objid": objid.astype(np.int32),
        "type": types,
        "ra": ra,
        "dec": dec,
        "ebv": rng.uniform(0.01, 0.1, n).astype(np.float32),
        "flux_g": flux_g,
        "flux_r": flux_r,
        "flux_z": flux_z,
        "flux_w1": flux_w1,
        **{f"flux_ivar_{b}": rng.uniform(1, 100, n).astype(np.float32) for b in ("g", "r", "z", "w1")},
        **{f"mw_transmission_{b}": rng.uniform(0.8, 1.0, n).astype(np.float32) for b in ("g", "r", "z")},
        **{f"nobs_{b}": v for b, v in nobs.items()},
        **{f"psfsize_{b}": rng.uniform(0.9, 1.8, n).astype(np.float32) for b in ("g", "r", "z")},
        **{f"psfdepth_{b}": rng.lognormal(np.log(500), 0.5, n).astype(np.float32) for b in ("g", "r", "z")},
        **{f"galdepth_{b}": rng.lognormal(np.log(300), 0.5, n).astype(np.float32) for b in ("g", "r", "z")},
        "shape_r": shape_r,
        "shape_e1": e1,
        "shape_e2": e2,
        "sersic": sersic,
        "maskbits": maskbits,
        "fitbits": np.zeros(n, np.int16),
        "healpix_128": sky.healpix_nested(ra, dec, 128),
        "sweep_file": np.full(n, sweep_file, dtype=object),
        "row_index": np.arange(n, dtype=np.int64),
        "object_id": object_id(release, brickid, objid),
    }
    return pa.table({k: pa.array(v, pa.string() if v.dtype == object else None) for k, v in cols.items()})


def known_lenses_table(rows: list[dict]) -> pa.Table:
    """known_lenses table from dicts (missing fields take defaults)."""
    d = {"name": [], "ra": [], "dec": [], "z_lens": [], "grade": [], "kind": [], "reference": []}
    for i, r in enumerate(rows):
        d["name"].append(r.get("name", f"L{i}"))
        d["ra"].append(float(r["ra"]))
        d["dec"].append(float(r["dec"]))
        d["z_lens"].append(r.get("z_lens"))
        d["grade"].append(r.get("grade", "confident"))
        d["kind"].append(r.get("kind", "galaxy"))
        d["reference"].append(r.get("reference", "test"))
    schema = pa.schema(
        [
            ("name", pa.string()),
            ("ra", pa.float64()),
            ("dec", pa.float64()),
            ("z_lens", pa.float64()),
            ("grade", pa.string()),
            ("kind", pa.string()),
            ("reference", pa.string()),
        ]
    )
    return pa.Table.from_pydict(d, schema=schema)


@pytest.fixture
def spark(s3_server):
    """This process's local[2] SparkSession (started on first use, kept for the session and
    stopped at its end by ``tests.conftest``; a test that needs a cluster stops it and the next
    use starts it again). Its Python workers inherit the environment at start-up, so the loopback
    S3 server (and its credentials) comes first."""
    pytest.importorskip("pyspark")
    from darkhaloscope.catalog.spark_conf import spark_session
    from resources.settings import spark_env

    os.environ.setdefault("DHS_SPARK_DRIVER_MEMORY", "1g")
    conf = {
        "spark.sql.shuffle.partitions": "1",
        "spark.default.parallelism": "2",
        "spark.sql.adaptive.enabled": "false",
    }
    return spark_session("local[2]", app_name="dhs-tests", conf=conf, env=spark_env())
