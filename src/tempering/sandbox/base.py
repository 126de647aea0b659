"""Types shared by every sandbox backend: limits, results, errors, the backend protocol, and the
`Sandbox` / `SandboxSession` protocols that callers (verifiers, agent environments) code against.

Nothing here imports torch or touches the system; see `tempering.sandbox` for the threat
model and `launch.py` for how a run is actually started, watched and cleaned up.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Protocol, Sequence, runtime_checkable

from tempering.errors import UserError

Status = Literal["ok", "nonzero_exit", "timeout", "memory_limit", "output_limit", "sandbox_error"]
STATUSES: tuple[str, ...] = ("ok", "nonzero_exit", "timeout", "memory_limit", "output_limit", "sandbox_error")

MiB = 1024 * 1024


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot serve work here (missing tool, no root, failed self-check).

    Raised instead of running anything: a sandbox that cannot prove its isolation refuses.
    """


class SandboxFailure(RuntimeError):
    """The sandbox machinery failed during one run; reported as status `sandbox_error`."""


@dataclass(frozen=True)
class Limits:
    """Resource limits for one run. Every field can be set per call."""

    wall_s: float = 10.0
    """Wall-clock limit in seconds; the whole process tree is killed when it passes."""
    cpu_s: float = 10.0
    """CPU seconds, summed over all processes of the run (cgroup cpuacct) and per process (RLIMIT_CPU)."""
    memory_bytes: int = 256 * MiB
    """Total memory of all processes of the run, tmpfs pages included (memory cgroup)."""
    processes: int = 64
    """Processes and threads the program may have at once (pids cgroup and RLIMIT_NPROC)."""
    file_bytes: int = 16 * MiB
    """Largest file the program may write (RLIMIT_FSIZE)."""
    scratch_bytes: int = 32 * MiB
    """Size of the writable work dir `/work`; `/tmp` and `/dev/shm` get the same size each."""
    output_bytes: int = 1 * MiB
    """Bytes kept of stdout and of stderr each; more ends the run with status `output_limit`."""
    open_files: int = 256
    """Open file descriptors per process (RLIMIT_NOFILE)."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if (
                not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value <= 0
            ):  # NaN compares False with everything: it would pass `<= 0` and never fire
                raise UserError(f"Limits.{f.name} must be a finite positive number, got {value!r}")
        if self.open_files < 16:
            raise UserError(f"Limits.open_files must be >= 16, got {self.open_files}")

    def replace(self, **changes: float) -> Limits:
        """A copy with some fields changed (unknown names raise TypeError)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def parse(cls, text: str) -> Limits:
        """Parse `wall_s=5,memory_bytes=128M` (suffixes K, M, G for byte fields)."""
        names = {f.name: f for f in dataclasses.fields(cls)}
        changes: dict[str, Any] = {}  # seconds as float, the rest as int
        for item in filter(None, (p.strip() for p in text.split(","))):
            key, sep, raw = item.partition("=")
            if not sep or key not in names:
                raise UserError(f"bad limit {item!r}; expected one of {sorted(names)} as key=value")
            mult = {"K": 1024, "M": MiB, "G": 1024 * MiB}.get(raw[-1:].upper(), 1)
            try:
                number = float(raw[:-1] if mult > 1 else raw)
            except ValueError:
                raise UserError(f"bad limit {item!r}: {raw!r} is not a number") from None
            if not math.isfinite(number):
                raise UserError(f"bad limit {item!r}: Limits.{key} must be a finite positive number")
            changes[key] = number * mult if key.endswith(("_s",)) else int(number * mult)
        return cls(**changes)


@dataclass
class ExecResult:
    """What one run produced. `status` says how it ended; `sandbox_error` is never the program's fault."""

    status: Status
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    wall_s: float = 0.0
    cpu_s: float | None = None
    peak_memory_bytes: int | None = None
    files: dict[str, bytes] = field(default_factory=dict)
    """Files collected from the work dir after the run (see `collect=`)."""
    error: str = ""
    """Why the sandbox failed (status `sandbox_error`) or which limit ended the run."""
    backend: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["files"] = {k: v.decode("utf-8", "replace") for k, v in self.files.items()}
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


