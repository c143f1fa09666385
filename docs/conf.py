"""Sphinx configuration of the Dark Halo Scope documentation (``make docs``; warnings are errors).

Offline by construction: no intersphinx, no remote images or fonts; the reference pages are
generated from the code by ``docs/_ext/dhs_reference.py`` and the API pages by autodoc.
"""

from __future__ import annotations

import os
import sys

DOCS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(DOCS)
sys.path[:0] = [ROOT, os.path.join(DOCS, "_ext")]

project = "Dark Halo Scope"
author = "The Dark Halo Scope developers"
copyright = "2026, the Dark Halo Scope developers (BSD-3-Clause)"
release = version = "0.1.0"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "dhs_reference",
]
myst_enable_extensions = ["deflist", "colon_fence"]
myst_heading_anchors = 3
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "README.md"]
root_doc = "index"

# autodoc: the packages import without a GPU and without the network; nothing is mocked
autosummary_generate = True
autosummary_imported_members = False
# a package re-exports its modules' names (``__all__``): each is documented where it is defined
autodoc_default_options = {"members": True, "ignore-module-all": True}
autodoc_member_order = "bysource"
autodoc_typehints = "none"
add_module_names = False
suppress_warnings = ["autosummary.import_cycle"]

# offline: no MathJax (it loads from a CDN); formulas are written in Unicode
html_theme = "pydata_sphinx_theme"
html_title = "Dark Halo Scope"
html_static_path = ["_static"]
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": [],
}
html_sidebars = {"**": ["sidebar-nav-bs"]}
html_show_sourcelink = False
html_copy_source = False
