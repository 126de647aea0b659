"""The calls of `temper tinker serve`, run on one worker thread, fairly across keys.

Every training and sampling call is queued under its key and answered with a request id;
the client polls `retrieve_future` (`Scheduler.wait`). One key's calls run in the order it
sent them (a forward_backward, then its optim_step, then a save). Across keys, the worker
takes turns: one STEP of the next key's oldest call, then one of the key after it. A call is
a function, or a generator whose every `yield` ends a step (a long forward_backward yields
between micro-batches), so one key's long call delays another key's short one by at most a
step, not by the whole call.

Each call may work `call_timeout_s` seconds (its own steps, not its wait); past that it is
stopped at the end of a step (`GeneratorExit` at its `yield`, where it undoes what it did)
and fails. `close` fails every queued call and stops the running one at its next step; the
worker is a daemon thread, so a process exits even while a step is still computing.

A step that never ends (a hang: no `yield`, no return) would hold every key's calls behind it
with no error. So each step runs under a deadline (`deadlines.Watchdog`): the call's time left
plus `grace_s`. Past it the worker is *stuck*: the running call fails with one line naming the
call and the wait, every queued call and every later submit is refused, and `stuck` is set, which
`/api/v1/healthz` reports as a 503 so a supervisor restarts the server (a Python thread cannot be
killed; saved checkpoints stay their keys', as after any restart).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
import uuid
from collections import OrderedDict, deque
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any, Callable, Generator

from tempering import faults
from tempering.deadlines import DEFAULT_GRACE_S, Watchdog
from tempering.errors import UserError

log = logging.getLogger(__name__)

FAULT_POINT = "tinker_worker"
"""The fault battery's point in each step the worker runs (tempering/faults.py)."""

STUCK = (
    "this server's worker is stuck in a call (a step ran past its deadline) and serves nothing more "
    "until the server is restarted; saved checkpoints stay this key's"
)
"""What every key but the stuck call's owner is told (nothing of the other key's call)."""


class CallRefused(UserError):
    """A call the scheduler stopped or did not run: over its time, or the server is stopping."""


class WorkerIsStuck(CallRefused):
    """A call refused because the worker is stuck (the module docstring): no retry can help."""


@dataclass
class _Call:
    request_id: str
    owner: str
    name: str
    fn: Callable[[], Any]
    future: Future = field(default_factory=Future)
    steps: Generator | None = None
    spent: float = 0.0
    """Seconds of work so far (its own steps only)."""
    read_at: float | None = None
    step_started: float = 0.0
    """When its running step began (the watchdog's message)."""


def _as_steps(fn: Callable[[], Any]) -> Generator:
    """`fn` as a generator of steps: one step if it returns a value, its own steps if it
    returns a generator; the generator's return value is the call's result."""
    result = fn()
    if inspect.isgenerator(result):
        result = yield from result
    return result


def _settle(future: Future, result: Any = None, exc: BaseException | None = None) -> None:
    try:
        future.set_exception(exc) if exc is not None else future.set_result(result)
    except InvalidStateError:  # `close` failed it meanwhile
        pass


