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
import lens_assets.realism as realism
import lens_assets.search as search
import lens_assets.survey as survey
import lens_assets.training as training
import lens_assets.validation as validation
from io_managers import LakeIOManager
from resources import build_resources

STAGES = (
    survey.survey_defs,
    catalog.catalog_defs,
    imaging.imaging_defs,
    injection.injection_defs,
    training.training_defs,
    evaluation.evaluation_defs,
    realism.realism_defs,
    validation.validation_defs,
    ops.ops_defs,
)


def build_defs(resources: dict) -> dg.Definitions:
    """Every stage's assets, checks and sensors with ``resources`` (tests swap some of them) and,
    unless they name one, the lake IO manager on the ``lake`` resource's lake; the search's
    ``search_scores`` holds the pool of the ``compute`` resource's default search launch.

    A run's steps execute in its run worker's process: a run is one asset over its partitions
    (one step) nearly always, and Dagster's default multiprocess executor would import the
    definitions a second time, in a step process, for each run the daemon or the UI launches;
    runs execute side by side as the run queue allows (``DHS_MAX_CONCURRENT_RUNS``)."""
    resources = {"io_manager": LakeIOManager(**resources["lake"].model_dump()), **resources}
    search_stage = search.search_defs(resources["compute"].search_launch)
    return dg.Definitions.merge(
        *STAGES, search_stage, dg.Definitions(resources=resources, executor=dg.in_process_executor)
    )


defs = build_defs(build_resources())
