"""The search stage's tables (``lens_assets/search.py``): each with its contract and audits."""

from __future__ import annotations

import pyarrow as pa

from darkhaloscope.search.candidates import CANDIDATE_FIELDS, SCORE_COLUMNS
from darkhaloscope.search.gallery import GALLERY_FILE
from darkhaloscope.search.grades import GRADES, GRADES_SCHEMA, UNGRADED
from darkhaloscope.search.streaming import SCORE_FIELDS, STAMP_SCHEMA
from darkhaloscope.search.targets import TARGET_SCHEMA
from darkhaloscope.survey.sweeps import SWEEP_DIM
from lake_platform.audits import Audit
from lake_platform.contracts import Column, Contract, Range

from .columns import ARCSEC, BANDS, DEG, F32, F64, I64, SPLITS, STR, col, from_schema
from .table import Table

_SEARCH_SCORE = {
    "stamp_kept": ("", "whether the stamp scored at or above the keep-threshold and is in search_stamps"),
    "invalid_reason": (
        "",
        "why the target could not be scored: fetch_failed: …, no_data, missing_band_<b>, masked_centre_<b>, "
        "nonfinite_<b>, zero_<b> (empty when valid)",
    ),
}

SEARCH_TARGETS_CONTRACT = Audit("search_targets_contract", "schema, unique object ids, coordinates and splits")

SEARCH_TARGETS_IN_FUNNEL = Audit(
    "search_targets_in_funnel",
    "targets of each sweep file = the funnel's rows remaining before the known-lens exclusion",
)

SEARCH_TARGETS = Table(
    "search",
    "search_targets",
    "every galaxy the survey-wide search covers, one partition per sweep file",
    Contract(
        table="search_targets",
        columns=from_schema(TARGET_SCHEMA),
        key=("object_id",),
        ranges=(Range("dec", -90.0, 90.0), Range("ra", 0.0, 360.0, hi_inclusive=False)),
        allowed_values={"split": SPLITS},
    ),
    SWEEP_DIM,
    (SEARCH_TARGETS_CONTRACT, SEARCH_TARGETS_IN_FUNNEL),
)

SEARCH_SCORES_CONTRACT = Audit(
    "search_scores_contract", "one row per target; valid rows scored in [0, 1], invalid rows unscored with a reason"
)

SEARCH_SCORES_COVER_TARGETS = Audit(
    "search_scores_cover_targets",
    "every target has exactly one row (scored or with its reason), all from the published model",
)

SEARCH_SCORES = Table(
    "search",
    "search_scores",
    "lens-finder score of every search target (unscorable rows with their reason)",
    Contract(
        table="search_scores",
        columns=(
            col("object_id", I64),
            col("sweep_file", STR),
            col("brickid", pa.int32(), required=False),
            col("brickname", STR, required=False),
            col("ra", F64),
            col("dec", F64),
            col("type", STR, required=False),
            *(col(f"mag_{b}", F32, required=False) for b in BANDS),
            col("shape_r", F32, required=False),
            col("healpix_128", I64, required=False),
            col("split", STR),
            *from_schema(pa.schema(list(SCORE_FIELDS)), {k: v for k, v in _SEARCH_SCORE.items()}),
        ),
        key=("object_id",),
        ranges=(Range("score", 0.0, 1.0, nullable=True),),
    ),
    SWEEP_DIM,
    (SEARCH_SCORES_CONTRACT, SEARCH_SCORES_COVER_TARGETS),
)

SEARCH_STAMPS_CONTRACT = Audit(
    "search_stamps_contract", "kept stamps: unique object ids, exactly the rows marked stamp_kept"
)

SEARCH_STAMPS = Table(
    "search",
    "search_stamps",
    "the stamps of search targets scoring at or above the keep-threshold",
    Contract(
        table="search_stamps",
        columns=from_schema(STAMP_SCHEMA),
        key=("object_id",),
        ranges=(Range("score", 0.0, 1.0),),
    ),
    SWEEP_DIM,
    (SEARCH_STAMPS_CONTRACT,),
)

CANDIDATES_CONTRACT = Audit(
    "candidates_contract", "unique candidates ranked 1..n, scores, percentiles and completeness in range"
)

CANDIDATES_ONE_MODEL = Audit(
    "candidates_one_model", "every candidate was scored by one model, the published lens finder"
)

