"""The writable work dir of a run or session: a size-capped tmpfs mounted on the host.

It is mounted by the (root) harness under /run/tempering-sandbox/scratch/<random>, owned by
the run's uid, mode 0700, nosuid/nodev, with a byte and an inode cap, and bind-mounted as
`/work` inside the sandbox. Files go in before a run and come out after it; a session keeps
one across calls. A pool slot reuses one scratch for all its runs (named s<pid>-<uid>):
`reset()` between runs deletes everything the last run left (as root, never following a
link, iteratively: no recursion a deep tree could exhaust), verifies the tmpfs is empty (no
entry, no used block) and restores the root's owner and mode, so no file of one run is seen
by the next. A tree deeper than `CLEAN_MAX_DEPTH`, or any failure, makes the pool `remount()`
a fresh tmpfs instead.

Sandboxed programs can leave symlinks, FIFOs and devices-that-are-not here, so the harness
(which runs as root) never follows a link while reading or writing: every path is walked one
component at a time with O_NOFOLLOW relative to the scratch root, and only regular files are
read, up to a cap.
"""

from __future__ import annotations

import ctypes
import errno
import os
import secrets
import stat

from tempering.sandbox.base import SandboxFailure, SandboxUnavailable

SCRATCH_BASE = "/run/tempering-sandbox/scratch"
MS_NOSUID, MS_NODEV, MS_REMOUNT = 0x2, 0x4, 0x20
MNT_DETACH = 0x2
CLEAN_MAX_DEPTH = 64
"""Deeper trees are not walked when emptying a reused scratch: the tmpfs is remounted instead."""
LIST_MAX_DEPTH, LIST_MAX_ENTRIES = 64, 100_000
_libc = ctypes.CDLL(None, use_errno=True)


def _check_relpath(path: str) -> list[str]:
    parts = path.split("/")
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\0" in path:
        raise ValueError(f"sandbox file path must be relative, without '..' or empty parts: {path!r}")
    return parts


