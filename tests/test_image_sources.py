"""Every image source answers the same protocol: cutouts(ra, dec, size) -> (CutoutBatch, failures)."""

from __future__ import annotations

import numpy as np

from darkhaloscope.imaging.batch import ALL_BANDS_MISSING, CutoutBatch
from darkhaloscope.imaging.coadd import BrickImageSource
from darkhaloscope.imaging.sources import ImageSource, ServiceSource
from mock_survey.sky import MockSky
from tests.support.cutout_server import CutoutServer
from tests.test_mock_sky import DEC0, FOOT, RA0, catalog


def _check(source, ra, dec, size):
    assert isinstance(source, ImageSource) and isinstance(source.checkpoint_chunks, bool)
    batch, failures = source.cutouts(np.asarray(ra), np.asarray(dec), size)
    assert isinstance(batch, CutoutBatch) and len(batch) == len(ra)
    assert batch.image.shape == batch.invvar.shape == (len(ra), 3, size, size)
    assert failures.shape == (len(ra),) and failures.dtype == object
    return batch, failures


def test_mock_sky_coadd_mirror_and_service_share_the_protocol(tmp_path):
    sky = MockSky(catalog(), bricks=FOOT)
    batch, failures = _check(sky, [RA0, 10.0], [DEC0, -40.0], 33)
    assert failures.tolist() == ["", ""] and not sky.checkpoint_chunks
    assert batch.has_data().tolist() == [True, False] and batch.band_missing[1] == ALL_BANDS_MISSING

    mirror = BrickImageSource(str(tmp_path), bricks=FOOT)  # a mirror without files: no data, no failure
    batch, failures = _check(mirror, [RA0], [DEC0], 33)
    assert failures.tolist() == [""] and not batch.has_data()[0] and not mirror.checkpoint_chunks

    with CutoutServer(size=33) as srv:
        srv.script(11.0, 2.0, [404])
        service = ServiceSource(srv.base_url, max_retries=0)
        batch, failures = _check(service, [10.0, 11.0], [2.0, 2.0], 33)
    assert service.checkpoint_chunks and failures[0] == "" and failures[1].startswith("http_404")
    assert batch.has_data().tolist() == [True, False]
