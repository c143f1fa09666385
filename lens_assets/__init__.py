"""Dagster assets, checks, sensors and the ``dhs`` command of the lakehouse.

The one place where warnings are filtered on purpose, so that a run's console shows progress and
results only (a quiet console):

* Dagster's beta and preview notices raised from Dagster's own code paths (its Pipes context reads
  ``expected_writer_count``, its selection parser passes ``include_sources``); the assets
  themselves use no beta or preview API. Matched by message, so that importing this package (the
  trainer's Pipes script does) does not import Dagster.
* PySpark's FutureWarning that it "does not yet fully support pandas >= 3": the catalog stage
  exchanges Arrow batches with Spark and never converts through pandas.
"""

import warnings

warnings.filterwarnings("ignore", message=r".* is currently in (beta|preview), and may have breaking changes")
warnings.filterwarnings("ignore", category=FutureWarning, message="PySpark does not yet fully support pandas")
