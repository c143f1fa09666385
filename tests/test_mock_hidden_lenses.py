"""Mock seeds and hidden lenses: independent realisations, byte-identical reruns, hidden lenses that no
catalog lists, painted into the sky with the flux and S/N their truth records, and never read by an asset."""

from __future__ import annotations

import re
from pathlib import Path

import dagster as dg
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from darkhaloscope.catalog.cuts import KnownLensIndex
from darkhaloscope.errors import InputError
from darkhaloscope.lensing.render import arc_snr
from darkhaloscope.survey.known_lenses import load_known_lenses
from darkhaloscope.survey.sweeps import read_sweep
from mock_survey.hidden_lenses import HIDDEN_LENS_TRUTH_SCHEMA, HOST_COLUMNS
from mock_survey.lenses import lens_catalog_rows, mock_sky_with_lenses
from mock_survey.paths import HIDDEN_LENS_TRUTH_RELPATH, mock_survey_root
from mock_survey.sky import mock_sky_noise_key
from mock_survey.survey import MockSurveyConfig, generate_mock_survey
from resources.settings import setting, validate

REPO = Path(__file__).resolve().parent.parent
N_HIDDEN = 5


def config(seed: int) -> MockSurveyConfig:
    return MockSurveyConfig(
        n_rows_per_file=9000, chunk_rows=3000, seed=seed, blocks=((30, -5),), n_hidden_lenses=N_HIDDEN
    )


@pytest.fixture(scope="module")
def surveys(tmp_path_factory):
    """Seed 0 twice (in two folders) and seed 1, each with its catalog as the real reader returns it."""
    out = {}
    for name, seed in (("a", 0), ("b", 0), ("one", 1)):
        m = generate_mock_survey(tmp_path_factory.mktemp(f"mock_{name}"), config(seed))
        cat = pa.concat_tables([read_sweep(p, columns=HOST_COLUMNS) for p in m.sweep_files])
        out[name] = (m, cat, pq.read_table(m.hidden_truth_path))
    return out


def test_same_seed_same_bytes_other_seed_other_survey(surveys):
    (a, cat_a, hid_a), (b, _, _), (one, cat_one, hid_one) = surveys["a"], surveys["b"], surveys["one"]
    assert a.hidden_truth_path == a.root / HIDDEN_LENS_TRUTH_RELPATH
    assert [p.relative_to(a.root) for p in a.files()] == [p.relative_to(b.root) for p in b.files()]
    for pa_, pb_ in zip(a.files(), b.files()):
        assert pa_.read_bytes() == pb_.read_bytes(), pa_.name
    assert a.seed == 0 and one.seed == 1 and a.digest != one.digest
    for pa_, p1 in zip(a.files(), one.files()):
        assert pa_.read_bytes() != p1.read_bytes(), pa_.name
    # known lenses stay at their lenscat positions; their truth (and everything else) changes
    known_a, known_one = pq.read_table(a.truth_path), pq.read_table(one.truth_path)
    assert known_a.column("name").equals(known_one.column("name")) and known_a.column("ra").equals(
        known_one.column("ra")
    )
    assert not np.allclose(known_a.column("theta_e_arcsec").to_numpy(), known_one.column("theta_e_arcsec").to_numpy())
    assert not np.isin(hid_a.column("object_id").to_numpy(), hid_one.column("object_id").to_numpy()).all()
    assert cat_a.num_rows == cat_one.num_rows and not np.array_equal(
        cat_a.column("ra").to_numpy(), cat_one.column("ra").to_numpy()
    )


def test_skies_of_two_seeds_differ(surveys):
    (_, cat_a, hid_a), (_, cat_one, hid_one) = surveys["a"], surveys["one"]
    assert mock_sky_noise_key(0) != mock_sky_noise_key(1)
    ra, dec = [32.5], [-2.5]  # the same window of both skies
    img_a = mock_sky_with_lenses(cat_a, [hid_a], seed=0).render_window(ra[0], dec[0], 51)[0]
    img_one = mock_sky_with_lenses(cat_one, [hid_one], seed=1).render_window(ra[0], dec[0], 51)[0]
    again = mock_sky_with_lenses(cat_a, [hid_a], seed=0).render_window(ra[0], dec[0], 51)[0]
    assert img_a.tobytes() == again.tobytes() and not np.array_equal(img_a, img_one)


