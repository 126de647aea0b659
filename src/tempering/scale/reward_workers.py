"""`RewardWorkers` on Ray: each actor owns a `VerifierContext` (its own sandbox pool).

    workers = RayRewardWorkers(n=4, sandbox_slots=2)
    future = workers.submit(task, completion)      # concurrent.futures.Future[Verdict]

Completions go to the actors round-robin. An actor that dies (a crashed node, an OOM kill,
`ray.kill`) is replaced by a fresh one and every completion it held is sent again, to the
replacement: a dead worker never loses a sample and is never a model failure. After
`max_retries` re-sends the completion gets a `verifier_error` verdict (the rollout path's
one failure policy: GRPO drops that group). Verifier exceptions never reach Ray: `judge`
turns them into verdicts inside the actor, as in the thread pool.

An actor that hangs (calls in flight and no answer for `deadline_s`: each answer is a
heartbeat, so calls queued behind a slow one are not counted as hung; watched by a
`deadlines.Watchdog`) is killed, and then replaced and re-sent to like a dead one (`hung`
counts them). The rollout's own wait for a verdict (`grpo.verifier_timeout_s`) still bounds
the whole: a completion that hangs every actor it is sent to becomes a `timeout` there.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

from tempering import faults
from tempering.deadlines import Watchdog
from tempering.rollout.rollout import VERIFIER_ERROR, Verdict, judge, open_verifier_context
from tempering.types import Reward, Task


class RewardActor:
    """One reward worker process: scores completions with its own verifier context."""

    def __init__(self, sandbox_slots: int):
        self.ctx = open_verifier_context(sandbox_slots)

    def score(self, task: Task, completion: str) -> Verdict:
        faults.point("ray_reward")
        return judge(task, completion, self.ctx)

    def pid(self) -> int:
        import os

        return os.getpid()

    def close(self) -> None:
        self.ctx.close()


class RayRewardWorkers:
    """`RewardWorkers` over `n` Ray actors (Ray must be initialised: scale.runtime.ray_session).

    Attributes:
        actors: the live actor handles (a replaced one is swapped in place).
        replaced: actors replaced after dying or hanging; hung: those killed on their deadline;
        retried: completions sent again.
    """

    def __init__(
        self, n: int, sandbox_slots: int = 2, cpus: float = 0.5, max_retries: int = 3, deadline_s: float = 20.0
    ):
        import ray

        self._remote = ray.remote(num_cpus=cpus, max_restarts=0)(RewardActor)
        self.sandbox_slots, self.max_retries = sandbox_slots, max_retries
        self.actors = [self._spawn() for _ in range(n)]
        self.replaced = self.retried = self.hung = 0
        self.deadline_s = deadline_s
        self._next = 0
        self._lock = threading.Lock()
        self._watch = Watchdog(self._kill_hung)
        self._held: dict[int, list] = {}  # id(actor) -> [actor, its calls in flight]
        self._fresh: set[int] = set()  # replacements that have not answered yet
        ray.get([a.pid.remote() for a in self.actors])  # started, so a first call is not a cold start

    def _spawn(self) -> Any:
        return self._remote.remote(self.sandbox_slots)

    def submit(self, task: Task, completion: str) -> Future:
        out: Future = Future()
        with self._lock:
            slot = self._next % len(self.actors)
            self._next += 1
        self._send(out, slot, task, completion, attempt=0)
        return out

    def _send(self, out: Future, slot: int, task: Task, completion: str, attempt: int) -> None:
        actor = self.actors[slot]
        ref = actor.score.remote(task, completion)
        key = id(actor)
        with self._lock:
            held = self._held.setdefault(key, [actor, 0])
            held[1] += 1
            if held[1] == 1:  # the actor now has work: it must answer within the deadline
                # a replacement's first answer waits for its start too (imports, a sandbox pool)
                self._watch.start(key, self.deadline_s * (2 if key in self._fresh else 1))
        ref.future().add_done_callback(lambda f: self._done(f, out, slot, actor, task, completion, attempt))

    def _kill_hung(self, key: Any) -> None:
        """The watchdog's call: this actor did not answer in time; killing it fails all it holds,
        which `_done` then re-sends to its replacement."""
        import ray

        with self._lock:
            held = self._held.pop(key, None)
            self.hung += held is not None
        if held is not None:
            ray.kill(held[0])

    def _answered(self, actor: Any) -> None:
        """A heartbeat of `actor`: its deadline runs again, or stops when it holds no more calls."""
        key = id(actor)
        with self._lock:
            self._fresh.discard(key)
            held = self._held.get(key)
            if held is None:
                return
            held[1] -= 1
            if held[1] > 0:
                self._watch.beat(key)
                return
            del self._held[key]
            self._watch.done(key)

    def _done(self, f: Future, out: Future, slot: int, actor: Any, task: Task, completion: str, attempt: int) -> None:
        from ray.exceptions import RayActorError

        self._answered(actor)
        exc = f.exception()
        if exc is None:
            out.set_result(f.result())
            return
        if not isinstance(exc, RayActorError):
            out.set_exception(exc)
            return
        if attempt >= self.max_retries:
            out.set_result(
                Verdict(
                    Reward(
                        value=0.0,
                        flags=[VERIFIER_ERROR],
                        detail=f"reward worker died {attempt + 1} times: {type(exc).__name__}",
                    ),
                    "verifier_error",
                )
            )
            return
        with self._lock:
            if self.actors[slot] is actor:  # the first to see this death replaces the actor
                self.actors[slot] = self._spawn()
                self._fresh.add(id(self.actors[slot]))
                self.replaced += 1
            self.retried += 1
        self._send(out, slot, task, completion, attempt + 1)

    def close(self) -> None:
        import ray

        self._watch.close()
        for actor in self.actors:
            try:
                ray.get(actor.close.remote(), timeout=30)
            except Exception:
                pass
            ray.kill(actor)

    def __enter__(self) -> RayRewardWorkers:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
