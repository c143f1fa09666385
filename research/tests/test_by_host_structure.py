"""The ablation's split of its test metrics by host structure, and the mock sky's flag it uses."""

import numpy as np
import pytest

from mock_survey.sky import STRUCTURED_FRACTION, structured_host
from research.ablate_lens_finder import by_host_structure


def test_split_scores_each_kind_on_its_own_rows():
    p_inj = np.array([0.9, 0.8, 0.2, 0.1])
    p_ctrl = np.array([0.1, 0.2, 0.3, 0.4])
    out = by_host_structure(p_inj, p_ctrl, [True, True, False, False], threshold=0.5)
    assert out["structured"] == {"n": 2, "auroc_injections_vs_controls": 1.0, "completeness": 1.0}
    assert out["symmetric"] == {"n": 2, "auroc_injections_vs_controls": 0.0, "completeness": 0.0}


def test_split_rejects_misaligned_flags():
    with pytest.raises(ValueError, match="3 host flags"):
        by_host_structure(np.zeros(4), np.zeros(4), [True] * 3, 0.5)


def test_structured_host_follows_type_fractions():
    rng = np.random.default_rng(0)
    ra, dec = rng.uniform(150, 151, 4000), rng.uniform(2, 3, 4000)
    assert not structured_host(ra, dec, ["PSF"] * 4000).any()
    assert not structured_host(ra, dec, ["REX"] * 4000).any()
    share = structured_host(ra, dec, ["EXP"] * 4000).mean()
    assert abs(share - STRUCTURED_FRACTION["EXP"]) < 0.03
    flags = structured_host(ra, dec, ["exp "] * 4000)
    assert np.array_equal(flags, structured_host(ra, dec, ["EXP"] * 4000))
