"""Verifiers with a deadline: scored in persistent worker processes that are killed on overrun.

Some verifiers run library code whose cost the completion chooses (math-verify hands a
`\\boxed{(10^{7})!}` to sympy, which computes it). In-process, such a call cannot be
interrupted, and in RL it would hold a reward thread for good. A verifier registered with
`register(name, deadline_s=...)` is instead scored here:

    with BoundedWorkers(size=4) as workers:
        reward = workers.score("math", spec, completion, deadline_s=5.0)

Each worker is a plain Python process started once and reused (a process per call would
pay the library import every time); one call at a time per worker, `size` at most. A call
past its deadline gets its worker SIGKILLed (with everything it started) and a
`Reward(value=0, flags=["timeout"])`; a fresh worker replaces it on the next call, so later
answers are scored as if the bomb never came. A worker that dies mid-call (its memory cap,
`MEMORY_BYTES`, reached) gives `flags=["worker_died"]`, value 0.

What this isolates: time and memory. What it does not: the worker runs as the host user
with the host's files and network, so only verifiers that never *execute* the completion
(they parse it) may be bounded this way. Verifiers that can execute it (`code`,
`reasoning_gym`) run in the sandbox instead.
"""

from __future__ import annotations

import json
import os
import resource
import selectors
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from tempering.types import Reward
from tempering.verifiers.errors import VerifierContextClosed, VerifierError

MEMORY_BYTES = 4 * 1024**3
"""Address-space cap of a worker (RLIMIT_AS): a bomb that allocates is killed, not the host."""
START_S = 120.0
"""How long a new worker may take to import its libraries (not counted against a call's deadline)."""


class BoundedWorkers:
    """At most `size` worker processes scoring bounded verifiers, each call under a deadline; thread-safe.

    Args:
        size: concurrent calls (and worker processes at most).
    """

    def __init__(self, size: int = 4):
        if size < 1:
            raise ValueError(f"size must be at least 1, got {size}")
        self._idle: list[_Worker] = []
        self._slots = threading.BoundedSemaphore(size)
        self._lock = threading.Lock()
        self._closed = False
        self.replaced = 0
        """Workers killed on a deadline or found dead (each is replaced by the next call)."""

    def score(self, kind: str, spec: dict[str, Any], completion: str, deadline_s: float) -> Reward:
        """Score with the verifier `kind` in a worker; past `deadline_s` the worker is killed.

        Raises:
            KeyError, ValueError: the spec is bad (as the verifier raised them).
            VerifierError: the verifier failed, or no worker could start.
        """
        if not 0 < deadline_s < float("inf"):
            raise ValueError(f"a deadline must be a positive number of seconds, got {deadline_s}")
        with self._slots:
            worker = self._take()
            try:
                reply = worker.call({"type": kind, "spec": spec, "completion": completion}, deadline_s)
            except _Overrun as exc:
                self._discard(worker)
                return Reward(value=0.0, flags=[exc.flag], detail=str(exc))
            except BaseException:  # interrupted mid-call: the worker's state is unknown
                self._discard(worker)
                raise
            self._give_back(worker)
        if "error" in reply:
            raise _rebuild(reply["error_type"], reply["error"])
        return Reward.model_validate(reply["reward"])

    def _take(self) -> _Worker:
        with self._lock:
            if self._closed:
                raise VerifierContextClosed("the verifier workers are closed; open a new context")
            while self._idle:
                worker = self._idle.pop()
                if worker.alive():
                    return worker
                worker.kill()
                self.replaced += 1
        return _Worker.start()

    def _give_back(self, worker: _Worker) -> None:
        with self._lock:
            if self._closed:
                worker.kill()
            else:
                self._idle.append(worker)

    def _discard(self, worker: _Worker) -> None:
        worker.kill()
        with self._lock:
            self.replaced += 1

    def close(self) -> None:
        """Kill the idle workers; calls in flight end their own (idempotent)."""
        with self._lock:
            idle, self._idle, self._closed = self._idle, [], True
        for worker in idle:
            worker.kill()

    def __enter__(self) -> BoundedWorkers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Overrun(Exception):
    def __init__(self, flag: str, message: str):
        super().__init__(message)
        self.flag = flag


def _rebuild(kind: str, message: str) -> Exception:
    if kind == "KeyError":
        return KeyError(message)
    if kind == "ValueError":
        return ValueError(message)
    return VerifierError(message if kind == "VerifierError" else f"the verifier crashed: {kind}: {message}")


class _Worker:
    """One worker process and its line protocol (one JSON object per line each way)."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self._buffer = b""

    @classmethod
    def start(cls) -> _Worker:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        proc = subprocess.Popen(
            [sys.executable, "-m", "tempering.verifiers.bounded_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # libraries' warnings; a full pipe would stall the worker
            env=env,
            start_new_session=True,  # its own process group: a kill takes whatever it started
        )
        worker = cls(proc)
        try:
            # set from outside (no preexec_fn in a threaded parent), before the worker's imports end
            resource.prlimit(proc.pid, resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
            resource.prlimit(proc.pid, resource.RLIMIT_CORE, (0, 0))
            if worker._read(START_S) != {"ready": True}:
                raise _Overrun("worker_died", "the worker did not start")
        except (_Overrun, OSError) as exc:  # OSError: it died before its limits were set
            worker.kill()
            raise VerifierError(f"no verifier worker could start: {exc}") from None
        return worker

    def alive(self) -> bool:
        return self.proc.poll() is None

    def call(self, request: dict[str, Any], deadline_s: float) -> dict[str, Any]:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise _Overrun("worker_died", "the verifier worker died before the call") from None
        return self._read(deadline_s)

    def _read(self, deadline_s: float) -> dict[str, Any]:
        """The next line as JSON, or _Overrun past the deadline or when the worker dies."""
        assert self.proc.stdout is not None
        fd, end = self.proc.stdout.fileno(), time.monotonic() + deadline_s
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = end - time.monotonic()
                if left <= 0:
                    raise _Overrun("timeout", f"the verifier did not answer within {deadline_s:g}s (worker killed)")
                if sel.select(left):
                    chunk = os.read(fd, 1 << 16)
                    if not chunk:
                        raise _Overrun("worker_died", "the verifier worker died (memory cap or crash)")
                    self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            return json.loads(line)
        except ValueError:  # something below Python wrote to its stdout
            raise _Overrun("worker_died", "the verifier worker sent a malformed reply (worker killed)") from None

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()
