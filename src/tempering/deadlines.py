"""Deadlines on blocking calls to workers, so that a run never hangs silently (docs/scale.md,
No silent hangs).

A worker that does not answer within its deadline is replaced with its work sent again where
that is safe (an engine replica's slice, with the same seed; a Ray reward actor's completions),
or the run stops with one `WorkerStuck` line that names the component, the step and what it
was doing, within that deadline plus a grace (`grpo.hang_grace_s`, default `DEFAULT_GRACE_S`);
a worker whose replacement dies too stops it with the same kind of line (`WorkerDied`).

    watch = Watchdog(on_overrun=lambda key: kill(key))
    watch.start(call_id, deadline_s=20)   # a call went out
    watch.beat(call_id)                   # a long call is alive: its deadline starts again
    watch.done(call_id)                   # it answered

    pool = DaemonThreads(4)               # a thread pool whose stuck threads never block exit
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable, Hashable

from tempering.errors import UserError

DEFAULT_GRACE_S = 60.0
"""Seconds past a worker's own deadline before the run stops (`grpo.hang_grace_s`)."""


class WorkerStuck(UserError):
    """A worker gave no answer within its deadline and could not be replaced: the run stops.

    One line (the CLI prints it as an `error:` line, exit 2): the component, the step when the
    trainer knows it (`at_step`), what the worker was doing, how long it was waited for."""

    def __init__(self, component: str, doing: str, waited_s: float, bound_s: float):
        super().__init__(component, doing, waited_s, bound_s)
        self.component, self.doing, self.waited_s, self.bound_s = component, doing, waited_s, bound_s
        self.step: int | None = None

    def at_step(self, step: int) -> WorkerStuck:
        """Name the training step the trainer was waiting on (the first to ask wins)."""
        self.step = step if self.step is None else self.step
        return self

    def __str__(self) -> str:
        at = f" at step {self.step}" if self.step is not None else ""
        return (
            f"{self.component} stuck{at}: {self.doing}: no answer after {self.waited_s:.0f} s "
            f"(deadline + grace {self.bound_s:g} s); the run stopped, and `--resume-from` its last "
            "checkpoint resumes it exactly"
        )


class WorkerDied(WorkerStuck):
    """A worker's process died, and so did the replacement that was sent its work: the run stops,
    with one line as `WorkerStuck`'s (`how`: the exit code, say)."""

    def __init__(self, component: str, doing: str, how: str):
        super().__init__(component, doing, 0.0, 0.0)
        self.how = how

    def __str__(self) -> str:
        at = f" at step {self.step}" if self.step is not None else ""
        return (
            f"{self.component} died{at}: {self.doing}: {self.how}; the run stopped, and `--resume-from` "
            "its last checkpoint resumes it exactly"
        )


class Watchdog:
    """Deadlines of calls in flight, checked by one daemon thread every `period_s`.

    `on_overrun(key)` runs once per call that passed its deadline (on the watchdog's thread;
    it should kill or flag the worker, never block). Thread-safe."""

    def __init__(self, on_overrun: Callable[[Hashable], None], period_s: float = 0.2):
        self._on_overrun, self._period = on_overrun, period_s
        self._due: dict[Hashable, tuple[float, float]] = {}  # key -> (deadline_s, time it runs out)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def start(self, key: Hashable, deadline_s: float) -> None:
        with self._lock:
            self._due[key] = (deadline_s, time.monotonic() + deadline_s)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="watchdog", daemon=True)
                self._thread.start()

    def beat(self, key: Hashable) -> None:
        """A heartbeat: the call `key` is alive, its deadline runs again from now."""
        with self._lock:
            if key in self._due:
                deadline = self._due[key][0]
                self._due[key] = (deadline, time.monotonic() + deadline)

    def done(self, key: Hashable) -> None:
        with self._lock:
            self._due.pop(key, None)

    def close(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self._period):
            now = time.monotonic()
            with self._lock:
                late = [k for k, (_, end) in self._due.items() if now > end]
                for key in late:
                    del self._due[key]
            for key in late:
                self._on_overrun(key)


class DaemonThreads:
    """A pool of `size` daemon threads: `submit(fn, *args) -> Future`, and `stuck(after_s)`, the
    oldest call still running after `after_s` seconds.

    Unlike `ThreadPoolExecutor`, whose threads the interpreter joins at exit, a thread stuck
    in a call (a verifier that never returns) never keeps the process from exiting: a Python
    thread cannot be killed, so the caller stops the run instead (`WorkerStuck`)."""

    def __init__(self, size: int, name: str):
        self._jobs: queue.SimpleQueue[tuple[Future, Callable[..., Any], tuple, str] | None] = queue.SimpleQueue()
        self._running: dict[int, tuple[float, str]] = {}  # thread id -> (start, what it does)
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{k}", daemon=True) for k in range(size)]
        for t in self._threads:
            t.start()

    def submit(self, fn: Callable[..., Any], *args: Any, what: str = "") -> Future:
        out: Future = Future()
        self._jobs.put((out, fn, args, what))
        return out

    def stuck(self, after_s: float) -> tuple[float, str] | None:
        """(seconds, what) of the longest-running call if it has run more than `after_s`, else None."""
        now = time.monotonic()
        with self._lock:
            ages = [(now - start, what) for start, what in self._running.values()]
        oldest = max(ages, default=None)
        return oldest if oldest is not None and oldest[0] > after_s else None

    def close(self, wait_s: float) -> bool:
        """Cancel queued calls; wait up to `wait_s` for those running. False: some still run."""
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job[0].cancel()
        for _ in self._threads:
            self._jobs.put(None)
        end = time.monotonic() + wait_s
        for t in self._threads:
            t.join(max(0.0, end - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)

    def _work(self) -> None:
        me = threading.get_ident()
        while (job := self._jobs.get()) is not None:
            out, fn, args, what = job
            if not out.set_running_or_notify_cancel():
                continue
            with self._lock:
                self._running[me] = (time.monotonic(), what)
            try:
                out.set_result(fn(*args))
            except BaseException as exc:  # the caller's future carries it, as ThreadPoolExecutor's does
                out.set_exception(exc)
            finally:
                with self._lock:
                    self._running.pop(me, None)
