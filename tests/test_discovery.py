"""Hidden-lens recovery of a candidate list, on hand-made tables: hits, misses, known and false candidates, S/N bins."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from darkhaloscope.errors import InputError
from darkhaloscope.evaluation.discovery import RECOVERY_SCHEMA, hidden_lens_recovery

ARCSEC = 1 / 3600.0
DEC0 = -2.0
COS = np.cos(np.radians(DEC0))


def hidden():
    # five hidden lenses 1 arcmin apart, arc S/N 1.6, 3, 8, 30 and 120
    return pa.table(
        {
            "object_id": [11, 12, 13, 14, 15],
            "ra": [30.0 + i / 60 for i in range(5)],
            "dec": [DEC0] * 5,
            "arc_snr": [1.6, 3.0, 8.0, 30.0, 120.0],
        }
    )


KNOWN = pa.table({"name": ["K1"], "ra": [31.0], "dec": [DEC0]})


def candidates():
    h = hidden()
    ra = h.column("ra").to_numpy()
    rows = [
        (ra[0], DEC0, 0.99, 1),  # hit, exactly on the lens
        (ra[1] + 1.0 * ARCSEC / COS, DEC0, 0.97, 3),  # hit, 1.0" East
        (ra[2] + 2.0 * ARCSEC / COS, DEC0, 0.96, 4),  # miss, 2" away: a false candidate
        (ra[4], DEC0 + 1.2 * ARCSEC, 0.95, 5),  # hit, 1.2" North
        (ra[4], DEC0 - 0.5 * ARCSEC, 0.98, 2),  # the same lens again, better ranked
        (31.0 + 0.5 * ARCSEC, DEC0, 0.94, 6),  # the known lens
        (35.0, 3.0, 0.93, 7),  # nothing there
    ]
    return pa.table(
        {
            "ra": [r[0] for r in rows],
            "dec": [r[1] for r in rows],
            "score": [r[2] for r in rows],
            "rank": pa.array([r[3] for r in rows], pa.int64()),
        }
    )


def test_recovery_by_snr_and_false_candidates():
    rep = hidden_lens_recovery(candidates(), hidden(), KNOWN)
    assert rep.by_snr.schema.equals(RECOVERY_SCHEMA)
    by = rep.by_snr.to_pydict()
    assert by["snr_lo"] == [0, 2, 5, 10, 20, 50] and by["snr_hi"][-1] == np.inf
    assert by["n_hidden"] == [1, 1, 1, 0, 1, 1]
    assert by["n_recovered"] == [1, 1, 0, 0, 0, 1]
    assert by["recovered_fraction"] == [1.0, 1.0, 0.0, None, 0.0, 1.0]
    assert rep.n_candidates == 7 and rep.n_recovered == 3
    assert rep.candidates.column("match").to_pylist() == [
        "hidden",
        "hidden",
        "false",
        "hidden",
        "hidden",
        "known",
        "false",
    ]
    assert (rep.count("hidden"), rep.count("known"), rep.n_false) == (4, 1, 2)
    h = rep.hidden.to_pydict()
    assert h["recovered"] == [True, True, False, False, True]
    assert h["candidate_rank"] == [1, 3, None, None, 2]  # the best-ranked match of lens 15
    np.testing.assert_allclose([h["separation_arcsec"][i] for i in (0, 1, 4)], [0.0, 1.0, 0.5], atol=1e-6)


def test_radius_and_bins_are_parameters():
    rep = hidden_lens_recovery(candidates(), hidden(), KNOWN, radius_arcsec=2.5, snr_edges=(0, 10, 1000))
    assert rep.by_snr.column("n_recovered").to_pylist() == [3, 1]
    assert rep.n_false == 1
    empty = hidden_lens_recovery(candidates().slice(0, 0), hidden(), KNOWN)
    assert empty.n_recovered == 0 and empty.n_false == 0 and sum(empty.by_snr.column("n_hidden").to_pylist()) == 5


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"radius_arcsec": 0.0}, "radius"),
        ({"snr_edges": (5, 2)}, "edges"),
    ],
)
def test_bad_parameters(kwargs, match):
    with pytest.raises(InputError, match=match):
        hidden_lens_recovery(candidates(), hidden(), KNOWN, **kwargs)


def test_bad_tables():
    with pytest.raises(InputError, match="rank"):
        hidden_lens_recovery(candidates().drop(["rank"]), hidden(), KNOWN)
    with pytest.raises(InputError, match="arc_snr"):
        hidden_lens_recovery(candidates(), hidden().drop(["arc_snr"]), KNOWN)
    bad = candidates().set_column(1, "dec", pa.array([DEC0] * 6 + [95.0]))
    with pytest.raises(InputError, match="candidates row 6"):
        hidden_lens_recovery(bad, hidden(), KNOWN)