class Scratch:
    """A host tmpfs for one run or session. Use `Scratch.create(...)`, then `destroy()`."""

    def __init__(self, path: str, uid: int, gid: int, size_bytes: int = 0):
        self.path, self.uid, self.gid, self.size_bytes = path, uid, gid, size_bytes

    @classmethod
    def create(cls, uid: int, gid: int, size_bytes: int, name: str | None = None) -> Scratch:
        try:
            os.makedirs(SCRATCH_BASE, mode=0o711, exist_ok=True)
            os.chmod(SCRATCH_BASE, 0o711)  # bwrap runs as the slot uid and must reach its dir
            os.chmod(os.path.dirname(SCRATCH_BASE), 0o711)
            path = f"{SCRATCH_BASE}/{name or f'{os.getpid()}-{secrets.token_hex(8)}'}"
            os.mkdir(path, 0o700)
        except PermissionError as e:
            raise SandboxUnavailable(f"cannot create {SCRATCH_BASE}: {e} (the sandbox must run as root)") from e
        if _libc.mount(b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, _opts(size_bytes, uid, gid)) != 0:
            err = ctypes.get_errno()
            os.rmdir(path)
            raise SandboxFailure(f"cannot mount scratch tmpfs at {path}: {os.strerror(err)}")
        return cls(path, uid, gid, size_bytes)

    def reset(self, size_bytes: int) -> None:
        """Empty a reused scratch for the next run and verify it; SandboxFailure if it stays dirty.

        The walk is iterative and gives up past `CLEAN_MAX_DEPTH` levels (a program can nest
        directories thousands deep; recursion would raise RecursionError): the caller then
        unmounts the tmpfs and mounts a fresh one, which is always clean.
        """
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            try:
                _empty_dir(fd)
                for attr in os.listxattr(fd):
                    os.removexattr(fd, attr)
                os.fchown(fd, self.uid, self.gid)
                os.fchmod(fd, 0o700)
                vfs = os.fstatvfs(fd)
                if os.listdir(fd) or vfs.f_bfree != vfs.f_blocks:
                    raise SandboxFailure(f"scratch {self.path} is not empty after cleaning")
            finally:
                os.close(fd)
        except (OSError, RecursionError) as e:
            raise SandboxFailure(f"cannot clean scratch {self.path}: {e}") from e
        if size_bytes != self.size_bytes:
            flags = MS_REMOUNT | MS_NOSUID | MS_NODEV
            if _libc.mount(b"tmpfs", self.path.encode(), b"tmpfs", flags, _opts(size_bytes, self.uid, self.gid)) != 0:
                raise SandboxFailure(f"cannot resize scratch {self.path}: {os.strerror(ctypes.get_errno())}")
            self.size_bytes = size_bytes

    def remount(self, size_bytes: int) -> None:
        """Replace the tmpfs by a fresh, empty one at the same path (whatever the old one holds)."""
        if _libc.umount2(self.path.encode(), MNT_DETACH) != 0:
            err = ctypes.get_errno()
            if err not in (errno.EINVAL, errno.ENOENT):
                raise SandboxFailure(f"cannot unmount scratch {self.path}: {os.strerror(err)}")
        os.makedirs(self.path, mode=0o700, exist_ok=True)
        if (
            _libc.mount(
                b"tmpfs", self.path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, _opts(size_bytes, self.uid, self.gid)
            )
            != 0
        ):
            raise SandboxFailure(f"cannot mount scratch tmpfs at {self.path}: {os.strerror(ctypes.get_errno())}")
        self.size_bytes = size_bytes

    def destroy(self) -> None:
        if _libc.umount2(self.path.encode(), MNT_DETACH) != 0:
            err = ctypes.get_errno()
            if err not in (errno.EINVAL, errno.ENOENT):
                raise SandboxFailure(f"cannot unmount scratch {self.path}: {os.strerror(err)}")
        try:
            os.rmdir(self.path)
        except FileNotFoundError:
            pass

    def _open_dir(self, parts: list[str], create: bool) -> int:
        """fd of the directory holding `parts[-1]`, walked without following links."""
        fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            for part in parts[:-1]:
                if create:
                    try:
                        os.mkdir(part, 0o755, dir_fd=fd)
                        os.chown(part, self.uid, self.gid, dir_fd=fd, follow_symlinks=False)
                    except FileExistsError:
                        pass
                nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = nxt
            return fd
        except BaseException:
            os.close(fd)
            raise

    def write(self, files: dict[str, bytes | str]) -> None:
        """Write files (relative paths) owned by the run's uid; an existing link is replaced, not followed."""
        for rel, content in files.items():
            parts = _check_relpath(rel)
            data = content.encode() if isinstance(content, str) else bytes(content)
            try:
                dfd = self._open_dir(parts, create=True)
            except OSError as e:
                raise ValueError(f"cannot create the directories of sandbox file {rel!r}: {e}") from e
            try:
                try:
                    st = os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
                    if not stat.S_ISREG(st.st_mode):
                        os.unlink(parts[-1], dir_fd=dfd)
                except FileNotFoundError:
                    pass
                flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK
                fd = os.open(parts[-1], flags, 0o644, dir_fd=dfd)
                try:
                    os.fchown(fd, self.uid, self.gid)
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view) :]
                except OSError as e:
                    if e.errno == errno.ENOSPC:
                        raise ValueError(f"sandbox files do not fit in the scratch size limit (at {rel!r})") from e
                    raise
                finally:
                    os.close(fd)
            finally:
                os.close(dfd)

    def read(self, rel: str, max_bytes: int) -> bytes | None:
        """A regular file's first `max_bytes` bytes, or None if missing, a link or not a regular file."""
        parts = _check_relpath(rel)
        try:
            dfd = self._open_dir(parts, create=False)
        except OSError:
            return None
        try:
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
        except OSError:
            return None
        finally:
            os.close(dfd)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            chunks, left = [], max_bytes
            while left > 0:
                chunk = os.read(fd, min(left, 1 << 20))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def listing(self, max_depth: int = LIST_MAX_DEPTH, max_entries: int = LIST_MAX_ENTRIES) -> list[str]:
        """Relative paths of regular files, walked iteratively without following links.

        Directories deeper than `max_depth` are not entered and at most `max_entries` entries
        are looked at, so a hostile tree costs bounded time and never recursion.
        """
        out: list[str] = []
        seen = 0
        stack: list[tuple[str, int]] = [("", 0)]
        root = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            while stack and seen < max_entries:
                rel, depth = stack.pop()
                try:
                    fd = (
                        os.open(rel, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=root) if rel else os.dup(root)
                    )
                except OSError:
                    continue
                try:
                    with os.scandir(fd) as entries:
                        for entry in entries:
                            seen += 1
                            if seen > max_entries:
                                break
                            path = f"{rel}/{entry.name}" if rel else entry.name
                            if entry.is_file(follow_symlinks=False):
                                out.append(path)
                            elif entry.is_dir(follow_symlinks=False) and depth + 1 < max_depth:
                                stack.append((path, depth + 1))
                finally:
                    os.close(fd)
        finally:
            os.close(root)
        return sorted(out)


def _empty_dir(root_fd: int, max_depth: int | None = None) -> None:
    """Delete everything under the directory `root_fd`, iteratively, never following a link.

    Raises SandboxFailure past `max_depth` levels (default CLEAN_MAX_DEPTH): the caller remounts.
    """
    max_depth = CLEAN_MAX_DEPTH if max_depth is None else max_depth
    stack: list[tuple[int, str, list[str]]] = []  # (dir fd, its name in the parent, subdirs left)

    def enter(fd: int, name: str) -> None:
        subdirs = []
        try:
            for entry in os.listdir(fd):
                if stat.S_ISDIR(os.stat(entry, dir_fd=fd, follow_symlinks=False).st_mode):
                    subdirs.append(entry)
                else:
                    os.unlink(entry, dir_fd=fd)
        except BaseException:
            os.close(fd)
            raise
        stack.append((fd, name, subdirs))

    try:
        enter(os.dup(root_fd), "")
        while stack:
            fd, name, subdirs = stack[-1]
            if subdirs:
                if len(stack) > max_depth:
                    raise SandboxFailure(f"directory tree deeper than {max_depth} levels")
                child = subdirs.pop()
                enter(os.open(child, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd), child)
                continue
            stack.pop()
            os.close(fd)
            if stack:
                os.rmdir(name, dir_fd=stack[-1][0])
    finally:
        for fd, _, _ in stack:
            os.close(fd)


def _opts(size_bytes: int, uid: int, gid: int) -> bytes:
    inodes = max(1024, size_bytes // 4096)
    return f"size={size_bytes},nr_inodes={inodes},mode=0700,uid={uid},gid={gid}".encode()


def scratch_mounts() -> list[str]:
    """Scratch tmpfs mounts that exist now (for leak checks)."""
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f if line.split()[4].startswith(SCRATCH_BASE + "/")]
