"""Every ``DHS_`` variable the product reads is declared once, in ``resources/settings.py``, with its
default, meaning and check (the documentation's settings reference lists them from there)."""

import re

from resources.settings import BY_NAME, SETTINGS
from tests.test_dependencies import PRODUCT, REPO


def test_every_variable_the_product_reads_is_declared():
    named = set()
    for package in PRODUCT:
        for path in (REPO / package).rglob("*.py"):
            named |= set(re.findall(r"\bDHS_[A-Z0-9_]*[A-Z0-9]\b", path.read_text(encoding="utf-8")))
    assert named - set(BY_NAME) == set()
    assert len(BY_NAME) == len(SETTINGS)  # declared once
    assert all(s.meaning and s.group for s in SETTINGS)