class Scheduler:
    """Per-key queues of calls, served round-robin one step at a time (see the module docstring)."""

    KEEP_S = 600.0
    """A result is dropped this long after it was first read (a client whose answer was lost
    in transit may read it again until then); an unread one is kept."""

    def __init__(self, call_timeout_s: float = 600.0, max_queued: int = 64, grace_s: float = DEFAULT_GRACE_S):
        self.call_timeout_s, self.max_queued, self.grace_s = call_timeout_s, max_queued, grace_s
        self.stuck: str | None = None
        """Set once a step ran past its deadline (the module docstring): why the worker serves no more."""
        self._watch = Watchdog(self._overrun)
        self._queues: OrderedDict[str, deque[_Call]] = OrderedDict()
        self._calls: dict[str, _Call] = {}
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="tinker-worker", daemon=True)
        self._thread.start()

    def submit(self, owner: str, name: str, fn: Callable[[], Any]) -> str:
        """Queue `fn` under `owner`; its request id.

        Raises:
            CallRefused: the server is stopping, or `owner` has `max_queued` calls waiting.
        """
        call = _Call(f"{name}-{uuid.uuid4().hex[:16]}", owner, name, fn)
        with self._cond:
            if self._closed:
                if self.stuck:
                    raise WorkerIsStuck(f"{name}: {STUCK}")
                raise CallRefused(f"{name}: the server is stopping")
            queue = self._queues.setdefault(owner, deque())
            if len(queue) >= self.max_queued:
                raise CallRefused(f"{name}: {len(queue)} calls of this key are queued already; wait for their results")
            queue.append(call)
            self._calls[call.request_id] = call
            now = time.monotonic()
            for stale in [r for r, c in self._calls.items() if c.read_at is not None and now - c.read_at > self.KEEP_S]:
                del self._calls[stale]
            self._cond.notify()
        return call.request_id

    def queued(self, owner: str) -> int:
        with self._cond:
            return len(self._queues.get(owner, ()))

    async def wait(self, request_id: str, owner: str, timeout: float) -> Future | None:
        """The finished future of `owner`'s request, or None if it is still running after `timeout`.

        Raises:
            KeyError: no such request of this owner (another key's is the same as none).
        """
        with self._cond:
            call = self._calls.get(request_id)
        if call is None or call.owner != owner:
            raise KeyError(request_id)
        try:
            await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(call.future)), timeout)
        except TimeoutError:
            return None
        except Exception:  # the call failed: its exception is read from the future
            pass
        with self._cond:
            call.read_at = call.read_at or time.monotonic()
        return call.future

    def close(self, wait_s: float = 2.0) -> None:
        """Fail every queued call, stop the running one at its next step; wait up to `wait_s` for the worker."""
        with self._cond:
            self._closed = True
            waiting = [c for q in self._queues.values() for c in q]
            self._queues.clear()
            self._cond.notify_all()
        self._watch.close()
        for call in waiting:
            _settle(call.future, exc=CallRefused(f"{call.name}: the server stopped before the call finished"))
        if threading.current_thread() is not self._thread:
            self._thread.join(wait_s)

    # ------------------------------------------------------------------ the worker
    def _next(self) -> _Call | None:
        with self._cond:
            while not self._closed and not self._queues:
                self._cond.wait()
            if self._closed:
                return None
            return next(iter(self._queues.values()))[0]

    def _turn(self, call: _Call, over: bool) -> None:
        """After a step of `call`: drop it if `over`; its key goes behind every other key,
        including one whose first call arrived during the step."""
        with self._cond:
            queue = self._queues.get(call.owner)
            if queue and queue[0] is call:
                if over:
                    queue.popleft()
                if queue:
                    self._queues.move_to_end(call.owner)
                else:
                    del self._queues[call.owner]

    def _loop(self) -> None:
        while (call := self._next()) is not None:
            if call.steps is None:
                if not call.future.set_running_or_notify_cancel():
                    self._turn(call, over=True)
                    continue
                call.steps = _as_steps(call.fn)
            over = self._step(call)
            if not over and self._closed:
                call.steps.close()
            self._turn(call, over)

    def _step(self, call: _Call) -> bool:
        """Run one step of `call`; whether it is over (finished, failed or stopped)."""
        assert call.steps is not None
        start = time.monotonic()
        call.step_started = start
        self._watch.start(call.request_id, max(0.0, self.call_timeout_s - call.spent) + self.grace_s)
        try:
            faults.point(FAULT_POINT)
            next(call.steps)
        except StopIteration as stop:
            _settle(call.future, stop.value)
            return True
        except Exception as exc:
            _settle(call.future, exc=exc)
            return True
        finally:
            self._watch.done(call.request_id)
            call.spent += time.monotonic() - start
        if call.spent > self.call_timeout_s:
            call.steps.close()  # GeneratorExit at its yield: it undoes its partial work
            _settle(
                call.future,
                exc=CallRefused(
                    f"{call.name}: stopped after {call.spent:.1f} s of work, over this server's "
                    f"call_timeout_s of {self.call_timeout_s:g} s (send less work a call)"
                ),
            )
            return True
        return False

    def _overrun(self, request_id: Any) -> None:
        """The watchdog's thread: the step of call `request_id` ran past its deadline. Fail it and
        everything queued, refuse what comes (the module docstring); the stuck step's thread is left
        to itself."""
        bound = self.call_timeout_s + self.grace_s
        with self._cond:
            call = self._calls.get(request_id)
            if call is None or self._closed:
                return
            waited = call.spent + time.monotonic() - call.step_started
            log.error("tinker worker stuck: a step of %s ran %.0f s (deadline + grace %g s)", call.name, waited, bound)
            self.stuck = f"the worker is stuck in a step of {call.name} (no end within {bound:g} s)"
            self._closed = True
            waiting = [c for q in self._queues.values() for c in q if c is not call]
            self._queues.clear()
            self._cond.notify_all()
        _settle(
            call.future,
            exc=WorkerIsStuck(
                f"{call.name}: tinker worker stuck: a step gave no answer after {waited:.0f} s (call_timeout_s "
                f"{self.call_timeout_s:g} s + grace {self.grace_s:g} s); the call failed and the server serves "
                "nothing more until it is restarted; saved checkpoints stay this key's"
            ),
        )
        for other in waiting:
            _settle(other.future, exc=WorkerIsStuck(f"{other.name}: {STUCK}"))
