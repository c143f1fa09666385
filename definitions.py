"""The single Definitions object of the lakehouse (workspace.yaml points here)."""

import dagster as dg

from lens_assets.survey import survey_defs
from resources import build_resources

defs = dg.Definitions.merge(
    survey_defs,
    dg.Definitions(resources=build_resources()),
)