@dataclass(frozen=True)
class Job:
    """One program to start, as a backend sees it (paths are host paths unless noted)."""

    argv: tuple[str, ...]
    """The program and its arguments, as seen inside the sandbox."""
    env: dict[str, str]
    uid: int
    gid: int
    workdir: str
    """Host directory mounted as the writable work dir."""
    limits: Limits

    def __post_init__(self) -> None:
        # Every launch is built from a Job, so this is the one place that refuses strings
        # no backend can pass on faithfully: bwrap reads its options NUL-separated from a
        # memfd, so a NUL in an env value would start a new option (`--bind / /host`);
        # nsjail and execve take `KEY=VALUE`, so `=` in a key would move the split.
        for i, arg in enumerate(self.argv):
            if not isinstance(arg, str) or "\0" in arg:
                raise ValueError(f"sandbox argv[{i}] must be a string without NUL bytes, got {arg!r:.80}")
        for key, value in self.env.items():
            if not isinstance(key, str) or not key or "\0" in key or "=" in key:
                raise ValueError(f"sandbox env name {key!r:.80} must be a non-empty string without NUL or '='")
            if not isinstance(value, str) or "\0" in value:
                raise ValueError(f"sandbox env value of {key} must be a string without NUL bytes, got {value!r:.80}")


@dataclass
class Launch:
    """How to start a job: the host command line, plus the backend's start-up report channel."""

    argv: list[str]
    env: dict[str, str]
    cwd: str = "/"
    pass_fds: tuple[int, ...] = ()
    report_fd: int | None = None
    """Read end of a pipe the backend writes to once the sandbox is set up (None: trust exec)."""


class Backend(Protocol):
    """A way to start a `Job` in isolation. Implementations: bwrap, nsjail, unsafe-local."""

    name: str
    isolated: bool
    """False only for `unsafe-local`, which skips the self-check and warns on every run."""

    def unavailable_reason(self) -> str | None:
        """None when usable here, else a sentence saying what is missing."""
        ...

    def prepare(self, job: Job) -> Launch:
        """Build the host command line for `job`. May create pipes (closed by the caller)."""
        ...

    def parse_report(self, report: bytes) -> tuple[bool, int | None]:
        """(sandbox set up and program started?, program exit code if the backend knows it)."""
        ...


@runtime_checkable
class SandboxSession(Protocol):
    """One agent episode's sandbox: a /work that persists across `exec` calls until `close()`.

    What an environment needs between model turns: run a command, put files in, read
    results out, list what is there. Processes never outlive a call; files do.
    """

    def exec(
        self,
        command: str | Sequence[str] | None = None,
        *,
        code: str | None = None,
        files: Mapping[str, bytes | str] | None = None,
        limits: Limits | None = None,
        stdin: bytes = b"",
        env: Mapping[str, str] | None = None,
        collect: Sequence[str] = (),
    ) -> ExecResult:
        """Run a bash command line (str), an argv (list) or Python `code` in /work."""
        ...

    def read_file(self, path: str, max_bytes: int | None = None) -> bytes | None:
        """A regular file under /work (None if missing, a link or not a regular file)."""
        ...

    def write_file(self, path: str, content: bytes | str) -> None:
        """Write one file under /work (relative path)."""

    def write_files(self, files: Mapping[str, bytes | str]) -> None:
        """Write several files under /work."""

    def list_files(self) -> list[str]:
        """Relative paths of the regular files under /work."""
        ...

    def close(self) -> None:
        """Discard /work and release the session's resources (idempotent)."""

    def __enter__(self) -> SandboxSession: ...

    def __exit__(self, *exc: object) -> None: ...


@runtime_checkable
class Sandbox(Protocol):
    """Where untrusted code runs. `SandboxPool` is the local implementation; a remote or VM
    backend (a Ray actor, Firecracker) implements the same four methods.

    `exec` runs one program in a fresh, empty /work and returns how it ended (never raising
    for what the program did); `session` opens a persistent /work for multi-turn agents.
    """

    def exec(
        self,
        command: str | Sequence[str] | None = None,
        *,
        code: str | None = None,
        files: Mapping[str, bytes | str] | None = None,
        limits: Limits | None = None,
        stdin: bytes = b"",
        env: Mapping[str, str] | None = None,
        collect: Sequence[str] = (),
    ) -> ExecResult:
        """Run a bash command line (str), an argv (list) or Python `code` in isolation."""
        ...

    def session(self, limits: Limits | None = None) -> SandboxSession:
        """Open a session; close it (or use it as a context manager) when the episode ends."""
        ...

    def health(self) -> dict:
        """Counters and state for monitoring (runs by status, free and broken slots, ...)."""
        ...

    def close(self) -> None:
        """Release everything; runs in flight must have ended."""
