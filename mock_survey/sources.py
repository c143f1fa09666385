"""The mock sky as an image source opened from the mock survey's own files (its settings' JSON form
is read back by ``MockSkySettings.from_dict``, which the science library's
``darkhaloscope.imaging.source_settings.source_opener_from_dict`` takes for the kind ``mock``).

The mock sky is drawn from the sweep files and lens truth the mock survey wrote under its root,
never from the lake: a Spark task or a Pipes worker opens it from the root alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from darkhaloscope.errors import InputError

from .paths import MANIFEST_NAME
from .regional_sky import RegionalMockSky
from .survey import MockSurveyManifest

#: ``kind`` of the mock sky's settings in their JSON form.
KIND = "mock"


@dataclass(frozen=True)
class MockSkySettings:
    """The mock sky of the mock survey generated under ``root`` (an absolute path), with its known
    and hidden lenses painted in and the pixel noise of its seed (an ``ImageSourceOpener``)."""

    root: str

    def to_dict(self) -> dict:
        return {"kind": KIND, "root": self.root}

    @classmethod
    def from_dict(cls, d: dict) -> "MockSkySettings":
        """The settings of ``to_dict``'s JSON form."""
        if d.get("kind") != KIND:
            raise InputError(f"image source settings of kind {d.get('kind')!r} are not the mock sky's ({KIND!r})")
        return cls(root=str(d["root"]))

    def manifest(self) -> MockSurveyManifest:
        path = Path(self.root) / MANIFEST_NAME
        try:
            return MockSurveyManifest.from_json(Path(self.root), json.loads(path.read_text()))
        except OSError as exc:
            raise InputError(
                f"{path}: no mock survey manifest ({exc.strerror or exc}); generate the mock survey first"
            ) from exc
        except (ValueError, KeyError, TypeError) as exc:
            raise InputError(f"{path}: unreadable mock survey manifest: {exc}") from exc

    def open(self, with_maskbits: bool = True, invvar_centre_only: bool = False) -> RegionalMockSky:
        """The mock sky, drawn near the windows asked for (``RegionalMockSky``: the whole survey's
        pixels); it renders every pixel it is asked for, so both options are moot."""
        return RegionalMockSky(self.manifest())
