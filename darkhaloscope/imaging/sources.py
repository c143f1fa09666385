"""The image-source protocol every imaging source implements, and the cutout-service source.

Sources: :class:`~darkhaloscope.imaging.coadd.BrickImageSource` (a DR10 coadd mirror),
:class:`~mock_survey.sky.MockSky` (the mock survey's sky) and :class:`ServiceSource`
(a Legacy Surveys cutout service). Callers use only :class:`ImageSource`; none asks which it has.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from ..constants import STAMP_SIZE
from .batch import CutoutBatch


@runtime_checkable
class ImageSource(Protocol):
    """Anything that cuts g, r, z stamps around sky positions.

    ``cutouts(ra, dec, size)``: ra, dec (N,) in degrees, size in pixels; returns
    ``(CutoutBatch, failures)`` where ``failures`` is an (N,) object array of messages, '' for a
    target that was cut. A failed target's stamp is zeros with invvar 0 and must not be used as data.
    ``checkpoint_chunks``: True when each cutout is expensive to obtain again (a network service),
    so a caller commits chunks as they arrive and a rerun resumes from them.
    """

    checkpoint_chunks: bool

    def cutouts(self, ra, dec, size: int = STAMP_SIZE) -> tuple[CutoutBatch, np.ndarray]: ...


class ImageSourceOpener(Protocol):
    """Plain, picklable settings from which any process (the Dagster one, a Spark executor, a
    Pipes worker on another host) opens the same image source, never a live client shipped from
    elsewhere (threads, HTTP sessions, open files). ``to_dict`` is their JSON form.

    For coadd bricks, ``with_maskbits`` False skips the maskbits file (one of a brick's 7 files) and
    ``invvar_centre_only`` reads the inverse variances at the stamp centres only, for readers that
    use no more (the search); other sources may ignore both."""

    def open(self, with_maskbits: bool = True, invvar_centre_only: bool = False) -> ImageSource: ...

    def to_dict(self) -> dict: ...


def no_failures(n: int) -> np.ndarray:
    """The failure messages of a batch where every target was cut: (n,) object array of ''."""
    return np.full(n, "", dtype=object)


class ServiceSource:
    """Cutouts from a Legacy Surveys cutout service (``{base_url}/fits-cutout``).

    ``client_options``: keyword arguments of :class:`~darkhaloscope.imaging.service.CutoutServiceClient`
    (layer, max_concurrency, timeout_s, max_retries, ...). Each call opens a client for the
    requested stamp size and closes it (worker threads and HTTP sessions) when the batch is done.
    The service resamples onto a grid centred on the target, so ``dx = dy = 0``; it sends no
    maskbits. A target it cannot deliver is a failure, never a zero stamp passed off as data.
    """

    checkpoint_chunks = True

    def __init__(self, base_url: str, **client_options):
        self.base_url = base_url
        self.client_options = client_options

    def cutouts(self, ra, dec, size: int = STAMP_SIZE) -> tuple[CutoutBatch, np.ndarray]:
        """Cutouts and a per-target failure message array ('' = fetched)."""
        from .service import CutoutServiceClient

        ra = np.atleast_1d(np.asarray(ra, float))
        dec = np.atleast_1d(np.asarray(dec, float))
        out = CutoutBatch.empty(len(ra), size, with_maskbits=False)
        failed = no_failures(len(ra))
        with CutoutServiceClient(self.base_url, size=size, **self.client_options) as client:
            outcome = client.fetch_many([(str(i), r, d) for i, (r, d) in enumerate(zip(ra, dec))])
        for res in outcome.results:
            i = int(res.key)
            out.image[i] = res.image
            if res.invvar is not None:
                out.invvar[i] = res.invvar
        for f in outcome.failures:
            failed[int(f.key)] = f"{f.kind}: {f.message}"
        return out, failed
