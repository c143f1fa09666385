"""Imaging source for cutouts: the mock sky, DR10 coadd bricks, or a Legacy Surveys cutout service.

``DHS_CUTOUT_SOURCE=auto`` uses the coadd bricks of the configured survey (or the mock sky when
DHS_SURVEY=mock); any other value is the base URL of a cutout service (``.../viewer``).
"""

import dagster as dg

from darkhaloscope.imaging.coadd import BrickImageSource
from darkhaloscope.imaging.sources import ImageSource, ServiceSource
from darkhaloscope.lake import Lake

from .survey import SurveyResource


class ImagingResource(dg.ConfigurableResource):
    """``cutout_source``: ``auto`` or the base URL of a Legacy Surveys cutout service; ``layer``: its
    layer; ``max_concurrency`` requests in flight, ``timeout_s`` per-request timeout (s) and
    ``max_retries`` retries (exponential back-off with jitter) of the service client."""

    cutout_source: str = "auto"
    layer: str = "ls-dr10"
    max_concurrency: int = 8
    timeout_s: float = 30.0
    max_retries: int = 4

    def source(self, survey: SurveyResource, lake: Lake) -> ImageSource:
        """The configured image source (``cutouts(ra, dec, size) -> (CutoutBatch, failures)``)."""
        if self.cutout_source != "auto":
            return ServiceSource(
                self.cutout_source, layer=self.layer, max_concurrency=self.max_concurrency,
                timeout_s=self.timeout_s, max_retries=self.max_retries,
            )
        if survey.is_mock:
            return mock_sky_from_lake(survey, lake)
        fs, root = survey.filesystem()
        return BrickImageSource(root, filesystem=fs)


def mock_sky_from_lake(survey: SurveyResource, lake: Lake):
    """The mock sky of the ingested mock survey, with its known and hidden lenses painted in."""
    import pyarrow.parquet as pq

    from darkhaloscope.imaging.mock_sky import MOCK_SKY_COLUMNS
    from darkhaloscope.survey.mock_lenses import mock_sky_with_lenses

    manifest = survey.mock_manifest()
    catalog = lake.read_table("survey", "sweeps", columns=[*MOCK_SKY_COLUMNS, "object_id", "sweep_file"])
    return mock_sky_with_lenses(catalog, [pq.read_table(p) for p in manifest.lens_truth_paths()], manifest.seed)
