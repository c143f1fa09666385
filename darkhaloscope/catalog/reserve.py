"""The closure reserve: a fixed share of the survey's galaxies, chosen by a stable hash of their
object id, that the pipeline never uses as a negative of any kind — no training negative, no
negative a false-positive threshold is measured on, no injection host — while the survey search
still scores them.

It is what keeps the selection function's closure test from leaking into its own thresholds
(issue 48): the mock survey hides its lenses only around reserved galaxies
(``mock_survey.hidden_lenses``), so by construction no hidden lens is a threshold negative, a
training negative or an injection host, however many of them the mock holds. On DR10 the reserve
costs that share of the negatives and nothing else (the search still covers every galaxy).
"""

from __future__ import annotations

import numpy as np

from ..seeding import unit_hash_array

#: Salt of the reserve's hash: a galaxy is reserved when unit_hash(object_id; salt) < the fraction.
RESERVE_SALT = "dhs-closure-reserve-v1"
#: Share of the survey's galaxies the reserve holds (``NegativeSelectionConfig.closure_reserve_fraction``).
DEFAULT_RESERVE_FRACTION = 0.10


def closure_reserved(object_ids, fraction: float = DEFAULT_RESERVE_FRACTION) -> np.ndarray:
    """(N,) bool: which of ``object_ids`` (int64 ``darkhaloscope.ids.object_id``) the reserve holds,
    a pure function of each id (independent of row order, batch or process)."""
    ids = np.asarray(object_ids, dtype=np.int64)
    return unit_hash_array(ids, salt=RESERVE_SALT) < float(fraction)
