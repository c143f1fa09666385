"""Dark Halo Scope science library.

Pure functions and small classes over numpy, pyarrow, astropy, torch and lenstronomy.
This package never imports dagster: the same code runs in a Spark executor, on a GPU
host, in a notebook and inside the Dagster assets in ``lens_assets``.
"""

__version__ = "0.1.0"