def test_hidden_lenses_are_reserved_catalog_galaxies_with_sources_of_the_mock_population(surveys):
    m, cat, hidden = surveys["a"]
    assert hidden.schema.equals(HIDDEN_LENS_TRUTH_SCHEMA) and hidden.num_rows == m.n_hidden_lenses == N_HIDDEN
    known = load_known_lenses()
    ra, dec = hidden.column("ra").to_numpy(), hidden.column("dec").to_numpy()
    # no lenscat entry (known_lenses is lenscat) within the negatives' exclusion radius of 11"
    assert not KnownLensIndex.from_table(known).within(ra, dec, 11.0).any()
    rows = lens_catalog_rows(hidden, cat)  # each hidden lens is a catalog galaxy, at its position
    assert set(rows.column("type").to_pylist()) <= {"DEV", "SER"}
    # every host is in the closure reserve, so none is a negative: no threshold, training set or
    # injection plan can hold one (catalog.reserve)
    from darkhaloscope.catalog.cuts import select_negatives
    from darkhaloscope.catalog.reserve import closure_reserved

    assert closure_reserved(hidden.column("object_id").to_numpy()).all()
    negatives, _ = select_negatives(cat, known)
    assert not np.isin(hidden.column("object_id").to_numpy(), negatives.column("object_id").to_numpy()).any()
    te = hidden.column("theta_e_arcsec").to_numpy()
    assert np.all((te >= 0.5) & (te <= 3.0)) and np.all(hidden.column("arc_flux_r").to_numpy() > 0)
    # the sources are the mock population's (drawn, not scaled to a target S/N), inside its support
    from darkhaloscope.evaluation.populations import MOCK_SOURCES

    for name, (lo, hi) in MOCK_SOURCES.support.items():
        v = hidden.column(name).to_numpy()
        assert np.all((v >= lo) & (v <= hi)), name
    beta = np.hypot(hidden.column("src_x_arcsec").to_numpy(), hidden.column("src_y_arcsec").to_numpy()) / te
    np.testing.assert_allclose(beta, hidden.column("src_beta_frac").to_numpy(), rtol=1e-9)
    # the lens is the host's own: its true redshift and sigma_v give z_l and theta_E
    from darkhaloscope.lensing.cosmology import theta_e_from_sigma_v
    from mock_survey.redshifts import galaxy_z_and_sigma

    host = galaxy_z_and_sigma(rows, 0)
    np.testing.assert_allclose(hidden.column("z_l").to_numpy(), host["z"])
    zs = hidden.column("z_s").to_numpy()
    np.testing.assert_allclose(te, theta_e_from_sigma_v(10 ** host["log_sigma"], host["z"], zs), rtol=1e-9)


def test_hidden_arcs_are_in_the_sky_with_their_truth_flux_and_snr(surveys):
    _, cat, hidden = surveys["a"]
    ra, dec = hidden.column("ra").to_numpy(), hidden.column("dec").to_numpy()
    with_arcs, _ = mock_sky_with_lenses(cat, [hidden], seed=0, noise=False).cutouts(ra, dec, 101)
    without, _ = mock_sky_with_lenses(cat, [], seed=0, noise=False).cutouts(ra, dec, 101)
    arc = with_arcs.image.astype(np.float64) - without.image
    for j, band in enumerate("grz"):
        np.testing.assert_allclose(arc[:, j].sum(axis=(1, 2)), hidden.column(f"arc_flux_{band}").to_numpy(), rtol=2e-3)
    # the S/N of the painted arc, measured in its cutout the way the injection engine measures it
    measured = arc_snr(torch.as_tensor(arc), torch.as_tensor(with_arcs.invvar, dtype=torch.float64))[:, 1].numpy()
    np.testing.assert_allclose(measured, hidden.column("arc_snr").to_numpy(), rtol=0.02)


def test_sky_refuses_a_catalog_of_another_seed(surveys):
    (_, _, hid_a), (_, cat_one, _) = surveys["a"], surveys["one"]
    with pytest.raises(InputError, match="DHS_MOCK_SEED"):
        mock_sky_with_lenses(cat_one, [hid_a], seed=1)


def test_hidden_truth_is_read_by_no_asset():
    """Only the mock survey library and the resource that builds the mock sky may name the hidden-lens
    truth; no asset (training or otherwise), IO manager or Definitions module does."""
    names = re.compile(r"hidden_lens_truth|hidden_truth|HIDDEN_LENS_TRUTH|lens_truth_paths|hidden_lens_recovery")
    # resources/imaging.py paints the sky the cutouts are cut from; lens_assets/demo_summary.py scores the
    # demo's candidates against the truth after every asset has run (no asset reads it); lens_assets/closure.py
    # holds the asset that compares with it (selection_closure), whose only reader is the evaluation report
    # (below), and the count ``thresholds`` publishes and checks (hidden hosts among its negatives, taken after
    # the negatives are chosen, 0 by construction)
    allowed = {"resources/imaging.py", "lens_assets/demo_summary.py", "lens_assets/closure.py"}
    readers = []
    for folder in ("lens_assets", "io_managers", "resources"):
        for path in sorted((REPO / folder).rglob("*.py")):
            if names.search(path.read_text()) and str(path.relative_to(REPO)) not in allowed:
                readers.append(str(path.relative_to(REPO)))
    for path in (REPO / "definitions.py",):
        if names.search(path.read_text()):
            readers.append(path.name)
    assert readers == []
    import lens_assets.closure as closure
    from definitions import defs

    graph = defs.resolve_asset_graph()
    comparing = {a.key for a in (closure.selection_closure, closure.lens_forecast)}
    readers_of_comparisons = {child for key in comparing for child in graph.get(key).child_keys}
    assert readers_of_comparisons == {dg.AssetKey(["evaluation", "evaluation_report"])}
    assert not graph.get(dg.AssetKey(["evaluation", "evaluation_report"])).child_keys
    training = [p for p in (REPO / "darkhaloscope").rglob("*.py") if p.parts[-2] in ("training", "catalog", "lensing")]
    assert training and not [p.name for p in training if names.search(p.read_text())]


def test_seed_configuration(monkeypatch, tmp_path):
    monkeypatch.setenv("DHS_MOCK_SEED", "3")
    validate()
    assert setting("DHS_MOCK_SEED") == "3"
    for bad in ("-1", "one", "1.5", "1e3"):
        monkeypatch.setenv("DHS_MOCK_SEED", bad)
        with pytest.raises(InputError, match=f"DHS_MOCK_SEED='{bad}'"):
            validate()
    assert mock_survey_root(tmp_path, "demo", 0) != mock_survey_root(tmp_path, "demo", 1)
    assert MockSurveyConfig(seed=0).digest() != MockSurveyConfig(seed=1).digest()
    with pytest.raises(InputError, match="seed"):
        MockSurveyConfig(seed=-2).resolved()
