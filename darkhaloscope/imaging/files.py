"""Reading survey files from a local folder or a pyarrow filesystem (``s3://`` mirrors).

A location is a pair (filesystem, path): filesystem None means the local disk.
"""

from __future__ import annotations

import os


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
