"""The one rollout path: tasks + an engine + sampling settings -> scored trajectories.

    with ThreadRewardWorkers(4) as workers:
        groups = rollout(tasks, engine, settings, workers, n=8, seed=0)
    groups[i][j]                 # Trajectory: task i, sample j (tokens, mask, log-probs, reward, status)

GRPO's batch source, the eval suite runner (and through it the GRPO held-out monitor) and
the demo all sample and score through here, so they share one failure policy:

  * the verifier raised (any exception: a crashed judge, a broken sandbox slot) -> the
    sample is recorded with status `verifier_error`, reward 0 and the `verifier_error` flag;
  * the verifier did not answer within `timeout_s` -> status `timeout`, same reward and flag.

Neither is a model failure: GRPO drops such groups, suites skip such samples and count them.

Scoring runs behind `RewardWorkers` (submit a completion, get a future), so a Ray pool can
replace the thread pool. `start_rollout` returns before scoring ends, so a caller can
generate its next batch while the previous one is being judged; `rollout` waits.

A multi-turn agent loop is a second implementation of the same signature (tool output
between model turns goes into the same `Trajectory` with loss mask 0).
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from time import perf_counter
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, Sequence

from tempering import faults
from tempering.config import SamplingSettings
from tempering.deadlines import DEFAULT_GRACE_S, DaemonThreads, WorkerStuck
from tempering.types import Reward, Task, Trajectory, TrajectoryStatus
from tempering.versions import NOT_SAMPLED

if TYPE_CHECKING:
    from tempering.rollout.engine import Engine

VERIFIER_ERROR = "verifier_error"
"""The flag on a reward the verifier could not give (its status says why)."""
DEFAULT_TIMEOUT_S = 30.0


class Verdict(NamedTuple):
    reward: Reward
    status: TrajectoryStatus


def score_completion(task: Task, completion: str, ctx: Any = None) -> Reward:
    """The one call into the verifiers; `ctx` (a `VerifierContext`) is passed on once given."""
    from tempering.verifiers import score

    return score(task, completion) if ctx is None else score(task, completion, ctx)


def judge(task: Task, completion: str, ctx: Any = None) -> Verdict:
    """Score under the failure policy: any verifier exception is a `verifier_error` verdict."""
    try:
        return Verdict(score_completion(task, completion, ctx), "scored")
    except Exception as exc:
        return Verdict(
            Reward(value=0.0, flags=[VERIFIER_ERROR], detail=f"{type(exc).__name__}: {exc}"), "verifier_error"
        )


class RewardWorkers(Protocol):
    """Where completions are scored. `submit` returns at once; the future yields a `Verdict`."""

    def submit(self, task: Task, completion: str) -> Future: ...

    def close(self) -> None: ...


def _judge_in_thread(task: Task, completion: str, ctx: Any) -> Verdict:
    faults.point("reward_thread")
    return judge(task, completion, ctx)


def open_verifier_context(sandbox_size: int) -> Any:
    """A `VerifierContext` whose sandbox (of `sandbox_size` slots) opens on first use."""
    from tempering.verifiers import VerifierContext

    return VerifierContext(sandbox_size=sandbox_size)


class ThreadRewardWorkers:
    """`RewardWorkers` on a local thread pool (verifiers spend their time in sandbox calls).

    A verdict slower than `timeout_s` is a `timeout` (`PendingRollout.collect`), but a Python
    thread cannot be killed: a call still running `grace_s` after its timeout makes the next
    `submit` raise `WorkerStuck` (the run stops, naming what the thread scores). The threads
    are daemons, so a stuck one never keeps the process from exiting.

    Args:
        size: scoring threads.
        ctx: the `VerifierContext` verifiers share; None: the workers open one of `size`
            sandbox slots (lazily, only code verifiers use it) and close it on `close`.
        timeout_s: a verifier's deadline (`grpo.verifier_timeout_s`).
        grace_s: past the deadline, before a stuck thread stops the run (`grpo.hang_grace_s`).
    """

    def __init__(
        self, size: int = 4, ctx: Any = None, timeout_s: float = DEFAULT_TIMEOUT_S, grace_s: float = DEFAULT_GRACE_S
    ):
        self._owned = open_verifier_context(size) if ctx is None else None
        self.ctx = ctx if ctx is not None else self._owned
        self.timeout_s, self.grace_s = timeout_s, grace_s
        self._pool = DaemonThreads(size, "reward")

    def submit(self, task: Task, completion: str) -> Future:
        stuck = self._pool.stuck(self.timeout_s + self.grace_s)
        if stuck is not None:
            raise WorkerStuck("reward worker thread", stuck[1], stuck[0], self.timeout_s + self.grace_s)
        return self._pool.submit(_judge_in_thread, task, completion, self.ctx, what=f"scoring task {task.id}")

    def close(self) -> None:
        """Cancel queued scoring; wait for runs in flight (up to their timeout and grace), so none
        outlives the sandbox it uses; a stuck one is left to die with the process."""
        done = self._pool.close(self.timeout_s + self.grace_s)
        if self._owned is not None and done:
            self._owned.close()

    def __enter__(self) -> ThreadRewardWorkers:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@dataclass
class PendingRollout:
    """Generated samples whose scoring may still be running; `collect` waits for it."""

    tasks: list[Task]
    messages: list[list[dict[str, Any]]]
    prompts: list[list[int]]
    completions: list[list[Any]] = field(default_factory=list)
    futures: list[list[Future]] = field(default_factory=list)
    gen_s: float = 0.0
    """Seconds spent generating."""

    def collect(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> list[list[Trajectory]]:
        """The trajectories per task, in task order; a verdict slower than `timeout_s` is a timeout."""
        out = []
        for i, (comps, futures) in enumerate(zip(self.completions, self.futures)):
            out.append([self._trajectory(i, j, c, _wait(f, timeout_s)) for j, (c, f) in enumerate(zip(comps, futures))])
        return out

    def _trajectory(self, i: int, j: int, completion: Any, verdict: Verdict) -> Trajectory:
        prompt, toks = self.prompts[i], list(completion.token_ids)
        return Trajectory(
            task_id=self.tasks[i].id,
            sample=j,
            messages=[*self.messages[i], {"role": "assistant", "content": completion.text}],
            token_ids=[*prompt, *toks],
            loss_mask=[0] * len(prompt) + [1] * len(toks),
            logprobs=[0.0] * len(prompt) + list(completion.logprobs),
            prompt_length=len(prompt),
            rewards=[verdict.reward],
            finish_reason=completion.finish_reason,
            status=verdict.status,
            routing=None if getattr(completion, "routing", None) is None else completion.routing.tolist(),
            versions=_versions(len(prompt), getattr(completion, "versions", None)),
        )


def _versions(prompt_length: int, completion: list[int] | None) -> list[int] | None:
    """A trajectory's per-token versions from its completion's (partial rollouts); None: stamped by the caller."""
    return None if completion is None else [NOT_SAMPLED] * prompt_length + list(completion)


def _wait(future: Future, timeout_s: float) -> Verdict:
    try:
        return future.result(timeout=timeout_s)
    except FutureTimeout:
        future.cancel()
        return Verdict(
            Reward(value=0.0, flags=[VERIFIER_ERROR], detail=f"verifier timed out after {timeout_s:g}s"), "timeout"
        )


def unjudged_reasons(groups: Sequence[Sequence[Trajectory]], top: int = 3) -> str:
    """'' when every sample was judged; else "N of M not judged: <status: reason> xK; ..." (the
    `top` commonest reasons), for the one-line warning a caller prints."""
    counts: Counter[str] = Counter()
    total = 0
    for group in groups:
        for t in group:
            total += 1
            if not t.scored:
                reason = ((t.reward.detail or "").splitlines() or [""])[0][:120]
                counts[f"{t.status}: {reason}"] += 1
    if not counts:
        return ""
    common = "; ".join(f"{why} x{n}" for why, n in counts.most_common(top))
    more = f"; {len(counts) - top} other reason(s)" if len(counts) > top else ""
    return f"{sum(counts.values())} of {total} samples not judged (never counted as failures): {common}{more}"


def start_rollout(
    tasks: Sequence[Task],
    engine: Engine,
    sampling: SamplingSettings,
    workers: RewardWorkers,
    *,
    n: int = 1,
    seed: int | None = None,
    messages: Sequence[list[dict[str, Any]]] | None = None,
    prompts: Sequence[list[int]] | None = None,
    chunks: Sequence[tuple[Sequence[int], int | None]] | None = None,
) -> PendingRollout:
    """Sample `n` completions per task and hand each to `workers` as soon as its chunk is done.

    Args:
        messages: the conversation each task is prompted with (default: `task.chat()`).
        prompts: their token ids, when the caller already has them (default: rendered by
            `engine.chat_prompt`).
        chunks: generation batches as (task indices, sampling seed); a finished batch is
            scored while the next generates. Default: one batch of all tasks under `seed`.
    """
    tasks = list(tasks)
    messages = [list(m) for m in messages] if messages is not None else [t.chat() for t in tasks]
    from tempering.rollout.engine import ImagePrompt

    # an image prompt stays an `ImagePrompt`: a plain list of its ids would sample without the picture
    given = [p if isinstance(p, ImagePrompt) else list(p) for p in prompts] if prompts is not None else None
    prompts = given if given is not None else [engine.chat_prompt(m) for m in messages]
    pending = PendingRollout(tasks, messages, prompts, [[] for _ in tasks], [[] for _ in tasks])
    t0 = perf_counter()
    for indices, chunk_seed in chunks if chunks is not None else [(range(len(tasks)), seed)]:
        indices = list(indices)
        groups = engine.generate([prompts[i] for i in indices], sampling.params(n=n, seed=chunk_seed))
        for i, group in zip(indices, groups):
            pending.completions[i] = group
            pending.futures[i] = [workers.submit(tasks[i], c.text) for c in group]
    pending.gen_s = perf_counter() - t0
    return pending


def rollout(
    tasks: Sequence[Task],
    engine: Engine,
    sampling: SamplingSettings,
    workers: RewardWorkers,
    *,
    n: int = 1,
    seed: int | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    **kwargs: Any,
) -> list[list[Trajectory]]:
    """Scored trajectories, `n` per task (see `start_rollout` for the other arguments)."""
    return start_rollout(tasks, engine, sampling, workers, n=n, seed=seed, **kwargs).collect(timeout_s)
