"""How many injections do the populations' importance weights keep, how well do C's intervals cover
on shared hosts, and how many LensPop-like lenses are there per deg²? No lake needed.

    python -m research.selection_weights [--draws 40000] [--cells 700]

Prints one JSON line: the Kish efficiency (Σw)²/(N Σw²) of draws from the broad proposal weighted to
the ``mock`` and ``lenspop`` populations, over every source parameter and over the ones each
population weights; the 68 % coverage of ``selection_function``'s intervals on synthetic detections
with shared hosts (the generator of tests/test_selection_function.py, 12 hosts per cell and 3–10
hosts per cell), all cells and the k = 0 / k = n cells; and the LensPop-like lens density inside and
outside the injection grid. Run it with PYTHONPATH at another checkout to measure that checkout's
intervals (docs/research note of 2026-11-28).
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from darkhaloscope.evaluation import selection_function


def _kish(w: np.ndarray) -> float:
    return float(w.sum() ** 2 / (w.size * np.sum(w**2)))


def weight_efficiencies(n: int, seed: int = 0) -> dict:
    from darkhaloscope.evaluation import populations as P
    from darkhaloscope.lensing.priors import PROPOSALS

    prop = PROPOSALS["broad"]
    rng = np.random.default_rng(seed)
    c = {k: prop[k].transform(rng.random(n)) for k in P.SOURCE_PARAMETERS}
    c.update(z_s=prop["z_s"].transform(rng.random(n)), z_l=np.full(n, 0.4), theta_e_arcsec=np.full(n, 1.5))
    out = {}
    for name in ("mock", "lenspop"):
        pop = P.named_population(name, prop)
        w = P.importance_weights(pop, c, prop)
        out[name] = {"parameters": list(pop.parameters), "kish_fraction": round(_kish(w), 4)}
    return out


def _shared_host_grid(n_cells: int, seed: int, hosts=(12, 12), per_host=(1, 6)) -> tuple[pa.Table, np.ndarray]:
    """As tests/test_selection_function.py's generator, with the hosts per cell and injections per
    host drawn from the given inclusive ranges."""
    rng = np.random.default_rng(seed)
    truth = np.resize([0.02, 0.1, 0.3, 0.5, 0.7, 0.9, 0.98], n_cells)
    rho = 0.3
    te, host, det = [], [], []
    for c in range(n_cells):
        a, b = truth[c] * (1 - rho) / rho, (1 - truth[c]) * (1 - rho) / rho
        for h in range(int(rng.integers(hosts[0], hosts[1] + 1))):
            p = rng.beta(a, b)
            m = int(rng.integers(per_host[0], per_host[1] + 1))
            te += [float(c)] * m
            host += [f"{c}-{h}"] * m
            det += list(rng.random(m) < p)
    n = len(te)
    bank = pa.table(
        {
            "injection_id": np.arange(n, dtype=np.int64),
            "theta_e_arcsec": te,
            "z_l": np.full(n, 0.3),
            "z_l_bin": np.full(n, 0.3),
            "success": np.ones(n, bool),
            "valid": np.ones(n, bool),
            "score": pa.array(np.where(det, 0.9, 0.1), pa.float32()),
            "host_object_id": host,
        }
    )
    return bank, truth


def coverage(n_cells: int) -> dict:
    thr = pa.table({"name": ["t0.5"], "threshold": [0.5]})
    out = {}
    for label, hosts, per_host in (
        ("12 hosts per cell, 1-6 each", (12, 12), (1, 6)),
        ("3-10 hosts, 1-8 each", (3, 10), (1, 8)),
    ):
        rows = []
        for seed in (3, 4, 5):
            bank, truth = _shared_host_grid(n_cells, seed, hosts, per_host)
            sel = selection_function(bank, thr, theta_e_centres=np.arange(n_cells, dtype=float), z_l_centres=[0.3])
            sel = sel.filter(pc.equal(sel.column("threshold_name"), "t0.5"))
            lo, hi, k, n = (
                np.asarray(sel.column(c).to_pylist(), float) for c in ("ci68_lo", "ci68_hi", "n_detected", "n_valid")
            )
            cov = (lo <= truth) & (truth <= hi)
            edge = (k == 0) | (k == n)
            rows.append(
                {"seed": seed, "all": round(float(cov.mean()), 3), "k_0_or_n": round(float(cov[edge].mean()), 3)}
            )
        out[label] = rows
    return out


def lens_density() -> dict:
    from darkhaloscope.evaluation.populations import grid_edges, lenspop_lens_density

    te, zl = grid_edges(np.arange(0.5, 3.01, 0.25)), grid_edges(np.arange(0.1, 0.91, 0.1))
    inside = lenspop_lens_density(te, zl)
    return {
        "in_grid_per_deg2": round(float(inside.sum()), 2),
        "in_grid_theta_e_ge_0.875_per_deg2": round(float(inside[te[:-1] >= 0.875].sum()), 2),
        "theta_e_below_grid_per_deg2": round(float(lenspop_lens_density([0.0, te[0]], [1e-3, 3.0]).sum()), 2),
        "z_l_beyond_grid_per_deg2": round(float(lenspop_lens_density(te, [zl[-1], 3.0]).sum()), 2),
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--draws", type=int, default=40000)
    ap.add_argument("--cells", type=int, default=700)
    args = ap.parse_args(argv)
    out = {"coverage": coverage(args.cells)}
    try:
        out["weights"] = weight_efficiencies(args.draws)
        out["lenspop_density"] = lens_density()
    except ImportError:  # a checkout before the populations existed: its intervals only
        pass
    print(json.dumps(out))


if __name__ == "__main__":
    main()
