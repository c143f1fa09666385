"""The search library on small inputs: targets = the preselection before the known-lens exclusion,
unscorable stamps kept with their reason, streamed scores equal to scoring the same stamps at once,
chunk-level resume, candidates (threshold, ranking, de-duplication, known matches, percentiles,
completeness) against astropy / scipy, one model version, and the grades CSV checks."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch
from scipy import stats

from darkhaloscope import sky
from darkhaloscope.catalog.cuts import NegativeSelectionConfig, funnel_table, select_negatives
from darkhaloscope.errors import InputError
from darkhaloscope.evaluation import marginal_completeness
from darkhaloscope.imaging.batch import BAND_MISSING_BIT, CutoutBatch
from darkhaloscope.search.candidates import build_candidates, choose_threshold, deduplicate, score_percentiles
from darkhaloscope.search.grades import (
    GRADES_SCHEMA,
    awaiting_inspection,
    changed_earlier_rows,
    check_against_candidates,
    graded_lens_ids,
    grades_for_training,
    latest_grades,
    new_round,
    parse_grades_csv,
)
from darkhaloscope.search.streaming import (
    InflightSearch,
    SearchSettings,
    coverage_problems,
    score_chunk,
    search_partition,
    unscorable_reasons,
)
from darkhaloscope.search.targets import funnel_preselected, search_targets
from darkhaloscope.stats import jeffreys_interval
from darkhaloscope.training.checkpoint import load_checkpoint, save_checkpoint
from darkhaloscope.training.inference import score_with_members
from darkhaloscope.training.models import build_model
from darkhaloscope.training.preprocess import PreprocessSpec
from lake_platform.lake import Lake
from tests.spark_fixtures import known_lenses_table
from tests.test_catalog_cuts import rows

SWEEP = "sweep-150p000-155p005.fits"
SIZE = 101


class NoiseSky:
    """An image source of deterministic noise stamps (seeded by position), counting its requests;
    targets in ``fail`` are refused, in ``empty`` have no data, in ``no_r`` lack the r band."""

    checkpoint_chunks = False

    def __init__(self, fail=(), empty=(), no_r=(), masked=()):
        self.fail, self.empty, self.no_r, self.masked = set(fail), set(empty), set(no_r), set(masked)
        self.requests = 0

    def cutouts(self, ra, dec, size=SIZE):
        self.requests += 1
        batch = CutoutBatch.empty(len(ra), size)
        failed = np.full(len(ra), "", dtype=object)
        for i, (a, d) in enumerate(zip(ra, dec)):
            key = round(float(a), 6)
            if key in self.fail:
                failed[i] = "http_404 not found"
                continue
            if key in self.empty:
                continue
            rng = np.random.default_rng(int(key * 1e6) % (2**32))
            batch.image[i] = rng.normal(0.0, 0.05, (3, size, size)).astype(np.float32)
            batch.invvar[i] = 400.0
            if key in self.no_r:
                batch.image[i, 1], batch.invvar[i, 1] = 0.0, 0.0
                batch.band_missing[i] = BAND_MISSING_BIT["r"]
            if key in self.masked:
                batch.invvar[i, 2, size // 2, size // 2] = 0.0
        return batch, failed


@pytest.fixture(scope="module")
def lens_finder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ckpt")
    torch.manual_seed(0)
    save_checkpoint(
        folder,
        "best",
        build_model("bottleneck_resnet_tiny", 3),
        architecture="bottleneck_resnet_tiny",
        in_channels=3,
        preprocess=PreprocessSpec(crop=65),
    )
    return load_checkpoint(folder, "best", device="cpu")


def _targets(n: int) -> pa.Table:
    t = rows(n, ra=[150.0 + 0.001 * i for i in range(n)], sweep_file=[SWEEP] * n)
    return search_targets([t], NegativeSelectionConfig())


def test_targets_are_the_preselection_before_the_known_lens_exclusion_in_brick_order():
    sweep = rows(
        8,
        type=["DEV"] * 6 + ["PSF", "DEV"],
        maskbits=[0] * 7 + [2],
        brickid=[331001, 331000] * 4,
        sweep_file=[SWEEP] * 8,
    )
    known = known_lenses_table([{"ra": sweep.column("ra")[2].as_py(), "dec": 1.0}])
    negatives, funnel = select_negatives(sweep, known)
    targets = search_targets([sweep.slice(0, 5), sweep.slice(5)], NegativeSelectionConfig())
    assert targets.num_rows == 6 and negatives.num_rows == 5  # the known lens is searched, never a negative
    assert set(negatives.column("object_id").to_pylist()) < set(targets.column("object_id").to_pylist())
    assert targets.column("brickid").to_pylist() == [331000] * 3 + [331001] * 3
    assert funnel_preselected(funnel_table(funnel), SWEEP) == 6
    assert targets.column("split").to_pylist() == list(
        sky.split_for_coords(targets.column("ra").to_numpy(), targets.column("dec").to_numpy())
    )
    with pytest.raises(InputError, match="selection_funnel has 0 rows"):
        funnel_preselected(funnel_table(funnel), "sweep-other.fits")


def test_unscorable_stamps_get_their_reason():
    batch = CutoutBatch.empty(5, 11)
    batch.image[1:] = 1.0
    batch.invvar[1:] = 1.0
    batch.invvar[2, 1], batch.band_missing[2] = 0.0, BAND_MISSING_BIT["r"]
    batch.invvar[3, 0, 5, 5] = 0.0
    failed = np.array(["", "", "", "", "timeout after 30 s"], dtype=object)
    assert unscorable_reasons(batch, failed).tolist() == [
        "no_data",
        "",
        "missing_band_r",
        "masked_centre_g",
        "fetch_failed: timeout after 30 s",
    ]


def test_centre_only_invvar_still_tells_a_masked_centre():
    """A coadd mirror asked for the centre pixel's invvar only: a band whose file exists but whose
    centre has invvar 0 is masked there; a missing band is missing, not masked."""
    batch = CutoutBatch.empty(3, 11)
    batch.invvar_centre_only = True
    batch.image[:] = 1.0
    batch.invvar[:, :, 5, 5] = 1.0
    batch.invvar[1, 2, 5, 5] = 0.0
    batch.invvar[2, 1, 5, 5], batch.band_missing[2] = 0.0, BAND_MISSING_BIT["r"]
    assert unscorable_reasons(batch, np.array(["", "", ""], dtype=object)).tolist() == [
        "",
        "masked_centre_z",
        "missing_band_r",
    ]


def test_streamed_scores_keep_every_row_record_the_model_and_equal_scoring_at_once(lens_finder, tmp_path):
    model, spec = lens_finder
    targets = _targets(7)
    ra = [round(x, 6) for x in targets.column("ra").to_pylist()]
    sky_ = NoiseSky(fail=[ra[0]], empty=[ra[1]], no_r=[ra[2]], masked=[ra[3]])
    settings = SearchSettings(chunk=3, keep_threshold=0.0)
    inflight = InflightSearch(Lake(str(tmp_path / "lake")).inflight(), SWEEP, spec.data_version)
    run = search_partition(targets, sky_, model, spec, "cpu", settings, inflight)
    scores = pa.Table.from_batches(list(inflight.batches("scores", run["n_chunks"])))
    stamps = pa.Table.from_batches(list(inflight.batches("stamps", run["n_chunks"])))
    assert sky_.requests == 3 and scores.column("object_id").to_pylist() == targets.column("object_id").to_pylist()
    assert scores.column("valid").to_pylist() == [False] * 4 + [True] * 3
    assert [r.split(":")[0] for r in scores.column("invalid_reason").to_pylist()[:4]] == [
        "fetch_failed",
        "no_data",
        "missing_band_r",
        "masked_centre_z",
    ]
    assert scores.column("score").null_count == 4 and set(scores.column("model_version").to_pylist()) == {
        spec.data_version
    }
    assert (
        stamps.column("object_id").to_pylist() == scores.column("object_id").to_pylist()[4:]
    )  # keep-threshold 0 keeps every valid stamp
    batch, _ = NoiseSky().cutouts(targets.column("ra").to_numpy()[4:], targets.column("dec").to_numpy()[4:])
    expected, _, _, _ = score_with_members(model, spec, batch.image, device="cpu")
    np.testing.assert_allclose(scores.column("score").to_numpy(zero_copy_only=False)[4:], expected, rtol=1e-6)
    assert coverage_problems(scores, targets.column("object_id"), spec.data_version) == dict.fromkeys(
        (
            "targets_without_row",
            "rows_of_no_target",
            "duplicate_rows",
            "rows_of_another_model",
            "unscorable_without_reason",
        ),
        0,
    )
    assert coverage_problems(scores.slice(1), targets.column("object_id"), "other")["rows_of_another_model"] == 6
    none_kept = score_chunk(targets, NoiseSky(), model, spec, "cpu", SearchSettings(keep_threshold=1.0))[1]
    assert none_kept.num_rows == 0


def test_a_search_resumes_from_its_committed_chunks(lens_finder, tmp_path):
    model, spec = lens_finder
    lake = Lake(str(tmp_path / "lake"))
    targets = _targets(5)
    settings = SearchSettings(chunk=2)
    inflight = InflightSearch(lake.inflight(), SWEEP, spec.data_version)
    first = search_partition(targets, NoiseSky(), model, spec, "cpu", settings, inflight)
    assert first == {"n_chunks": 3, "n_scored_now": 3, "n_resumed": 0}
    before = pa.Table.from_batches(list(inflight.batches("scores", 3)))
    inflight.scores.delete({**inflight.key, "chunk": "00000002"})  # the run died before its last chunk
    sky_ = NoiseSky()
    assert search_partition(targets, sky_, model, spec, "cpu", settings, inflight) == {
        "n_chunks": 3,
        "n_scored_now": 1,
        "n_resumed": 2,
    }
    assert sky_.requests == 1 and pa.Table.from_batches(list(inflight.batches("scores", 3))).equals(before)
    other_model = InflightSearch(lake.inflight(), SWEEP, "f" * 64)
    assert not other_model.done(0, targets.column("object_id").slice(0, 2).combine_chunks())  # a new model re-scores
    inflight.clear()
    assert not inflight.done(0, targets.column("object_id").slice(0, 2).combine_chunks())


def test_a_process_scores_its_share_of_the_chunks_and_reports_each(lens_finder, tmp_path):
    """What a Spark task does: score only its chunks (any order), skip those already in flight."""
    model, spec = lens_finder
    targets, settings = _targets(5), SearchSettings(chunk=2)
    inflight = InflightSearch(Lake(str(tmp_path / "lake")).inflight(), SWEEP, spec.data_version)
    seen = []
    share = search_partition(
        targets,
        NoiseSky(),
        model,
        spec,
        "cpu",
        settings,
        inflight,
        chunks=[2, 0],
        progress=lambda i, n, resumed: seen.append((i, n, resumed)),
    )
    assert share == {"n_chunks": 2, "n_scored_now": 2, "n_resumed": 0} and seen == [(2, 3, False), (0, 3, False)]
    assert search_partition(targets, NoiseSky(), model, spec, "cpu", settings, inflight) == {
        "n_chunks": 3,
        "n_scored_now": 1,
        "n_resumed": 2,
    }
    with pytest.raises(InputError, match=f"chunk 3 of {SWEEP}: it has 3 chunks of 2 targets"):
        search_partition(targets, NoiseSky(), model, spec, "cpu", settings, inflight, chunks=[3])


class BrokenSky(NoiseSky):
    """Cuts its first chunk, then fails as a corrupt brick file does."""

    def cutouts(self, ra, dec, size=SIZE):
        if self.requests:
            raise InputError("/mirror/south/coadd/150/1501p020/legacysurvey-1501p020-image-g.fits.fz: truncated")
        return super().cutouts(ra, dec, size)


def test_a_source_failing_mid_partition_keeps_the_chunks_before_and_the_torch_threads(lens_finder, tmp_path):
    """The chunk cut ahead fails: the error names the file, the chunk scored before it stays
    committed (a rerun resumes there), nothing after it is, and torch gets its threads back."""
    model, spec = lens_finder
    targets, settings = _targets(5), SearchSettings(chunk=2)
    inflight = InflightSearch(Lake(str(tmp_path / "lake")).inflight(), SWEEP, spec.data_version)
    threads = torch.get_num_threads()
    with pytest.raises(InputError, match="1501p020-image-g.fits.fz: truncated"):
        search_partition(targets, BrokenSky(), model, spec, "cpu", settings, inflight)
    assert torch.get_num_threads() == threads
    assert [inflight.done(i, targets.slice(2 * i, 2).column("object_id").combine_chunks()) for i in range(3)] == [
        True,
        False,
        False,
    ]
    assert search_partition(targets, NoiseSky(), model, spec, "cpu", settings, inflight)["n_resumed"] == 1


def test_image_source_settings_travel_as_json():
    """A Spark task or a Pipes process rebuilds the source from plain settings."""
    import json

    from darkhaloscope.imaging.source_settings import ImageSourceSettings
    from darkhaloscope.imaging.sources import ServiceSource
    from darkhaloscope.survey.location import SurveyLocation

    settings = ImageSourceSettings(
        cutout_source="http://127.0.0.1:1/viewer", max_retries=1, survey=SurveyLocation(root="/data/dr10")
    )
    again = ImageSourceSettings.from_dict(json.loads(json.dumps(settings.to_dict())))
    assert again == settings
    source = again.open(Lake("unused-lake"))
    assert isinstance(source, ServiceSource) and source.client_options["max_retries"] == 1
    with pytest.raises(InputError, match="image source settings"):
        ImageSourceSettings.from_dict({**settings.to_dict(), "colour": "red"})


def _scores(ra, dec, score, version="v1") -> pa.Table:
    n = len(ra)
    return pa.table(
        {
            "object_id": pa.array(np.arange(1, n + 1), pa.int64()),
            "sweep_file": [SWEEP] * n,
            "brickname": ["1500p010"] * n,
            "ra": pa.array(ra, pa.float64()),
            "dec": pa.array(dec, pa.float64()),
            "type": ["DEV"] * n,
            "mag_r": pa.array(np.full(n, 19.0), pa.float32()),
            "shape_r": pa.array(np.full(n, 0.8), pa.float32()),
            "split": ["test"] * n,
            "score": pa.array([s if s is not None else None for s in score], pa.float64()),
            "model_version": [version] * n,
            "valid": [s is not None for s in score],
        }
    )


def _thresholds() -> pa.Table:
    return pa.table({"name": ["fpr_1e-02", "fpr_1e-03", "fpr_1e-04", "score>0.5"], "threshold": [0.6, 0.8, None, 0.5]})


def test_candidates_ranked_deduplicated_matched_with_percentiles_and_completeness():
    arcsec = 1 / 3600
    ra = [150.0, 150.0 + 2 * arcsec, 150.1, 150.1 + 4 * arcsec, 150.2, 150.3, 150.4]
    dec = [1.0] * 7
    score = [0.95, 0.99, 0.9, 0.85, 0.81, 0.55, None]
    known = known_lenses_table([{"name": "KNOWN-1", "ra": 150.2 + 1 * arcsec, "dec": 1.0}])
    injections = pa.table(
        {
            "injection_id": np.arange(5),
            "success": [True, True, True, True, False],
            "score": pa.array([0.9, 0.85, 0.1, 0.7, None], pa.float64()),
            "valid": [True, True, True, True, False],
        }
    )
    cand = build_candidates(_scores(ra, dec, score), _thresholds(), known, injections)
    assert choose_threshold(_thresholds()) == ("fpr_1e-03", 0.8)
    assert cand.column("rank").to_pylist() == [1, 2, 3, 4]
    assert cand.column("object_id").to_pylist() == [2, 3, 4, 5]  # object 1 is 2" from the better object 2: merged
    assert cand.column("n_merged").to_pylist() == [1, 0, 0, 0]  # 4" apart: both kept
    assert cand.column("known").to_pylist() == [False, False, False, True]
    assert cand.column("known_name").to_pylist()[3] == "KNOWN-1"
    np.testing.assert_allclose(
        cand.column("known_separation_arcsec").to_numpy(zero_copy_only=False),
        sky.angular_separation_arcsec(cand.column("ra").to_numpy(), 1.0, 150.2 + arcsec, 1.0),
        rtol=1e-9,
    )
    valid = [s for s in score if s is not None]
    expected = [stats.percentileofscore(valid, s, kind="weak") for s in cand.column("score").to_pylist()]
    np.testing.assert_allclose(cand.column("score_percentile").to_numpy(), expected)
    lo, hi = jeffreys_interval(2, 4, 0.68)
    assert cand.column("completeness").to_pylist() == [0.5] * 4 and cand.column("n_injections")[0].as_py() == 4
    assert cand.column("completeness_ci68_lo")[0].as_py() == pytest.approx(float(lo)) and cand.column(
        "completeness_ci68_hi"
    )[0].as_py() == pytest.approx(float(hi))
    named = build_candidates(_scores(ra, dec, score), _thresholds(), known, None, threshold_name="score>0.5")
    assert named.num_rows == 5 and named.column("completeness").null_count == 5
    with pytest.raises(InputError, match="fpr_1e-04"):
        build_candidates(
            _scores(ra, dec, score), _thresholds(), known, None, threshold_name="fpr_1e-04"
        )  # not resolvable


def test_candidates_refuse_scores_of_two_models():
    mixed = pa.concat_tables([_scores([150.0], [1.0], [0.9], "v1"), _scores([150.5], [1.0], [0.95], "v2")])
    with pytest.raises(InputError, match="mixes 2 model versions"):
        build_candidates(mixed, _thresholds(), known_lenses_table([]))


def test_deduplication_and_percentiles_edge_cases():
    keep, merged = deduplicate(np.array([10.0, 10.0 + 1 / 3600, 10.0 + 2 / 3600]), np.zeros(3), 1.5)
    assert keep.tolist() == [True, False, True] and merged.tolist() == [1, 0, 0]  # greedy in rank order
    assert score_percentiles(np.array([0.1, 0.2, 0.2, 0.9]), np.array([0.2])).tolist() == [75.0]
    with pytest.raises(InputError, match="no validly scored"):
        score_percentiles(np.array([]), np.array([0.5]))


def _candidates() -> pa.Table:
    return pa.table(
        {
            "object_id": pa.array([11, 12, 13], pa.int64()),
            "ra": [1.0, 2.0, 3.0],
            "dec": [0.0, 0.0, 0.0],
            "score": [0.9, 0.8, 0.7],
            "model_version": ["v1"] * 3,
            "known": [False, True, False],
        }
    )


def _csv(*rows: str, header: str = "object_id,grade,ra,dec,score,model_version,known") -> bytes:
    return ("\n".join([header, *rows]) + "\n").encode()


@pytest.mark.parametrize(
    "text, message",
    [
        (b"id,grade\n11,A\n", "missing column"),
        (b"object_id,grade\n11,A\n", r"missing column\(s\) \['ra', 'dec', 'score', 'model_version', 'known'\]"),
        (_csv("11,maybe,1.0,0.0,0.9,v1,false"), r"grades.csv:2: grade 'maybe'"),
        (_csv("11,A,1.0,0.0,0.9,v1,false", "xx,B,1.0,0.0,0.9,v1,false"), r"grades.csv:3: object_id 'xx'"),
        (_csv("11,A,1.0,0.0,0.9,v1,false", "11,B,1.0,0.0,0.9,v1,false"), "graded more than once"),
        (_csv("11,A,361.0,0.0,0.9,v1,false"), r"grades.csv:2: ra 361.0 is outside"),
        (_csv("11,A,1.0,0.0,high,v1,false"), r"grades.csv:2: score 'high' is not a number"),
        (_csv("11,A,1.0,0.0,0.9,v1,maybe"), r"grades.csv:2: known 'maybe'"),
        (_csv("11,A,1.0,0.0,0.9,,false"), r"grades.csv:2: model_version is empty"),
        (_csv(), "no grades"),
    ],
)
def test_bad_grade_files_are_named(text, message):
    with pytest.raises(InputError, match=message):
        parse_grades_csv(text, "grades.csv")


@pytest.mark.parametrize(
    "row, message",
    [
        ("99,A,1.0,0.0,0.9,v1,false", "not candidates"),
        ("11,A,1.0,0.0,0.9,v0,false", "graded on model v0"),
        ("11,A,1.001,0.0,0.9,v1,false", r"3.60 arcsec from its candidate"),
    ],
)
def test_grades_of_another_search_are_refused(row, message):
    check_against_candidates(parse_grades_csv(_csv("11,A,1.0,0.0,0.9,v1,false"), "ok.csv"), _candidates(), "ok.csv")
    with pytest.raises(InputError, match=message):
        check_against_candidates(parse_grades_csv(_csv(row), "grades.csv"), _candidates(), "grades.csv")


def test_rounds_append_and_earlier_rounds_are_checked():
    first_csv = _csv("11,A,1.0,0.0,0.9,v1,false", "12,not_a_lens,2.0,0.0,0.8,v1,true")
    first = new_round(None, parse_grades_csv(first_csv, "a.csv"), "a.csv", first_csv)
    second_csv = _csv("11,B,1.0,0.0,0.9,v1,false", "13,C,3.0,0.0,0.7,v1,false")
    both = new_round(first, parse_grades_csv(second_csv, "b.csv"), "b.csv", second_csv)
    assert both.schema == GRADES_SCHEMA and both.column("round").to_pylist() == [1, 1, 2, 2]
    assert both.column("grade").to_pylist() == ["A", "not_a_lens", "B", "C"] and both.column("known").to_pylist() == [
        False,
        True,
        False,
        False,
    ]
    assert changed_earlier_rows(first, both) == 0
    assert (
        new_round(both, None, "", b"").equals(both) and new_round(None, None, "", b"").num_rows == 0
    )  # nothing landed
    tampered = pa.concat_tables(
        [first.set_column(2, GRADES_SCHEMA.field("grade"), pa.array(["B", "not_a_lens"])), both.slice(2)]
    )
    assert changed_earlier_rows(first, tampered) == 1
    assert changed_earlier_rows(first, both.slice(1)) == 1
    latest, awaiting, used = grades_for_training(both)
    assert latest.to_pylist() == [
        {"object_id": 11, "grade": "B", "round": 2},
        {"object_id": 12, "grade": "not_a_lens", "round": 1},
        {"object_id": 13, "grade": "C", "round": 2},
    ]  # a later round regrades
    assert used["rounds"] == [1, 2] and used["n_lenses"] == 2 and used["n_not_a_lens"] == 1 and awaiting.size == 0
    first_only, _, used1 = grades_for_training(both, upto_round=1)
    assert first_only.column("grade").to_pylist() == ["A", "not_a_lens"] and used1["rounds"] == [1]
    assert used1["grades_sha256"] == grades_for_training(first)[2]["grades_sha256"] != used["grades_sha256"]
    assert grades_for_training(both, upto_round=0)[0].num_rows == 0 and grades_for_training(None)[2]["rounds"] == []


def test_objects_shown_ungraded_await_inspection_until_a_round_grades_them():
    """The gallery exports every candidate it shows; those left ungraded are awaiting inspection
    (a training set leaves such negatives out) until a round grades them, and showing an object
    again without a grade does not undo an earlier grade."""
    first_csv = _csv("11,A,1.0,0.0,0.9,v1,false", "12,ungraded,2.0,0.0,0.8,v1,true", "13,ungraded,3.0,0.0,0.7,v1,false")
    first = new_round(None, parse_grades_csv(first_csv, "a.csv"), "a.csv", first_csv)
    assert awaiting_inspection(first).tolist() == [12, 13] and latest_grades(first).column("object_id").to_pylist() == [
        11
    ]
    second_csv = _csv("11,ungraded,1.0,0.0,0.9,v1,false", "12,not_a_lens,2.0,0.0,0.8,v1,true")
    both = new_round(first, parse_grades_csv(second_csv, "b.csv"), "b.csv", second_csv)
    assert awaiting_inspection(both).tolist() == [13] and awaiting_inspection(both, upto_round=1).tolist() == [12, 13]
    assert latest_grades(both).to_pylist() == [
        {"object_id": 11, "grade": "A", "round": 1},
        {"object_id": 12, "grade": "not_a_lens", "round": 2},
    ]
    assert grades_for_training(both)[2]["n_awaiting_inspection"] == 1 and graded_lens_ids(both).tolist() == [11]
    with pytest.raises(InputError, match=r"grade 'skip' is not one of \['A', 'B', 'C', 'not_a_lens', 'ungraded'\]"):
        parse_grades_csv(_csv("11,skip,1.0,0.0,0.9,v1,false"), "c.csv")


def test_the_evaluation_report_links_the_gallery():
    from darkhaloscope.evaluation.report import build_report

    page = build_report(gallery_uri="/lake/search/candidate_gallery/gallery.html")
    assert 'id="link-gallery" href="file:///lake/search/candidate_gallery/gallery.html"' in page
    assert 'href="s3://b/search/candidate_gallery/gallery.html"' in build_report(
        gallery_uri="s3://b/search/candidate_gallery/gallery.html"
    )


def test_gallery_uses_kept_stamps_and_cuts_only_the_missing_ones():
    import pyarrow.dataset as ds

    from darkhaloscope.search.gallery import gallery_stamps
    from darkhaloscope.stamps import to_tensor_array

    kept_image = np.full((1, 3, SIZE, SIZE), 0.5, np.float32)
    kept = ds.dataset(pa.table({"object_id": pa.array([1], pa.int64()), "image": to_tensor_array(kept_image)}))
    cand = pa.table({"object_id": pa.array([1, 2], pa.int64()), "ra": [150.0, 150.001], "dec": [1.0, 1.0]})
    opened = []

    def open_source():
        opened.append(NoiseSky())
        return opened[-1]

    stamps = gallery_stamps(cand, kept, open_source, SIZE)
    assert np.array_equal(stamps[0], kept_image[0]) and len(opened) == 1 and opened[0].requests == 1
    expected, _ = NoiseSky().cutouts(np.array([150.001]), np.array([1.0]))
    assert np.array_equal(stamps[1], expected.image[0])
    gallery_stamps(cand.slice(0, 1), kept, open_source, SIZE)
    assert len(opened) == 1  # every stamp kept: the source is never opened


def test_graded_lenses_leave_the_held_out_negatives():
    from darkhaloscope.evaluation.scoring import held_out_negatives

    first_csv = _csv("11,A,1.0,0.0,0.9,v1,false", "12,not_a_lens,2.0,0.0,0.8,v1,false", "13,B,3.0,0.0,0.7,v1,false")
    second_csv = _csv("12,B,2.0,0.0,0.8,v1,false", "13,not_a_lens,3.0,0.0,0.7,v1,false")
    first = new_round(None, parse_grades_csv(first_csv, "a.csv"), "a.csv", first_csv)
    both = new_round(first, parse_grades_csv(second_csv, "b.csv"), "b.csv", second_csv)
    assert graded_lens_ids(both).tolist() == [11, 12] and graded_lens_ids(None).size == 0  # the latest grade counts
    scores = pa.table(
        {
            "object_id": pa.array([10, 11, 12, 13, 14], pa.int64()),
            "label": pa.array([0, 0, 0, 0, 0], pa.int8()),
            "split": ["test"] * 4 + ["train"],
            "in_training_catalog": [True] * 5,
        }
    )
    assert held_out_negatives(scores).column("object_id").to_pylist() == [10, 11, 12, 13]
    assert held_out_negatives(scores, graded_lens_ids(both)).column("object_id").to_pylist() == [10, 13]


def test_candidates_completeness_counts_a_hosts_injections_as_the_marginals_do():
    """Injections share hosts (each host carries several over the grid): the candidates' completeness
    interval is the selection function's pooled one, wider than nine independent trials per host give."""
    rng = np.random.default_rng(2)
    host = np.repeat(np.arange(12), 9)
    score = np.where(rng.random(12)[host] < 0.5, 0.9, 0.1) + rng.normal(0, 0.01, host.size)
    n = host.size
    injections = pa.table(
        {
            "injection_id": np.arange(n),
            "success": np.ones(n, bool),
            "valid": np.ones(n, bool),
            "score": score,
            "host_object_id": host,
            "theta_e_arcsec": np.full(n, 1.0),
        }
    )
    cand = build_candidates(_scores([150.0], [1.0], [0.95]), _thresholds(), known_lenses_table([]), injections)
    pooled = [
        r
        for r in marginal_completeness(injections, _thresholds(), "theta_e_arcsec", [0.5, 1.5]).to_pylist()
        if r["threshold_name"] == "fpr_1e-03" and r["bin"] == "all"
    ][0]
    row = cand.to_pylist()[0]
    assert row["completeness"] == pooled["completeness"]
    assert (row["completeness_ci68_lo"], row["completeness_ci68_hi"]) == (pooled["ci68_lo"], pooled["ci68_hi"])
    lo, hi = jeffreys_interval(pooled["n_detected"], n, 0.68)
    assert row["completeness_ci68_hi"] - row["completeness_ci68_lo"] > 2 * (hi - lo)
