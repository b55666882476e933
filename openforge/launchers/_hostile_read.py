"""Reading a file the agent controls, from a process that must not trust it: the one reader the
driver's ``Sandbox.read_file`` (both launchers), the claw checks, the workdir copy for a host verifier
and the Kubernetes pod agent use.

Owns: :class:`FileRefused`, :func:`read_hostile`, :func:`open_dir_at`, :func:`open_regular_at`,
:func:`read_capped_fd`, :data:`DEFAULT_MAX_BYTES`.

The guarantees, whatever the agent left at the path:

* **nothing is followed below the root**: each component under ``root`` is opened relative to its
  parent's descriptor without following a symlink (``O_NOFOLLOW``), so a link to ``/etc/shadow``, to a
  driver file or to another rollout's workdir is refused, even one swapped in while the walk runs. The
  ``root`` itself is the caller's (a directory the driver made); the path may not climb out of it.
* **nothing blocks**: the file is first pinned with ``O_PATH`` (no open side effect, no wait) and
  only a regular file is opened for reading, with ``O_NONBLOCK``; a FIFO, socket, device or directory
  is refused without being opened.
* **nothing is read whole**: a file larger than ``max_bytes`` (by ``fstat``, or by what a read
  returns if it grows meanwhile) is refused after at most ``max_bytes + 1`` bytes.

A refusal is :class:`FileRefused` (the agent's doing); an absent file is the ``FileNotFoundError``
the kernel gives (also when a component is a file, not a folder). Stdlib only, and no imports from
openforge: the Kubernetes launcher ships this module's source inside the pod agent's
(``k8s_manifests.agent_source``), so the pod runs the same checks.
"""

from __future__ import annotations

import errno
import os
import stat

__all__ = ["DEFAULT_MAX_BYTES", "FileRefused", "open_dir_at", "open_regular_at", "read_capped_fd", "read_hostile"]

#: What ``Sandbox.read_file`` reads at most by default (``max_bytes=`` raises it): verifiers' result files
#: are small, and the driver holds what it reads in memory.
DEFAULT_MAX_BYTES = 16 << 20

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
#: Pin without opening for I/O (Linux): a FIFO does not wait for a writer, a device's driver is not called.
_PIN = getattr(os, "O_PATH", os.O_RDONLY | os.O_NONBLOCK) | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1 << 20
_KINDS = ((stat.S_ISLNK, "a symbolic link (not followed)"), (stat.S_ISDIR, "a directory"),
          (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"))


class FileRefused(ValueError):
    """A file the agent left that the driver will not read: not a regular file (a symlink, FIFO, socket,
    device or directory), larger than the cap, or made unreadable. ``path`` is the path as asked for,
    ``why`` the reason in plain words."""

    def __init__(self, path: str, why: str):
        super().__init__(f"{path}: {why}")
        self.path, self.why = path, why

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return type(self), (self.path, self.why)


def _kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def open_dir_at(name: str, dir_fd: int, shown: str) -> int:
    """A descriptor of the directory ``name`` in ``dir_fd``, opened without following a link.
    :class:`FileRefused` for a symlink or an unreadable directory; ``FileNotFoundError`` if absent or
    not a directory (a file where a folder was expected: the path is not there)."""
    try:
        return os.open(name, _DIR, dir_fd=dir_fd)
    except PermissionError as e:
        raise FileRefused(shown, "a directory the driver may not search (the agent changed its mode)") from e
    except OSError as e:
        if e.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        try:
            mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
        except OSError:
            raise e from None
        if stat.S_ISLNK(mode):
            raise FileRefused(shown, f"{name!r} on the way is a symbolic link (not followed)") from None
        raise FileNotFoundError(errno.ENOENT, f"{name!r} on the way is not a directory", shown) from None


def open_regular_at(name: str, dir_fd: int, shown: str, max_bytes: int | None = None) -> tuple[int, os.stat_result]:
    """A read descriptor (and its ``fstat``) of the regular file ``name`` in ``dir_fd``: pinned first
    with ``O_PATH`` and checked, then opened ``O_NOFOLLOW | O_NONBLOCK`` and checked to be the same
    file. :class:`FileRefused` for anything but a regular file of at most ``max_bytes``."""
    try:
        pin = os.open(name, _PIN, dir_fd=dir_fd)  # FileNotFoundError passes through: the agent did not write it
    except PermissionError as e:
        raise FileRefused(shown, "in a directory the driver may not search (the agent changed its mode)") from e
    try:
        st = os.fstat(pin)
        if not stat.S_ISREG(st.st_mode):
            raise FileRefused(shown, _kind(st.st_mode))
        if max_bytes is not None and st.st_size > max_bytes:
            raise FileRefused(shown, f"{st.st_size} bytes, more than the {max_bytes} read at most")
        try:
            fd = os.open(name, _READ, dir_fd=dir_fd)
        except PermissionError as e:
            raise FileRefused(shown, "not readable by the driver (the agent changed its mode)") from e
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENXIO, errno.ENOENT):
                raise FileRefused(shown, "replaced while it was being opened") from e
            raise
    finally:
        os.close(pin)
    now = os.fstat(fd)
    if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(now.st_mode):
        os.close(fd)
        raise FileRefused(shown, "replaced while it was being opened")
    return fd, now


def read_capped_fd(fd: int, max_bytes: int, shown: str) -> bytes:
    """At most ``max_bytes`` of ``fd``; :class:`FileRefused` if there is more (reads ``max_bytes + 1``)."""
    buf = bytearray()
    while len(buf) <= max_bytes:
        chunk = os.read(fd, min(_CHUNK, max_bytes + 1 - len(buf)))
        if not chunk:
            return bytes(buf)
        buf += chunk
    raise FileRefused(shown, f"more than the {max_bytes} bytes read at most (it grew while being read)")


def _parts(path: str, root: str, shown: str) -> list[str]:
    """The components of ``path`` below ``root`` (lexically: nothing below is ever followed)."""
    full = os.path.normpath(os.path.join(root, path))
    rel = os.path.relpath(full, root)
    if rel == ".":
        raise FileRefused(shown, "a directory")
    if rel == ".." or rel.startswith("../"):
        raise ValueError(f"{shown} is outside {root}")
    return rel.split("/")


def read_hostile(path: str | os.PathLike[str], *, root: str | os.PathLike[str], max_bytes: int = DEFAULT_MAX_BYTES,
                 shown: str | None = None) -> bytes:
    """The bytes of the regular file at ``path`` (relative: to ``root``; absolute: inside ``root``),
    read with the module's guarantees. ``root`` is a directory the caller trusts (opened as given).
    Raises :class:`FileRefused`, ``FileNotFoundError`` (absent), ``ValueError`` (``path`` is not
    inside ``root``), or ``OSError`` for what is nobody's doing (an I/O error)."""
    root = os.path.abspath(os.fspath(root))
    shown = shown if shown is not None else os.fspath(path)
    parts = _parts(os.fspath(path), root, shown)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in parts[:-1]:
            nxt = open_dir_at(name, fd, shown)
            os.close(fd)
            fd = nxt
        rfd, _ = open_regular_at(parts[-1], fd, shown, max_bytes)
    finally:
        os.close(fd)
    try:
        return read_capped_fd(rfd, max_bytes, shown)
    finally:
        os.close(rfd)
