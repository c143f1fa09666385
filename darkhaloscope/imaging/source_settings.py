"""The configured image source as plain settings: what a Spark executor or a Pipes subprocess needs
to open the same source as the Dagster process, without shipping a live client (threads, HTTP
sessions, open files)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..errors import InputError
from ..lake import Lake
from ..survey.location import SurveyLocation
from .sources import ImageSource


@dataclass(frozen=True)
class ImageSourceSettings:
    """``cutout_source``: ``auto`` (the coadd bricks of ``survey``, or the mock sky when it is the
    mock survey) or the base URL of a Legacy Surveys cutout service; for the service, ``layer``,
    ``max_concurrency`` requests in flight, ``timeout_s`` per-request timeout (s) and
    ``max_retries`` retries of its client."""

    cutout_source: str = "auto"
    layer: str = "ls-dr10"
    max_concurrency: int = 8
    timeout_s: float = 30.0
    max_retries: int = 4
    survey: SurveyLocation = field(default_factory=SurveyLocation)

    def to_dict(self) -> dict:
        """JSON-able settings (``from_dict`` reverses it)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ImageSourceSettings":
        try:
            return cls(**{**d, "survey": SurveyLocation(**d.get("survey", {}))})
        except TypeError as exc:
            raise InputError(f"image source settings {sorted(d)}: {exc}") from exc

    def open(self, lake: Lake, with_maskbits: bool = True, invvar_centre_only: bool = False) -> ImageSource:
        """The source (``cutouts(ra, dec, size) -> (CutoutBatch, failures)``); the mock sky is built
        from the ``survey/sweeps`` table of ``lake``. For coadd bricks, ``with_maskbits`` False skips
        the maskbits file (one of a brick's 7 files) and ``invvar_centre_only`` reads the inverse
        variances at the stamp centres only, for readers that use no more (the search)."""
        from .coadd import BrickImageSource
        from .sources import ServiceSource

        if self.cutout_source != "auto":
            return ServiceSource(self.cutout_source, layer=self.layer, max_concurrency=self.max_concurrency,
                                 timeout_s=self.timeout_s, max_retries=self.max_retries)
        if self.survey.is_mock:
            return _mock_sky(self.survey, lake)
        fs, root = self.survey.filesystem()
        return BrickImageSource(root, filesystem=fs, with_maskbits=with_maskbits, invvar_centre_only=invvar_centre_only)


def _mock_sky(survey: SurveyLocation, lake: Lake):
    """The mock sky of the ingested mock survey, with its known and hidden lenses painted in."""
    import pyarrow.parquet as pq

    from ..survey.mock_lenses import mock_sky_with_lenses
    from .mock_sky import MOCK_SKY_COLUMNS

    manifest = survey.mock_manifest()
    catalog = lake.read_table("survey", "sweeps", columns=[*MOCK_SKY_COLUMNS, "object_id", "sweep_file"])
    return mock_sky_with_lenses(catalog, [pq.read_table(p) for p in manifest.lens_truth_paths()], manifest.seed)
