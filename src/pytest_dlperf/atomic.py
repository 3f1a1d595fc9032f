"""Writing a file so that a reader sees the old content or the whole new one, never a part.

A child's result, a rank's result and a baseline file are read by another process (the parent,
the next run, a concurrent run) which may look at any moment, or after the writer was killed. So
each is written to a temporary file beside its target, flushed to disk, and renamed over it in one
step; on failure the temporary file goes and the target is left as it was.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomically(path: str | os.PathLike[str], text: str) -> None:
    """Replace ``path``'s content with ``text`` (UTF-8) in one rename."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
