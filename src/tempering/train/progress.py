"""Per-step training progress on the terminal: step, loss, reward, tokens/s, ETA.

    with TrainProgress("grpo", total=100, start=0, console=console) as progress:
        ...
        progress(step, record)          # after every applied optimizer step

On a terminal it is a rich progress bar; piped or redirected (CI logs, `| tee`, nohup) it
prints one plain line every `every` steps instead, since a bar redrawn in a file is noise.
It also warns when a step carried no learning signal: every GRPO group tied (all samples of
each prompt got the same reward, so every advantage is 0) or every verifier call failed.
Each warning is printed the first time and counted in a closing line, not repeated per step.

It only reads the trainer's step record (`loss`, `real_tokens`, and from the GRPO source
`reward_mean`, `reward_std`, `zero_variance_share`, `groups_generated`,
`verifier_failed_groups`); it never changes training.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

NO_GRADIENT = (
    "every group's samples got the same reward (zero variance), so every advantage is 0 and "
    "this step carried no gradient; try more samples per prompt, higher temperature, or easier tasks"
)
VERIFIERS_FAILED = (
    "every verifier call failed on this step (no reward signal); check the sandbox "
    "(`temper sandbox check`) and the tasks' verifier specs"
)


def no_signal_reasons(record: dict[str, Any]) -> list[str]:
    """Why a step's record shows no learning signal (empty when it had one)."""
    reasons = []
    generated = record.get("groups_generated")
    if generated and record.get("verifier_failed_groups", 0) >= generated:
        reasons.append(VERIFIERS_FAILED)
    elif record.get("zero_variance_share", 0.0) >= 1.0 or record.get("reward_std") == 0.0:
        # reward_std over all samples is 0 only when every group tied (dynamic sampling off
        # does not count zero-variance groups, so both signals are needed)
        reasons.append(NO_GRADIENT)
    return reasons


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


class TrainProgress:
    """A trainer callback showing per-step progress; use as a context manager around the loop."""

    def __init__(self, name: str, total: int, start: int = 0, console: Console | None = None, every: int | None = None):
        self.name, self.total, self.start = name, total, start
        self.console = console or Console(stderr=True)
        self.every = every or max(1, total // 20)
        self.tty = self.console.is_terminal
        self.tokens = 0
        self.t0 = time.perf_counter()
        self.warned: dict[str, int] = {}
        self._bar: Progress | None = None

    def __enter__(self) -> TrainProgress:
        self.t0 = time.perf_counter()
        if self.tty:
            self._bar = Progress(
                TextColumn(f"[bold]{self.name}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[stats]}"),
                TimeRemainingColumn(),
                console=self.console,
                transient=True,
            )
            self._bar.__enter__()
            self._task = self._bar.add_task("train", total=self.total, completed=self.start, stats="")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)
        for reason, n in self.warned.items():
            if n > 1:
                self.console.print(
                    f"[yellow]warning:[/yellow] {n} steps: {reason.split(';')[0]}", highlight=False, soft_wrap=True
                )

    def stats(self, step: int, record: dict[str, Any]) -> str:
        """`loss 1.2345  reward 0.41  1,234 tok/s` (+ ETA when not drawn by a bar)."""
        elapsed = time.perf_counter() - self.t0
        parts = [f"loss {record['loss']:.4f}"]
        if "reward_mean" in record:
            parts.append(f"reward {record['reward_mean']:.3f}")
        parts.append(f"{self.tokens / max(elapsed, 1e-9):,.0f} tok/s")
        if not self.tty:
            done = step - self.start
            eta = elapsed / done * (self.total - step) if done else 0.0
            parts.append(f"eta {_duration(eta)}")
        return "  ".join(parts)

    def __call__(self, step: int, record: dict[str, Any]) -> None:
        self.tokens += int(record.get("real_tokens", 0))
        for reason in no_signal_reasons(record):
            self.warned[reason] = self.warned.get(reason, 0) + 1
            if self.warned[reason] == 1:
                self.console.print(f"[yellow]warning:[/yellow] step {step}: {reason}", highlight=False, soft_wrap=True)
        line = self.stats(step, record)
        if self._bar is not None:
            self._bar.update(self._task, completed=step, stats=line)
        elif step % self.every == 0 or step == self.total or step == self.start + 1:
            self.console.print(f"{self.name} step {step}/{self.total}  {line}", highlight=False, soft_wrap=True)
