"""The README's expected demo output is one generated block (docs/readme_demo.py): it parses, and a
demo's stdout round-trips through it. The end-to-end test compares it with a real demo's headline."""

import importlib.util

import pytest

from tests.conftest import REPO

STDOUT = """[1/2] visual_grades ok in 0.7s rows=0

Demo finished in 597s. Lake: ./lakehouse

Lens finder: validation AUROC 0.9652 (best epoch 24, 28 run)
Gates: core_lr_auc 0.5567 met

Selection function C(theta_E, z_l) at the fpr=1e-2 threshold: completeness [68% interval]
0.5 | 0.1
Hidden-lens recovery: 7 of 10 hidden lenses among 441 candidates (418 known lenses, 16 false candidates). By arc S/N:
arc_snr | n_hidden
"""


def _module():
    spec = importlib.util.spec_from_file_location("readme_demo", REPO / "docs" / "readme_demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_headline_of_a_demo_round_trips_through_the_readme():
    m = _module()
    headline = m.demo_headline(STDOUT)
    assert headline == [
        "Lens finder: validation AUROC 0.9652 (best epoch 24, 28 run)",
        "Gates: core_lr_auc 0.5567 met",
        "Hidden-lens recovery: 7 of 10 hidden lenses among 441 candidates (418 known lenses, 16 false candidates). "
        "By arc S/N:",
    ]
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    rewritten = m.with_headline(readme, headline, "torch 9.9, AVX2, 4 threads")
    assert m.readme_headline(rewritten) == headline and m.readme_machine(rewritten) == "torch 9.9, AVX2, 4 threads"
    assert len(m.readme_headline(readme)) >= 5 and m.readme_machine(readme)  # the README has its block
    with pytest.raises(ValueError, match="not the output of a finished dhs demo"):
        m.demo_headline("[1/2] visual_grades ...\\n")
    with pytest.raises(ValueError, match="no demo headline block"):
        m.readme_headline("# a README without the block\\n")


def test_numbers_on_another_machine_are_compared_within_the_tolerance():
    m = _module()
    shown = ["AUROC 0.9652 (best epoch 24, 28 run)", "57 of 60 lenses, 0.585 of the injections"]
    assert m.close(shown, ["AUROC 0.9601 (best epoch 21, 28 run)", "55 of 60 lenses, 0.610 of the injections"]) == []
    assert m.close(shown, ["AUROC 0.9035 (best epoch 24, 28 run)", shown[1]])  # a stale number
    assert m.close(shown, [shown[0], "57 of 60 known lenses, 0.585 of the injections"])  # other words
    assert m.close(shown, shown[:1]) == ["1 lines where the README shows 2"]
