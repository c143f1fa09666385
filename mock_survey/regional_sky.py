"""The mock sky drawn only where it is asked for: the sweep files and lens arcs near the requested
windows, with the pixels of the whole survey's sky.

Drawing the mock sky of a whole survey reads every sweep file and paints every lens's arcs (of
order 10^4 lenses over a few hundred 5°×5° files, the painting by far the larger cost), which a
run that cuts the stamps of one sweep file does not need. So:

* **Once per generated survey** (:func:`survey_sky`, under ``<root>/sky/``, built by the first
  process that opens the sky while the others wait on a lock): the arcs of every lens, painted
  exactly as the sky of the whole survey paints them (the same truth rows in the same batches:
  an arc's last bits depend on the batch it is painted in), and the summary of the whole survey
  that a part of it cannot tell (:meth:`MockSky.survey_summary`: the PSF medians that set the
  noise of a brick without sources of its own, and the bounds of the brick table).
* **Per batch of windows** (:class:`RegionalMockSky`): the sweep files whose box lies within
  :data:`FILE_MARGIN_DEG` of a window's centre — every source that overlaps a rendered tile or
  sets the noise of the brick a window is cut from (its own sources) is there: a brick spans at
  most 0.3°, a source's stamp 34″ — and the arcs of the lenses within :func:`lens_reach_arcsec`
  of a centre (every arc that overlaps a tile the window is cut from; tiles are rendered whole).
  That sky is kept while later windows need nothing else (a sweep file's targets come in brick
  order, so a run over one file, or over neighbouring files, draws rarely).

So every window is rendered exactly as the sky of the whole survey renders it: the same brick
table and brick choice, the same sources in the same order (files in name order, rows in file
order), the same arcs in the same order (truth tables in order, rows in table order), the same
noise — whatever was asked for before, in this process or another.
"""

from __future__ import annotations

import fcntl
import json
import math
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from scipy.spatial import cKDTree

from darkhaloscope.constants import PIXEL_SCALE_ARCSEC, STAMP_SIZE
from darkhaloscope.errors import InputError
from darkhaloscope.imaging.batch import CutoutBatch
from darkhaloscope.imaging.bricks import BrickTable, check_coords
from darkhaloscope.sky import chord_for_arcsec, unit_vectors
from darkhaloscope.survey.sweeps import parse_sweep_filename, read_sweep

from .lenses import lens_arc_stamps
from .sky import MOCK_SKY_COLUMNS, TILE_SIZE, MockSky, mock_sky_noise_key
from .survey import MockSurveyManifest
from .writers import atomic_write

#: Sweep files whose box lies within this of a window's centre [deg] are drawn for it.
FILE_MARGIN_DEG = 1.0
#: Folder under the mock survey root of what the sky of the whole survey is drawn from once.
SKY_DIR = "sky"
SUMMARY_NAME = "summary.json"
#: Side of a painted lens's arc stamp [pixels] (``lens_arc_stamps``).
ARC_SIZE = STAMP_SIZE
_SKY_COLUMNS = [*MOCK_SKY_COLUMNS, "object_id", "sweep_file"]


