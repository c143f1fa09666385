"""The ``dhs`` command line of Dark Halo Scope (``dhs.main``); ``__version__`` is the project's
version (pyproject.toml reads it from here)."""

__version__ = "0.1.0"
