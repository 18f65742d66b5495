"""Writing results so that no reader, and no rerun, ever sees half of one.

Every file a stage leaves behind is written to a temporary beside it
(``.NAME.PID.tmp``), flushed to disk, renamed over the destination, and its
folder synced: a stage killed at any moment leaves the old file or the new one,
never a torn one that Snakemake would take for finished. A temporary left by a
killed writer is removed by the next writer of the same file once its PID no
longer runs. Folders (merged models, the viewer's site) are built under a
temporary folder of the same name and swapped in.

One home for this, so that every writer has the same names and the same care.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def temporary_for(path: Path) -> Path:
    """The temporary this process writes ``path`` through."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def remove_stale_temporaries(folder: Path, name: str) -> None:
    """Delete ``.<name>.<pid>.tmp`` files and folders whose writer no longer runs (a killed write)."""
    for tmp in folder.glob(f".{name}.*.tmp"):
        pid = tmp.name[:-len(".tmp")].rsplit(".", 1)[-1]
        if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True) if tmp.is_dir() else tmp.unlink(missing_ok=True)


def fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path: Path | str) -> Iterator[Path]:
    """A temporary path to write ``path`` through; renamed into place when the block succeeds.

    For writers this process holds no file handle of (the GGUF converter, llama.cpp's
    quantiser): they write the temporary, and a failure leaves ``path`` untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path.parent, path.name)
    tmp = temporary_for(path)
    try:
        yield tmp
        os.replace(tmp, path)
        fsync_dir(path.parent)
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def atomic_open(path: Path | str, mode: str = "w", *, encoding: str | None = "utf-8",
                newline: str | None = None) -> Iterator[IO[Any]]:
    """Open ``path`` for writing through a temporary; renamed into place when the block succeeds.

    ``mode`` is ``"w"`` (text) or ``"wb"``. If the block raises, ``path`` is untouched.
    """
    binary = "b" in mode
    with atomic_path(path) as tmp, open(tmp, mode, encoding=None if binary else encoding,
                                        newline=None if binary else newline) as fh:
        yield fh
        fh.flush()
        os.fsync(fh.fileno())


def write_text(path: Path | str, text: str) -> Path:
    """Write ``text`` (UTF-8, newlines as given) to ``path`` atomically."""
    with atomic_open(path, newline="") as fh:
        fh.write(text)
    return Path(path)


@contextmanager
def atomic_dir(path: Path | str) -> Iterator[Path]:
    """A temporary folder to fill; it replaces ``path`` (and whatever was there) when the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path.parent, path.name)
    tmp = temporary_for(path)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    old = path.with_name(f".{path.name}.old.{os.getpid()}.tmp")
    try:
        yield tmp
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
        fsync_dir(path.parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)


def lock_path(path: Path | str) -> Path:
    """The sidecar beside ``path`` (``.<name>.lock``) that an OS lock on ``path`` is held on."""
    path = Path(path)
    return path.with_name(f".{path.name}.lock")


@contextmanager
def sidecar_lock(path: Path, on_busy: Callable[[], None]) -> Iterator[None]:
    """Hold the exclusive flock of ``path``'s sidecar (:func:`lock_path`; left in place, empty).

    When another process holds it, ``on_busy()`` is called first (it raises to refuse, or says
    that this one waits) and the lock is then awaited. Closing the only descriptor releases it.
    """
    from metrobench.errors import MetrobenchError

    sidecar = lock_path(path)
    try:
        sidecar.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(sidecar, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise MetrobenchError(f"{path}: cannot create the lock file {sidecar}: {exc.strerror}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            on_busy()
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