def lens_reach_arcsec(size: int) -> float:
    """Farthest a painted lens can lie from the centre of a window of ``size`` × ``size`` pixels
    [arcsec] and still add to a tile the window is cut from: the window's half, a tile and the
    arc's half, per axis."""
    return math.sqrt(2.0) * (size // 2 + TILE_SIZE + ARC_SIZE // 2 + 2) * PIXEL_SCALE_ARCSEC


def sweep_files_in_order(manifest: MockSurveyManifest) -> list[Path]:
    """The survey's sweep files in name order: the order of the lake's sweeps partitions, so a tile
    sums its sources in the same order whichever way the catalog was read."""
    return sorted(manifest.sweep_files, key=lambda p: p.name)


def painted_truths(manifest: MockSurveyManifest) -> list[pa.Table]:
    """The lens truth tables (known, then hidden), each with the rows whose lens galaxy is in one
    of the survey's sweep files: the lenses the sky paints."""
    names = pa.array([p.name for p in manifest.sweep_files])
    truths = [pq.read_table(p) for p in manifest.lens_truth_paths()]
    return [t.filter(pc.is_in(t.column("sweep_file"), value_set=names)) for t in truths]


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def survey_sky(manifest: MockSurveyManifest) -> tuple[dict, list[np.ndarray]]:
    """The whole survey's summary (:meth:`MockSky.survey_summary`) and the arcs (N, 3, S, S)
    [nmgy/pixel] of each of :func:`painted_truths`, row for row (memory-mapped); built from every
    sweep file on first use and kept under ``<root>/sky/`` (the summary, written last, records the
    survey's digest)."""
    folder = manifest.root / SKY_DIR
    summary_path = folder / SUMMARY_NAME
    truths = painted_truths(manifest)
    with _locked(folder / ".lock"):
        summary = _read_summary(summary_path)
        if summary is None or summary.get("digest") != manifest.digest:
            catalog = pa.concat_tables(
                [read_sweep(p, columns=MOCK_SKY_COLUMNS) for p in sweep_files_in_order(manifest)]
            )
            for t, truth in enumerate(truths):
                arcs = lens_arc_stamps(truth, catalog.select(_SKY_COLUMNS))
                atomic_write(folder / f"arcs-{t}.npy", lambda tmp, a=arcs: np.save(tmp, a))
            summary = {
                "digest": manifest.digest,
                "n_arcs": [t.num_rows for t in truths],
                **MockSky(catalog.select(MOCK_SKY_COLUMNS)).survey_summary(),
            }
            atomic_write(summary_path, lambda tmp: tmp.write_text(json.dumps(summary, indent=2, sort_keys=True)))
    arcs = [np.load(folder / f"arcs-{t}.npy", mmap_mode="r") for t in range(len(truths))]
    if [len(a) for a in arcs] != summary["n_arcs"]:
        raise InputError(f"{folder}: the painted arcs do not match the lens truth; delete the folder to repaint")
    return summary, arcs


def _read_summary(path: Path) -> dict | None:
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError as exc:
        raise InputError(f"{path}: unreadable mock sky summary ({exc}); delete it to rebuild") from exc


class RegionalMockSky:
    """The mock sky of the survey under ``manifest``, drawn near the windows asked for (module
    doc); an image source (``cutouts``) with the pixels of the whole survey's sky."""

    #: Rendering is deterministic and local: callers need not commit chunks as they arrive.
    checkpoint_chunks = False

    def __init__(self, manifest: MockSurveyManifest):
        summary, self._arcs = survey_sky(manifest)
        if summary["bounds"] is None:
            raise InputError(f"mock survey {manifest.root} has no sources to draw")
        ra0, ra1, dec0, dec1 = summary["bounds"]
        self.bricks = BrickTable.generate((ra0, ra1), (dec0, dec1))
        self.psf = summary["psf"]
        self.key = mock_sky_noise_key(manifest.seed)
        self.files = sweep_files_in_order(manifest)
        boxes = [parse_sweep_filename(p.name) for p in self.files]
        self._ra_min, self._ra_max, self._dec_min, self._dec_max = (
            np.array([getattr(b, k) for b in boxes]) for k in ("ra_min", "ra_max", "dec_min", "dec_max")
        )
        truths = painted_truths(manifest)
        self._lens_pos = [(t.column("ra").to_numpy(), t.column("dec").to_numpy()) for t in truths]
        self._lens_trees = [cKDTree(unit_vectors(ra, dec)) if len(ra) else None for ra, dec in self._lens_pos]
        self._catalogs: dict[str, pa.Table] = {}
        self._sky: MockSky | None = None
        self._drawn_files: frozenset[int] = frozenset()
        self._drawn_lenses: frozenset[tuple[int, int]] = frozenset()

    @property
    def drawn_files(self) -> list[str]:
        """The sweep files (names) of the sky drawn for the last windows."""
        return [self.files[i].name for i in sorted(self._drawn_files)]

    def cutouts(self, ra_deg, dec_deg, size: int = STAMP_SIZE) -> tuple[CutoutBatch, np.ndarray]:
        """As :meth:`MockSky.cutouts`, from the sky of the files and lenses near the windows."""
        ra, dec = check_coords(ra_deg, dec_deg)
        files = self._files_near(ra, dec) or frozenset({0})  # no window near a file: any file's empty sky
        lenses = self._lenses_near(ra, dec, int(size))
        if self._sky is None or not (files <= self._drawn_files and lenses <= self._drawn_lenses):
            self._draw(files, lenses)
        return self._sky.cutouts(ra, dec, size)

    # ------------------------------------------------------------------------------------------
    def _files_near(self, ra: np.ndarray, dec: np.ndarray) -> frozenset[int]:
        """Indices of the files whose box lies within FILE_MARGIN_DEG of any (ra, dec) [deg]."""
        m = FILE_MARGIN_DEG
        near = np.zeros(len(self.files), bool)
        for a, d in zip(ra, dec):
            cos = math.cos(math.radians(min(abs(float(d)) + m, 89.0)))
            # RA distance from a to each box, the short way round
            dra = np.min(
                [np.maximum(np.maximum(self._ra_min - w, w - self._ra_max), 0.0) for w in (a - 360, a, a + 360)], 0
            )
            ddec = np.maximum(np.maximum(self._dec_min - d, d - self._dec_max), 0.0)
            near |= (dra * cos <= m) & (ddec <= m)
        return frozenset(np.flatnonzero(near).tolist())

    def _lenses_near(self, ra: np.ndarray, dec: np.ndarray, size: int) -> frozenset[tuple[int, int]]:
        """(truth table, row) of the lenses within lens_reach_arcsec(size) of any window centre."""
        points = unit_vectors(ra, dec)
        out = set()
        for t, tree in enumerate(self._lens_trees):
            if tree is not None and len(points):
                for rows in tree.query_ball_point(points, chord_for_arcsec(lens_reach_arcsec(size))):
                    out.update((t, int(i)) for i in rows)
        return frozenset(out)

    def _draw(self, files: frozenset[int], lenses: frozenset[tuple[int, int]]) -> None:
        """The sky of ``files`` (indices, drawn in name order) with the arcs of ``lenses`` painted in."""
        paths = [self.files[i] for i in sorted(files)]
        self._catalogs = {
            p.name: self._catalogs.get(p.name) or read_sweep(p, columns=MOCK_SKY_COLUMNS).select(MOCK_SKY_COLUMNS)
            for p in paths
        }
        catalog = pa.concat_tables([self._catalogs[p.name] for p in paths])
        extras = [
            (float(self._lens_pos[t][0][i]), float(self._lens_pos[t][1][i]), self._arcs[t][i])
            for t in range(len(self._arcs))
            for i in sorted(i for tt, i in lenses if tt == t)
        ]
        self._sky = MockSky(catalog, bricks=self.bricks, extra_stamps=extras, key=self.key, survey_psf=self.psf)
        self._drawn_files, self._drawn_lenses = files, lenses
