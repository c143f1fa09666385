"""The embedded mock survey: a deterministic miniature DR10 in the exact DR10 sweep data model.

Layout under an output root (a DR10 mirror, so the real readers run unchanged)::

    <root>/south/sweep/10.1/sweep-<AAA>[pm]<BBB>-<AAA>[pm]<BBB>.fits   5°×5° DR10 blocks
    <root>/truth/known_lens_truth.parquet                            known-lens truth (KNOWN_LENS_TRUTH_SCHEMA)
    <root>/truth/hidden_lens_truth.parquet                           hidden-lens truth (HIDDEN_LENS_TRUTH_SCHEMA)
    <root>/south/sweep/10.1-photo-z/sweep-…-pz.fits                  photo-z sweeps (row-matched companions)
    <root>/south/external/survey-dr10.1-south-specObj-dr16.fits      SDSS spectra matched to the sources,
    <root>/south/external/specObj-dr16.fits                          and the SDSS file they match
    <root>/mock_survey_manifest.json                                 config digest + file list

The generated root lives in a cache folder per profile and seed (``paths.mock_survey_root``);
:class:`MockSurvey` names one realisation and generates it on first use.

Footprint. The default blocks are RA 30–40°, Dec −5–0° (``sweep-030m005-035p000`` and
``sweep-035m005-040p000``): inside DR10-south DECaLS/DES (−18° < δ < 32°, so the same footprint
cuts as the real pipeline apply), at high Galactic latitude (b ≈ −60°, low EBV), and the two
5°×5° blocks with the most lenscat galaxy-scale lenses in that Dec range (≈550 between them;
the XMM-LSS/HSC fields are there), so crossmatch, cutouts and recall have real lenses to find.

What is in the rows (one module per responsibility):

- ``populations``: positions, z-band counts, the TYPE mix, colours, sizes and shapes;
- ``conditions``: smooth fields of NOBS, seeing, depth and EBV, and the measured photometry;
- ``masks``: bright/medium stars, large galaxies and globular clusters, MASKBITS;
- ``lenses``: the real lenscat lenses in the footprint, their lensing truth, and the painting
  of any lens truth into the mock sky;
- ``hidden_lenses``: lenses no catalog lists, around catalog galaxies, spanning arc S/N and θ_E
  (their truth is read by the mock sky and by the discovery report, never by training);
- ``rows``: the block plan (positions, roles, DR10 keys) and the derived sweep columns;
- ``redshifts``: every galaxy's true redshift, its photo-z sweep and the SDSS-matched spectra
  (spec-z and VDISP of bright early types), the lenses' consistent with their truth;
- ``writers``: the sweep FITS and truth Parquet writers.

Determinism: every random draw comes from ``darkhaloscope.seeding.rng_for`` keyed by the config
seed and (block, chunk) or (lens name), so the same config gives byte-identical files and another
seed gives an independent survey (populations, conditions, masks, known-lens truth, hidden lenses;
the mock sky's pixel noise is keyed by the seed too); the known lenses stay at their real lenscat
positions. The sweep rows are written before the hidden lenses are drawn, so the hidden lenses
change the sky, never the catalog.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from darkhaloscope.errors import InputError
from darkhaloscope.ids import object_id
from darkhaloscope.survey.known_lenses import load_known_lenses
from darkhaloscope.survey.location import SurveyLocation
from darkhaloscope.survey.sweeps import SweepBox, read_sweep, sweep_filename

from .hidden_lenses import HOST_COLUMNS, hidden_lens_truth
from .lenses import draw_known_lenses, known_lens_truth_table, known_lenses_in_footprint
from .masks import draw_maskers
from .paths import (
    DEFAULT_MOCK_DIR,
    HIDDEN_LENS_TRUTH_RELPATH,
    KNOWN_LENS_TRUTH_RELPATH,
    MANIFEST_NAME,
    SWEEP_SUBDIR,
    mock_survey_root,
)
from .redshifts import write_redshift_companions
from .rows import BLOCK_DEG, KNOWN_LENS, fill_rows, plan_block
from .writers import atomic_write, write_parquet, write_sweep

#: Version of the sweep rows (written as MOCKVER in every sweep header); change it when they change.
GENERATOR_VERSION = "dhs-mock-survey-6"
#: Version of the truth tables and the sky painted from them (in the config digest); change it when
#: the truth draws, the truth renderer or the sky's galaxies change.
TRUTH_VERSION = "dhs-mock-truth-8"
#: Hidden lenses per profile: 10 in the demo's two files and 400 in the full profile's one, a few
#: per thousand of the negative pool (the demo's share: BENCHMARKS.md, *The demo profile now: 28
#: epochs, channels-last convolutions, 10 hidden lenses per realisation*). Lenses are rarer in the
#: real survey: Collett 2015 (LensPop) predicts 2,400 discoverable in DES's 5,000 deg², so of
#: order 10^4 over DR10's ~20,000 deg² among the ~4.5e7 galaxies the search covers (~2e-4). A
#: discovery test needs a few, but not so many that the held-out negatives hold more true lenses
#: than the false positives their 1e-2 FPR threshold allows: real lenses would then set the
#: threshold (what 40 per demo realisation did: the same section).
PROFILES = {
    "demo": {"n_rows_per_file": 25_000, "blocks": ((30, -5), (35, -5)), "n_hidden_lenses": 10},
    "full": {"n_rows_per_file": 3_000_000, "blocks": ((35, -5),), "n_hidden_lenses": 400},
}


@dataclass(frozen=True)
class MockSurveyConfig:
    """What to generate. ``None`` fields take the profile's value (PROFILES).

    profile: ``demo`` (2 files of 25k rows) or ``full`` (1 file of 3M rows); n_rows_per_file:
    rows per sweep file (known lenses and mock stars included); seed: master seed (an integer
    ≥ 0; each seed is an independent survey); blocks: lower-left (RA, Dec) corners in degrees of
    5°×5° DR10 sweep blocks; chunk_rows: rows generated per random chunk (part of the seed keys,
    so it changes the bytes); n_hidden_lenses: lenses painted into the sky that no catalog lists.
    """

    profile: str = "demo"
    n_rows_per_file: int | None = None
    seed: int = 0
    blocks: tuple[tuple[int, int], ...] | None = None
    chunk_rows: int = 131_072
    n_hidden_lenses: int | None = None

    def resolved(self) -> "MockSurveyConfig":
        if self.profile not in PROFILES:
            raise InputError(f"unknown mock survey profile {self.profile!r}; expected one of {sorted(PROFILES)}")
        if not isinstance(self.seed, (int, np.integer)) or isinstance(self.seed, bool) or self.seed < 0:
            raise InputError(f"mock survey seed must be an integer >= 0, got {self.seed!r}")
        p = PROFILES[self.profile]
        cfg = dataclasses.replace(
            self,
            seed=int(self.seed),
            n_rows_per_file=int(self.n_rows_per_file if self.n_rows_per_file is not None else p["n_rows_per_file"]),
            blocks=tuple((int(a), int(b)) for a, b in (self.blocks if self.blocks is not None else p["blocks"])),
            n_hidden_lenses=int(self.n_hidden_lenses if self.n_hidden_lenses is not None else p["n_hidden_lenses"]),
        )
        for ra, dec in cfg.blocks:
            if (
                ra % BLOCK_DEG
                or dec % BLOCK_DEG
                or not (0 <= ra <= 360 - BLOCK_DEG)
                or not (-90 <= dec <= 90 - BLOCK_DEG)
            ):
                raise InputError(f"mock block ({ra}, {dec}) is not the corner of a 5°x5° DR10 sweep block")
        if len(set(cfg.blocks)) != len(cfg.blocks):
            raise InputError(f"mock blocks repeat: {cfg.blocks}")
        if cfg.n_rows_per_file < 100 or cfg.chunk_rows < 1000:
            raise InputError(
                f"n_rows_per_file ({cfg.n_rows_per_file}) must be >= 100 and chunk_rows ({cfg.chunk_rows}) >= 1000"
            )
        if cfg.n_hidden_lenses < 0:
            raise InputError(f"n_hidden_lenses must be >= 0, got {cfg.n_hidden_lenses}")
        return cfg

    def digest(self) -> str:
        """sha256 of the resolved config (seed included) and the generator versions (hex)."""
        cfg = self.resolved()
        text = json.dumps(
            {"version": GENERATOR_VERSION, "truth_version": TRUTH_VERSION, **dataclasses.asdict(cfg)}, sort_keys=True
        )
        return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class MockSurveyManifest:
    """What ``generate_mock_survey`` wrote: sweep file paths, truth paths, footprint boxes (deg)."""

    root: Path
    sweep_files: tuple[Path, ...]
    truth_path: Path
    hidden_truth_path: Path
    footprint: tuple[SweepBox, ...]
    n_rows: tuple[int, ...]
    n_known_lenses: int
    n_hidden_lenses: int
    seed: int
    digest: str
    companions: tuple[Path, ...] = ()

    def to_json(self) -> dict:
        return {
            "digest": self.digest,
            "generator": GENERATOR_VERSION,
            "seed": self.seed,
            "sweep_files": [str(p.relative_to(self.root)) for p in self.sweep_files],
            "truth": str(self.truth_path.relative_to(self.root)),
            "hidden_truth": str(self.hidden_truth_path.relative_to(self.root)),
            "footprint": [dataclasses.asdict(b) for b in self.footprint],
            "n_rows": list(self.n_rows),
            "n_known_lenses": self.n_known_lenses,
            "n_hidden_lenses": self.n_hidden_lenses,
            "companions": [str(p.relative_to(self.root)) for p in self.companions],
        }

    @classmethod
    def from_json(cls, root: Path, d: dict) -> "MockSurveyManifest":
        return cls(
            root=root,
            sweep_files=tuple(root / p for p in d["sweep_files"]),
            truth_path=root / d["truth"],
            hidden_truth_path=root / d["hidden_truth"],
            footprint=tuple(SweepBox(**b) for b in d["footprint"]),
            n_rows=tuple(d["n_rows"]),
            n_known_lenses=int(d["n_known_lenses"]),
            n_hidden_lenses=int(d["n_hidden_lenses"]),
            seed=int(d["seed"]),
            digest=d["digest"],
            companions=tuple(root / p for p in d.get("companions", [])),
        )

    def lens_truth_paths(self) -> tuple[Path, Path]:
        """The truth tables of the lenses the mock sky paints: known, then hidden."""
        return self.truth_path, self.hidden_truth_path

    def files(self) -> tuple[Path, ...]:
        return self.sweep_files + self.lens_truth_paths() + self.companions


def block_box(block: tuple[int, int]) -> SweepBox:
    """The 5°×5° box (deg) whose lower-left corner is ``block``."""
    ra, dec = block
    return SweepBox(float(ra), float(ra + BLOCK_DEG), float(dec), float(dec + BLOCK_DEG))


def _existing_manifest(root: Path, digest: str) -> MockSurveyManifest | None:
    """The manifest under ``root`` when it records ``digest`` and all its files exist, else None."""
    path = root / MANIFEST_NAME
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
        if data.get("digest") != digest:
            return None
        existing = MockSurveyManifest.from_json(root, data)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InputError(f"{path}: unreadable mock survey manifest: {exc}") from exc
    return existing if all(p.exists() for p in existing.files()) else None


def generate_mock_survey(root: str | os.PathLike, config: MockSurveyConfig | None = None) -> MockSurveyManifest:
    """Write the mock DR10 mirror under ``root`` (see module doc) and return its manifest.

    Idempotent: when ``<root>/mock_survey_manifest.json`` records the same config digest and all
    its files exist, nothing is rewritten. Every file is written to a temporary name and renamed
    into place; the manifest is written last, so an interrupted run is redone next time.
    """
    cfg = (config or MockSurveyConfig()).resolved()
    digest = cfg.digest()
    root = Path(root)
    existing = _existing_manifest(root, digest)
    if existing is not None:
        return existing
    boxes = tuple(block_box(b) for b in cfg.blocks)
    all_lenses = load_known_lenses()
    lenses = known_lenses_in_footprint(boxes, all_lenses)
    draw = draw_known_lenses(lenses, cfg.seed)
    (root / SWEEP_SUBDIR).mkdir(parents=True, exist_ok=True)
    (root / KNOWN_LENS_TRUTH_RELPATH).parent.mkdir(parents=True, exist_ok=True)
    files, nrows, lens_oid, lens_file = _write_sweeps(root / SWEEP_SUBDIR, boxes, cfg, lenses, draw)
    truth = root / KNOWN_LENS_TRUTH_RELPATH
    # the hidden lenses are drawn from the catalog as the real reader returns it, and every arc's S/N
    # is measured against its sky
    catalog = pa.concat_tables([read_sweep(p, columns=HOST_COLUMNS) for p in files])
    known = known_lens_truth_table(lenses, draw, lens_oid, lens_file, catalog)
    write_parquet(truth, known)
    hidden = hidden_lens_truth(catalog, all_lenses, boxes, cfg.n_hidden_lenses, cfg.seed)
    hidden_path = root / HIDDEN_LENS_TRUTH_RELPATH
    write_parquet(hidden_path, hidden)
    companions = write_redshift_companions(root, files, [known, hidden], cfg.seed)
    manifest = MockSurveyManifest(
        root,
        tuple(files),
        truth,
        hidden_path,
        boxes,
        tuple(nrows),
        lenses.num_rows,
        hidden.num_rows,
        cfg.seed,
        digest,
        tuple(companions),
    )
    atomic_write(
        root / MANIFEST_NAME, lambda tmp: tmp.write_text(json.dumps(manifest.to_json(), indent=2, sort_keys=True))
    )
    return manifest


def _write_sweeps(sweep_dir: Path, boxes, cfg: MockSurveyConfig, lenses: pa.Table, draw: dict):
    """One sweep file per block; returns the paths, their row counts, and each known lens's
    object_id and sweep file name."""
    lens_ra, lens_dec = lenses.column("ra").to_numpy(), lenses.column("dec").to_numpy()
    lens_oid = np.zeros(lenses.num_rows, dtype=np.int64)
    lens_file = [""] * lenses.num_rows
    files, nrows = [], []
    for box in boxes:
        maskers = draw_maskers(box, cfg.seed)
        plan = plan_block(box, cfg.n_rows_per_file, cfg.chunk_rows, cfg.seed, maskers, lens_ra, lens_dec)
        path = sweep_dir / sweep_filename(box)
        write_sweep(
            path,
            box,
            len(plan.ra),
            cfg.chunk_rows,
            lambda rows, sl, c: fill_rows(rows, plan, sl, maskers, draw, cfg.seed, c),
            GENERATOR_VERSION,
        )
        sel = plan.role == KNOWN_LENS
        lens_oid[plan.ref[sel]] = object_id(plan.release[sel], plan.brickid[sel], plan.objid[sel])
        for i in plan.ref[sel]:
            lens_file[int(i)] = path.name
        files.append(path)
        nrows.append(len(plan.ra))
    return files, nrows, lens_oid, lens_file


def survey_blocks(n: int) -> tuple[tuple[int, int], ...]:
    """``n`` 5°×5° sweep blocks (lower-left RA, Dec in degrees): the demo's two first, then the rest
    of their Dec row eastwards, then the rows above and below it, all inside the DR10-south
    footprint's −18° < δ < 32° (so the negatives' footprint cut keeps every block)."""
    rows = [-5, 0, -10, 5, -15, 10, 15, 20, 25]
    order = [(ra, dec) for dec in rows for ra in [*range(30, 360, BLOCK_DEG), *range(0, 30, BLOCK_DEG)]]
    if not 1 <= n <= len(order):
        raise InputError(f"the mock survey has 1 to {len(order)} sweep files (5°x5° blocks in −18° < δ < 32°), not {n}")
    return tuple(order[:n])


@dataclass(frozen=True)
class MockSurvey:
    """Which mock survey: ``profile`` and ``seed`` of the realisation, cached under ``cache_dir``
    (generated there on first use); ``n_sweep_files``, ``n_rows_per_file`` and ``n_hidden_lenses``
    override the profile's sizes (None: the profile's). Plain settings, so any process rebuilds the
    same survey."""

    profile: str = "demo"
    cache_dir: str = DEFAULT_MOCK_DIR
    seed: int = 0
    n_sweep_files: int | None = None
    n_rows_per_file: int | None = None
    n_hidden_lenses: int | None = None

    def config(self) -> MockSurveyConfig:
        blocks = None if self.n_sweep_files is None else survey_blocks(self.n_sweep_files)
        return MockSurveyConfig(
            profile=self.profile,
            seed=self.seed,
            blocks=blocks,
            n_rows_per_file=self.n_rows_per_file,
            n_hidden_lenses=self.n_hidden_lenses,
        )

    def manifest(self) -> MockSurveyManifest:
        """The mock survey's manifest, generating the survey on first use (a survey of other sizes
        is generated in its own folder, so two sizes never share files)."""
        config = self.config()
        root = mock_survey_root(self.cache_dir, self.profile, self.seed)
        if config.resolved() != MockSurveyConfig(profile=self.profile, seed=self.seed).resolved():
            root = root.with_name(f"{root.name}-{config.digest()[:12]}")
        return generate_mock_survey(root, config)

    def location(self) -> SurveyLocation:
        """The generated mock survey as the DR10 mirror it is laid out as."""
        return SurveyLocation(root=str(self.manifest().root))

    def origin(self) -> dict:
        """What the lake's catalogs come from, recorded with the sweep manifest: this realisation
        (and its sizes where they are not the profile's)."""
        sizes = {
            "n_sweep_files": self.n_sweep_files,
            "n_rows_per_file": self.n_rows_per_file,
            "n_hidden_lenses": self.n_hidden_lenses,
        }
        return {
            "survey": "mock",
            "mock_seed": int(self.seed),
            "profile": self.profile,
            **{k: v for k, v in sizes.items() if v is not None},
        }
