"""Failure-recovery data: episodes where the model erred, read the feedback and fixed it, as SFT rows.

    temper agent export-recovered runs/NAME [--out recovered.jsonl]
    rows = recovered_rows(read_trajectory_rows(run / "trajectories.jsonl"), run="NAME", updates_per_batch=1)

A run's `trajectories.jsonl` holds every RL episode (`training.episode_row`); an episode is kept
when it succeeded after at least one error (an invalid call, a tool run that failed such as a
failing test, or a wrong answer: `EpisodeStats.recovered`) and the environment did not fail.
Each row is a `messages` conversation (the opening prompt as the model saw it, through the last
assistant turn: error, feedback and fix included) with its provenance. The turns that erred
(the episode row's `turn_errors`, one count per model turn) carry `"weight": 0`: they stay as
context for the fix, and SFT does not learn to make the error.

    {"id": "NAME/r3/ws-t2-fix-bug-1/2", "messages": [...],
     "provenance": {"run": "NAME", "rollout": 3, "step": 3, "task_id": "ws-t2-fix-bug-1", "tier": 2,
                    "sample": 2, "errors": 1, "invalid_calls": 1, "tool_errors": 0, "wrong_answers": 0}}

`step` is the first optimizer step trained on the episode's batch ((rollout - 1) * updates_per_batch + 1).
The rows load as SFT data (`temper sft`, or a pipeline `sft` stage on `${agent.recovered}`: the
agent stage writes `recovered.jsonl` when it ends).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from tempering.data.io import iter_rows, where
from tempering.errors import UserError

ERROR_KEYS = ("invalid_calls", "tool_errors", "wrong_answers")


def read_trajectory_rows(path: str | Path) -> list[dict[str, Any]]:
    """A run's stored episodes; a row that is not JSON is a one-line error naming file and line."""
    out = []
    for location, row, error in iter_rows(path):
        if error is not None:
            raise UserError(f"{where(path, location)}: not a JSON episode row ({error})")
        if not isinstance(row, dict) or not isinstance(row.get("messages"), list) or "stats" not in row:
            raise UserError(f"{where(path, location)}: not an episode row (needs 'messages' and 'stats')")
        out.append(row)
    return out


def is_recovered(row: dict[str, Any]) -> bool:
    """Succeeded after at least one error, on an environment that did not fail."""
    stats = row["stats"]
    errors = sum(int(stats.get(k, 0)) for k in ERROR_KEYS)
    return row.get("status", "scored") == "scored" and bool(row.get("success")) and errors > 0


def weigh_errors(messages: list[dict[str, Any]], turn_errors: list[int] | None) -> bool:
    """Mark the assistant turns that erred with weight 0 (in place); False when none is left to
    learn from. Rows stored before `turn_errors` existed keep every turn."""
    if turn_errors is None:
        return True
    turns = [m for m in messages if m["role"] == "assistant"]
    for m, errors in zip(turns, turn_errors):
        if errors:
            m["weight"] = 0
    return any(m.get("weight") != 0 for m in turns)


def recovered_rows(rows: Iterable[dict[str, Any]], run: str, updates_per_batch: int = 1) -> list[dict[str, Any]]:
    """SFT rows (`messages` + `provenance`) of the recovered episodes among `rows`, in order."""
    out = []
    for row in rows:
        if not is_recovered(row):
            continue
        messages = [{k: v for k, v in m.items() if k in ("role", "content", "name")} for m in row["messages"]]
        while messages and messages[-1]["role"] != "assistant":
            messages.pop()
        if not weigh_errors(messages, row.get("turn_errors")):
            continue
        stats = row["stats"]
        rollout = int(row.get("rollout", 0))
        counts = {k: int(stats.get(k, 0)) for k in ERROR_KEYS}
        out.append(
            {
                "id": f"{run}/r{rollout}/{row['task_id']}/{row.get('sample', 0)}",
                "messages": messages,
                "provenance": {
                    "run": run,
                    "rollout": rollout,
                    "step": max(rollout - 1, 0) * updates_per_batch + 1,
                    "task_id": row["task_id"],
                    "tier": row.get("tier"),
                    "sample": row.get("sample", 0),
                    "errors": sum(counts.values()),
                    **counts,
                },
            }
        )
    return out


def export_recovered(run_dir: str | Path, out: str | Path | None = None) -> tuple[Path, int, int]:
    """Write the recovered episodes of a `temper agent` run as SFT rows; (path, rows, episodes read).

    Raises:
        ValueError: the run has no `trajectories.jsonl`, or a row of it is not an episode.
    """
    run = Path(run_dir)
    source = run / "trajectories.jsonl"
    if not source.is_file():
        raise UserError(f"{run}: no trajectories.jsonl (not a `temper agent` run, or it stored no episode)")
    updates = 1
    config = run / "run_config.json"
    if config.is_file():
        updates = int(json.loads(config.read_text()).get("rl", {}).get("updates_per_batch", 1))
    episodes = read_trajectory_rows(source)
    rows = recovered_rows(episodes, run.name, updates)
    target = Path(out) if out is not None else run / "recovered.jsonl"
    from tempering.atomic import write_jsonl_atomic

    write_jsonl_atomic(target, rows, sidecar=False)
    return target, len(rows), len(episodes)
