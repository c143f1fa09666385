"""Reading survey files from a local folder or a pyarrow filesystem (``s3://`` mirrors).

A location is a pair (filesystem, path): filesystem None means the local disk.
"""

from __future__ import annotations

import io
import os

from ..errors import InputError


def split_uri(root: str, filesystem=None):
    """(filesystem or None for local, path) for a local folder or a URI such as ``s3://bucket/dr10``."""
    if filesystem is not None:
        return filesystem, root
    if "://" in root:
        from pyarrow import fs as pafs

        return pafs.FileSystem.from_uri(root)
    return None, root


def read_bytes(path: str, filesystem) -> bytes:
    """The whole file at ``path`` on a pyarrow filesystem."""
    with filesystem.open_input_stream(path) as f:
        return f.read()


def file_exists(path: str, filesystem) -> bool:
    """True when ``path`` is a file (local when ``filesystem`` is None)."""
    if filesystem is None:
        return os.path.isfile(path)
    from pyarrow import fs as pafs

    return filesystem.get_file_info(path).type == pafs.FileType.File


def open_image_fits(path: str, filesystem):
    """The HDU list of a coadd image file whose image is in HDU 1 (fpack-compressed or plain);
    InputError naming the file when it cannot be read or has no HDU 1. The caller closes it."""
    from astropy.io import fits

    src = path if filesystem is None else io.BytesIO(read_bytes(path, filesystem))
    try:
        hdul = fits.open(src)
    except OSError as exc:
        raise InputError(f"cannot read coadd file {path}: {exc}") from exc
    if len(hdul) < 2:
        n = len(hdul)
        hdul.close()
        raise InputError(f"{path}: expected the image in HDU 1, file has {n} HDU(s)")
    return hdul
