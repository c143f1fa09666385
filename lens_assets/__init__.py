"""Dagster assets, checks, sensors and the ``dhs`` command of the lakehouse.

The one place where warnings are filtered on purpose, so that a run's console shows progress and
results only (DESIGN: a quiet console):

* Dagster's BetaWarning and PreviewWarning raised from Dagster's own code paths (its Pipes
  context reads ``expected_writer_count``, its selection parser passes ``include_sources``); the
  assets themselves use no beta or preview API.
* PySpark's FutureWarning that it "does not yet fully support pandas >= 3": the catalog stage
  exchanges Arrow batches with Spark and never converts through pandas.
"""

import warnings

import dagster as dg

warnings.filterwarnings("ignore", category=dg.BetaWarning)
warnings.filterwarnings("ignore", category=dg.PreviewWarning)
warnings.filterwarnings("ignore", category=FutureWarning, message="PySpark does not yet fully support pandas")
