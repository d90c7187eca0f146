"""The paper's request-rate traces, shipped with the package as one compressed archive
(`traces.tar.xz`: train/, val/, test/; README.md here says what they are and where they come
from), and the folder they are unpacked to on first use: the default of every `--traces`,
`$TESTBED_TRACES` unset, and of a scenario's `traces_dir: package`."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path, PurePosixPath

from testbed.errors import StateError

__all__ = ["ARCHIVE", "PACKAGE", "packaged_traces", "traces_folder"]

ARCHIVE = Path(__file__).with_name("traces.tar.xz")
PACKAGE = "package"  # a scenario's `traces_dir:` for the traces shipped here
_SETS = ("train", "val", "test")
_MAX_BYTES = 64 * 2**20  # the nine traces unpack to 3.6 MB


def traces_folder(given: str | Path | None) -> Path:
    """The traces folder a command reads: `given` (--traces, $TESTBED_TRACES), else the paper's
    traces shipped with the package.

    given: the folder the user named, or None."""
    return packaged_traces() if given is None or str(given) == PACKAGE else Path(given)


def packaged_traces() -> Path:
    """The folder holding the paper's traces (train/, val/, test/), unpacked from ARCHIVE into the
    user's cache on first use; later calls find it there. StateError when it cannot be written."""
    data = ARCHIVE.read_bytes()
    folder = _cache_root() / f"traces-{hashlib.sha256(data).hexdigest()[:12]}"
    if not folder.is_dir():
        _unpack(data, folder)
    return folder


def _cache_root() -> Path:
    """$XDG_CACHE_HOME/testbed, else ~/.cache/testbed, else the temporary folder's testbed-cache
    (the first that can be written)."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    for root in ([Path(xdg)] if xdg else []) + [Path.home() / ".cache",
                                                Path(tempfile.gettempdir())]:
        try:
            (root / "testbed").mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(root / "testbed", os.W_OK):
            return root / "testbed"
    raise StateError("cannot write the traces' cache folder (XDG_CACHE_HOME, ~/.cache and the "
                     "temporary folder are read-only): pass --traces DIR or set TESTBED_TRACES")


def _unpack(data: bytes, folder: Path) -> None:
    """Unpack the archive's regular files under train/, val/ and test/ into `folder`, through a
    sibling temporary folder renamed into place (two processes at once: the first wins)."""
    import io
    import tarfile  # only the first time: `testbed --help` does not pay for it

    staging = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    total = 0
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:xz") as tar:
        for member in tar:
            name = PurePosixPath(member.name)
            if not member.isfile() or name.is_absolute() or ".." in name.parts \
                    or name.parts[0] not in _SETS:
                continue
            total += member.size
            if total > _MAX_BYTES:
                raise StateError(f"{ARCHIVE}: unpacks to more than {_MAX_BYTES} bytes")
            target = staging.joinpath(*name.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            assert source is not None  # a regular file
            target.write_bytes(source.read())
    try:
        staging.rename(folder)
    except OSError:  # another process unpacked it first
        if not folder.is_dir():
            raise
        _remove(staging)


def _remove(folder: Path) -> None:
    for p in sorted(folder.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        p.rmdir() if p.is_dir() else p.unlink()
    folder.rmdir()
