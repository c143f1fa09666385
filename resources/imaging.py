"""Imaging source for cutouts: the mock sky, DR10 coadd bricks, or a Legacy Surveys cutout service.

``DHS_CUTOUT_SOURCE=auto`` uses the coadd bricks of the configured survey (or the mock sky when
DHS_SURVEY=mock); any other value is the base URL of a cutout service (``.../viewer``).
"""

import numpy as np
import dagster as dg

from darkhaloscope.imaging.bricks import BrickImageSource, CutoutBatch
from darkhaloscope.lake import Lake

from .survey import SurveyResource

class ServiceSource:
    """Adapts the cutout-service client to the ``cutouts(ra, dec, size) -> CutoutBatch`` interface.

    ``client_options``: keyword arguments of :class:`CutoutServiceClient` (layer, max_concurrency,
    timeout_s, max_retries, ...). Each call opens a client for the requested stamp size and closes
    it (worker threads and HTTP sessions) when the batch is done."""

    def __init__(self, base_url: str, **client_options):
        self.base_url = base_url
        self.client_options = client_options

    def cutouts(self, ra, dec, size: int = 101) -> tuple[CutoutBatch, np.ndarray]:
        """Cutouts and a per-target failure message array ('' = fetched)."""
        from darkhaloscope.imaging.service import CutoutServiceClient

        ra = np.asarray(ra, float)
        dec = np.asarray(dec, float)
        out = CutoutBatch.empty(len(ra), size, with_maskbits=False)
        failed = np.full(len(ra), "", dtype=object)
        with CutoutServiceClient(self.base_url, size=size, **self.client_options) as client:
            outcome = client.fetch_many([(str(i), r, d) for i, (r, d) in enumerate(zip(ra, dec))])
        for res in outcome.results:
            i = int(res.key)
            out.image[i] = res.image
            if res.invvar is not None:
                out.invvar[i] = res.invvar
        for f in outcome.failures:
            failed[int(f.key)] = f"{f.kind}: {f.message}"
        return out, failed


class ImagingResource(dg.ConfigurableResource):
    """``cutout_source``: ``auto`` or the base URL of a Legacy Surveys cutout service; ``layer``: its
    layer; ``max_concurrency`` requests in flight, ``timeout_s`` per-request timeout (s) and
    ``max_retries`` retries (exponential back-off with jitter) of the service client."""

    cutout_source: str = "auto"
    layer: str = "ls-dr10"
    max_concurrency: int = 8
    timeout_s: float = 30.0
    max_retries: int = 4

    def source(self, survey: SurveyResource, lake: Lake):
        """An object with ``cutouts(ra, dec, size)`` returning a CutoutBatch (or (batch, failures))."""
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
