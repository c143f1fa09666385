"""Benchmark: the read cost of verifying a lake part on read — a whole-file content hash (sha256,
blake2b, crc32) of a zstd Parquet part against reading that part into Arrow (``pq.read_table``),
both from the page cache (the second read of a file just hashed). Prints one JSON line.

    python -m benchmarks.bench_integrity [--rows 200000]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import tempfile
import time
import zlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def _best(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def _stream_hash(path: str, make) -> str:
    h = make()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def _crc32(path: str) -> int:
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            crc = zlib.crc32(chunk, crc)
    return crc


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=200_000)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    table = pa.table(
        {
            "object_id": np.arange(args.rows, dtype=np.int64),
            "score": rng.random(args.rows),
            "flux_g": rng.normal(size=args.rows).astype(np.float32),
            "stamp": pa.array(list(rng.normal(size=(args.rows // 100, 300)).astype(np.float32)) * 100),
        }
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "part-0.parquet")
        pq.write_table(table, path, compression="zstd")
        size = os.path.getsize(path)
        read = _best(lambda: pq.read_table(path))
        out = {"rows": args.rows, "file_mib": round(size / 2**20, 1), "read_s": round(read, 4)}
        for name, fn in {
            "sha256": lambda: _stream_hash(path, hashlib.sha256),
            "blake2b": lambda: _stream_hash(path, hashlib.blake2b),
            "crc32": lambda: _crc32(path),
        }.items():
            t = _best(fn)
            out[f"{name}_s"] = round(t, 4)
            out[f"{name}_vs_read"] = round(t / read, 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