CANDIDATES = Table(
    "search",
    "candidates",
    "searched galaxies above a threshold, ranked, de-duplicated, matched to known lenses",
    Contract(
        table="candidates",
        columns=(
            *(col(c, TARGET_SCHEMA.field(c).type) for c in SCORE_COLUMNS if c in TARGET_SCHEMA.names),
            col("score", F64),
            col("model_version", STR),
            *from_schema(
                pa.schema(list(CANDIDATE_FIELDS)),
                {
                    "rank": ("", "rank by score, 1 the highest"),
                    "score_percentile": ("", "percentile of the score among all validly scored search targets"),
                    "n_merged": ("", "lower-scoring candidates within 3″ merged into this one"),
                    "known": ("", "whether a known lens lies within 1.5″"),
                    "known_name": ("", "lenscat name of the nearest known lens"),
                    "known_separation_arcsec": (ARCSEC, "separation to the nearest known lens"),
                    "completeness": ("", "the search's completeness at the threshold: valid injections above it"),
                    "completeness_ci68_lo": ("", "lower end of completeness's 68 % Jeffreys interval"),
                    "completeness_ci68_hi": ("", "upper end of completeness's 68 % Jeffreys interval"),
                    "n_injections": ("", "valid injections the completeness is measured on"),
                },
            ),
        ),
        key=("object_id",),
        ranges=(
            Range("rank", 1, None),
            Range("score", 0.0, 1.0),
            Range("score_percentile", 0.0, 100.0),
            Range("n_merged", 0, None),
            Range("known_separation_arcsec", 0.0, None, nullable=True),
            *(
                Range(c, 0.0, 1.0, nullable=True)
                for c in ("completeness", "completeness_ci68_lo", "completeness_ci68_hi")
            ),
        ),
    ),
    None,
    (CANDIDATES_CONTRACT, CANDIDATES_ONE_MODEL),
)

CANDIDATE_GALLERY_CONTRACT = Audit(
    "candidate_gallery_contract", "the page exists and shows one stamp per candidate shown"
)

CANDIDATE_GALLERY = Table(
    "search",
    "candidate_gallery",
    f"the offline HTML inspection page of the top candidates ({GALLERY_FILE})",
    Contract(
        table="candidate_gallery",
        columns=(
            col("uri", STR, description="location of gallery.html"),
            col("bytes", I64),
            Column("stamps", I64, "", "candidates shown"),
        ),
        ranges=(Range("bytes", 1, None), Range("stamps", 0, None)),
    ),
    None,
    (CANDIDATE_GALLERY_CONTRACT,),
)

VISUAL_GRADES_CONTRACT = Audit(
    "visual_grades_contract", "one row per (round, object), grades in A/B/C/not_a_lens/ungraded"
)

VISUAL_GRADES_ROUNDS_KEPT = Audit("visual_grades_rounds_kept", "every earlier round is kept unchanged")

VISUAL_GRADES = Table(
    "search",
    "visual_grades",
    "visual grades of candidates, one round per landed grades CSV",
    Contract(
        table="visual_grades",
        columns=from_schema(
            GRADES_SCHEMA,
            {
                "round": ("", "grading round, 1 for the first CSV landed"),
                "grade": ("", "A, B, C (a lens, by confidence), not_a_lens, or ungraded (shown, awaiting inspection)"),
                "ra": (DEG, "right ascension of the candidate as graded"),
                "dec": (DEG, "declination of the candidate as graded"),
                "score": ("", "the candidate's score when it was graded"),
                "known": ("", "whether the candidate was a known lens"),
                "source_file": ("", "the grades CSV the round was landed from"),
                "source_sha256": ("", "sha256 of that CSV"),
            },
        ),
        key=("round", "object_id"),
        ranges=(Range("round", 1, None),),
        allowed_values={"grade": (*GRADES, UNGRADED)},
    ),
    None,
    (VISUAL_GRADES_CONTRACT, VISUAL_GRADES_ROUNDS_KEPT),
)

#: The search stage's tables, in the order of the pipeline.
TABLES: tuple[Table, ...] = (
    SEARCH_TARGETS,
    SEARCH_SCORES,
    SEARCH_STAMPS,
    CANDIDATES,
    CANDIDATE_GALLERY,
    VISUAL_GRADES,
)
