"""The single Definitions object of the lakehouse (workspace.yaml points here)."""

import dagster as dg

from lens_assets.alerting import alerting_defs
from lens_assets.catalog import catalog_defs
from lens_assets.imaging import imaging_defs
from lens_assets.injection import injection_defs
from lens_assets.training import training_defs
from lens_assets.evaluation import evaluation_defs
from lens_assets.survey import survey_defs
from resources import build_resources

defs = dg.Definitions.merge(
    survey_defs,
    catalog_defs,
    imaging_defs,
    injection_defs,
    training_defs,
    evaluation_defs,
    alerting_defs,
    dg.Definitions(resources=build_resources()),
)
