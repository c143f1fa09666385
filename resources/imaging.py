"""Imaging source for cutouts: the mock sky, DR10 coadd bricks, or a Legacy Surveys cutout service.

``DHS_CUTOUT_SOURCE=auto`` uses the coadd bricks of the configured survey (or the mock sky when
DHS_SURVEY=mock); any other value is the base URL of a cutout service (``.../viewer``).
"""

import dagster as dg

from darkhaloscope.imaging.source_settings import ImageSourceSettings
from darkhaloscope.imaging.sources import ImageSource, ImageSourceOpener
from mock_survey.sources import MockSkySettings

from .settings import default
from .survey import SurveyResource


class ImagingResource(dg.ConfigurableResource):
    """``cutout_source``: ``auto`` or the base URL of a Legacy Surveys cutout service; ``layer``: its
    layer; ``max_concurrency`` requests in flight, ``timeout_s`` per-request timeout (s) and
    ``max_retries`` retries (exponential back-off with jitter) of the service client."""

    cutout_source: str = default("DHS_CUTOUT_SOURCE")
    layer: str = "ls-dr10"
    max_concurrency: int = 8
    timeout_s: float = 30.0
    max_retries: int = 4

    def settings(self, survey: SurveyResource) -> ImageSourceOpener:
        """The source's settings, from which any process (a Spark executor, a Pipes subprocess) opens it."""
        if self.cutout_source == "auto" and survey.is_mock:
            return MockSkySettings(root=str(survey.mock_manifest().root))
        return ImageSourceSettings(
            cutout_source=self.cutout_source,
            layer=self.layer,
            max_concurrency=self.max_concurrency,
            timeout_s=self.timeout_s,
            max_retries=self.max_retries,
            survey=survey.location(),
        )

    def source(self, survey: SurveyResource) -> ImageSource:
        """The configured image source (``cutouts(ra, dec, size) -> (CutoutBatch, failures)``)."""
        return self.settings(survey).open()
