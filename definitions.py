"""The single Definitions object of the lakehouse (workspace.yaml points here).

Stage modules are imported as modules so that ``defs`` is the only Definitions object at module
scope (the code server refuses a module with several).
"""

import dagster as dg

import lens_assets.catalog as catalog
import lens_assets.evaluation as evaluation
import lens_assets.imaging as imaging
import lens_assets.injection as injection
import lens_assets.ops as ops
import lens_assets.search as search
import lens_assets.survey as survey
import lens_assets.training as training
from resources import build_resources

STAGES = (
    survey.survey_defs,
    catalog.catalog_defs,
    imaging.imaging_defs,
    injection.injection_defs,
    training.training_defs,
    evaluation.evaluation_defs,
    search.search_defs,
    ops.ops_defs,
)


def build_defs(resources: dict) -> dg.Definitions:
    """Every stage's assets, checks and sensors with ``resources`` (tests swap some of them)."""
    return dg.Definitions.merge(*STAGES, dg.Definitions(resources=resources))


defs = build_defs(build_resources())
