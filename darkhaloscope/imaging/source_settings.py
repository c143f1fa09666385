"""The configured image source of a real survey as plain settings (an
:class:`~darkhaloscope.imaging.sources.ImageSourceOpener`): a Legacy Surveys cutout service, or the
coadd bricks of a DR10 mirror (local or S3); and the one place that opens whichever source a set of
settings in their JSON form describes (:func:`source_opener_from_dict`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable, Mapping

from ..errors import InputError
from ..survey.location import SurveyLocation
from .sources import ImageSource, ImageSourceOpener

#: ``kind`` of these settings in their JSON form.
KIND = "survey"


@dataclass(frozen=True)
class ImageSourceSettings:
    """``cutout_source``: ``auto`` (the coadd bricks of ``survey``) or the base URL of a Legacy
    Surveys cutout service; for the service, ``layer``, ``max_concurrency`` requests in flight,
    ``timeout_s`` per-request timeout (s) and ``max_retries`` retries of its client."""

    cutout_source: str = "auto"
    layer: str = "ls-dr10"
    max_concurrency: int = 8
    timeout_s: float = 30.0
    max_retries: int = 4
    survey: SurveyLocation = field(default_factory=SurveyLocation)

    def to_dict(self) -> dict:
        """JSON-able settings (``from_dict`` reverses it)."""
        return {"kind": KIND, **asdict(self)}

    @classmethod
    def from_dict(cls, d: dict) -> "ImageSourceSettings":
        fields = {k: v for k, v in d.items() if k != "kind"}
        if d.get("kind", KIND) != KIND:
            raise InputError(f"image source settings of kind {d.get('kind')!r} are not a survey's ({KIND!r})")
        try:
            return cls(**{**fields, "survey": SurveyLocation(**fields.get("survey", {}))})
        except TypeError as exc:
            raise InputError(f"image source settings {sorted(d)}: {exc}") from exc

    def open(self, with_maskbits: bool = True, invvar_centre_only: bool = False) -> ImageSource:
        """The source (``cutouts(ra, dec, size) -> (CutoutBatch, failures)``); see
        :class:`~darkhaloscope.imaging.sources.ImageSourceOpener` for the two options."""
        from .coadd import BrickImageSource
        from .sources import ServiceSource

        if self.cutout_source != "auto":
            return ServiceSource(
                self.cutout_source,
                layer=self.layer,
                max_concurrency=self.max_concurrency,
                timeout_s=self.timeout_s,
                max_retries=self.max_retries,
            )
        fs, root = self.survey.filesystem()
        return BrickImageSource(root, filesystem=fs, with_maskbits=with_maskbits, invvar_centre_only=invvar_centre_only)


def source_opener_from_dict(
    d: dict, other_kinds: Mapping[str, Callable[[dict], ImageSourceOpener]] | None = None
) -> ImageSourceOpener:
    """The image-source settings of a JSON form written by their ``to_dict``: a real survey's
    (``kind`` ``survey``, or none), else the settings ``other_kinds[kind]`` reads (the caller's,
    e.g. the mock sky's: ``{mock_survey.sources.KIND: MockSkySettings.from_dict}``); InputError
    naming an unknown kind."""
    kind, others = d.get("kind"), dict(other_kinds or {})
    if kind in (None, KIND):
        return ImageSourceSettings.from_dict(d)
    if kind in others:
        return others[kind](d)
    expected = " or ".join(repr(k) for k in (*others, KIND))
    raise InputError(f"image source settings of unknown kind {kind!r} (expected {expected})")
