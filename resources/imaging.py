"""Imaging source for cutouts: the mock sky, DR10 coadd bricks, or a Legacy Surveys cutout service.

``DHS_CUTOUT_SOURCE=auto`` uses the coadd bricks of the configured survey (or the mock sky when
DHS_SURVEY=mock); any other value is the base URL of a cutout service (``.../viewer``).
"""

import numpy as np
import pyarrow.compute as pc
import dagster as dg

from darkhaloscope.imaging.coadd import BrickImageSource
from darkhaloscope.imaging.sources import ImageSource, ServiceSource
from darkhaloscope.lake import Lake

from .survey import SurveyResource

#: Sweep columns the mock sky draws sources from.
MOCK_SKY_COLUMNS = [
    "ra", "dec", "type", "flux_g", "flux_r", "flux_z", "shape_r", "shape_e1", "shape_e2", "sersic",
    "psfsize_g", "psfsize_r", "psfsize_z", "psfdepth_g", "psfdepth_r", "psfdepth_z", "maskbits",
]
#: Mock-survey truth columns -> the lensing engine's names for painting known-lens arcs.
TRUTH_TO_ENGINE = {
    "source_mag_r": "src_mag_r",
    "source_r_sersic_arcsec": "src_r_sersic_arcsec",
    "source_n_sersic": "src_n_sersic",
    "source_e1": "src_e1",
    "source_e2": "src_e2",
    "source_x_arcsec": "src_x_arcsec",
    "source_y_arcsec": "src_y_arcsec",
    "g_minus_r": "src_g_minus_r",
    "r_minus_z": "src_r_minus_z",
}


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
    """The mock sky of the ingested mock survey, with the known lenses' arcs painted in."""
    import pyarrow.parquet as pq

    from darkhaloscope.imaging.mock_sky import MockSky
    from darkhaloscope.lensing.bank import paint_known_lens_arcs

    catalog = lake.read_table("survey", "sweeps", columns=MOCK_SKY_COLUMNS + ["object_id"])
    truth = pq.read_table(f"{survey.root()}/truth/known_lens_truth.parquet")
    truth = truth.rename_columns([TRUTH_TO_ENGINE.get(c, c) for c in truth.column_names])
    # the lens galaxy's own PSF sizes come from its catalog row
    idx = pc.index_in(truth.column("object_id"), catalog.column("object_id"))
    found = idx.is_valid()
    truth = truth.filter(found)
    rows = catalog.take(idx.filter(found))
    psf = np.stack([rows.column(f"psfsize_{b}").to_numpy() for b in "grz"], axis=1)
    arcs = paint_known_lens_arcs(truth, psf) if truth.num_rows else np.zeros((0, 3, 101, 101), np.float32)
    ra = truth.column("ra").to_numpy()
    dec = truth.column("dec").to_numpy()
    extras = [(float(ra[i]), float(dec[i]), arcs[i]) for i in range(truth.num_rows)]
    return MockSky(catalog.drop_columns(["object_id"]), extra_stamps=extras)
