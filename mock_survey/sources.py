"""The mock sky as an image source opened from the mock survey's own files, and the one place that
opens whichever source a set of image-source settings describes (the mock sky or a real survey's).

The mock sky is drawn from the sweep files and lens truth the mock survey wrote under its root,
never from the lake: a Spark task or a Pipes worker opens it from the root alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from darkhaloscope.errors import InputError
from darkhaloscope.imaging.source_settings import ImageSourceSettings
from darkhaloscope.imaging.sources import ImageSourceOpener
from darkhaloscope.survey.sweeps import read_sweep

from .lenses import mock_sky_with_lenses
from .paths import MANIFEST_NAME
from .sky import MOCK_SKY_COLUMNS, MockSky
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

    def open(self, with_maskbits: bool = True, invvar_centre_only: bool = False) -> MockSky:
        """The mock sky; it renders every pixel it is asked for, so both options are moot."""
        manifest = self.manifest()
        # the sweep files in name order: the order of the lake's sweeps partitions, so a tile sums
        # its sources in the same order whichever way the catalog was read
        files = sorted(manifest.sweep_files, key=lambda p: p.name)
        catalog = pa.concat_tables([read_sweep(p, columns=MOCK_SKY_COLUMNS) for p in files])
        truths = [pq.read_table(p) for p in manifest.lens_truth_paths()]
        return mock_sky_with_lenses(
            catalog.select([*MOCK_SKY_COLUMNS, "object_id", "sweep_file"]), truths, manifest.seed
        )


def source_opener_from_dict(d: dict) -> ImageSourceOpener:
    """The image-source settings of a JSON form written by ``to_dict`` (the mock sky's or a real
    survey's); InputError naming an unknown kind."""
    kind = d.get("kind")
    if kind == KIND:
        return MockSkySettings(root=str(d["root"]))
    if kind in (None, "survey"):
        return ImageSourceSettings.from_dict(d)
    raise InputError(f"image source settings of unknown kind {kind!r} (expected 'mock' or 'survey')")
