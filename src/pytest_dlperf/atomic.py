"""Writing a file so that a reader sees the old content or the whole new one, never a part.

A child's result, a rank's result and a baseline file are read by another process (the parent,
the next run, a concurrent run) which may look at any moment, or after the writer was killed. So
each is written to a temporary file beside its target, flushed to disk, and renamed over it in one
step; on failure the temporary file goes and the target is left as it was. The file keeps the
target's permissions (a new one gets what ``open`` would give it), not the temporary file's 0600.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path


def write_atomically(path: str | os.PathLike[str], text: str) -> None:
    """Replace ``path``'s content with ``text`` (UTF-8) in one rename."""
    path = Path(path)
    mode = _mode_for(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            os.fchmod(fh.fileno(), mode)
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _mode_for(path: Path) -> int:
    """The permissions ``path`` has, or those a new file gets under this process's umask."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        umask = os.umask(0)  # the only portable way to read it is to set it
        os.umask(umask)
        return 0o666 & ~umask
