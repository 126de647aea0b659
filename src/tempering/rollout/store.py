"""The trajectory store: every rollout of a run, as Parquet, one file per step.

    runs/<run>/trajectories/step-000012.parquet

Columns: run, step, task_id, source, prompt, completion, tokens (list<int32>),
logprobs (list<float32>), reward, components (JSON text), flags (list<string>),
advantage, finish_reason, kept (whether the sample entered the loss after dynamic
sampling), group (index of its group within the step), versions (list<int32>, one per
token of `tokens`: the policy version that sampled it, `tempering.versions`).

Stores written before versions were kept have no `versions` column: `read_trajectories`
gives those rows `versions: None` (unknown), never a guessed number.

Files are written whole through a temporary name, so a crash never leaves half a step.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from tempering.atomic import atomic_path

SCHEMA = pa.schema(
    [
        ("run", pa.string()),
        ("step", pa.int64()),
        ("task_id", pa.string()),
        ("source", pa.string()),
        ("prompt", pa.string()),
        ("completion", pa.string()),
        ("tokens", pa.list_(pa.int32())),
        ("logprobs", pa.list_(pa.float32())),
        ("reward", pa.float64()),
        ("components", pa.string()),
        ("flags", pa.list_(pa.string())),
        ("advantage", pa.float64()),
        ("finish_reason", pa.string()),
        ("kept", pa.bool_()),
        ("group", pa.int32()),
        ("versions", pa.list_(pa.int32())),
    ]
)


@dataclass
class TrajectoryRow:
    """One stored sample (a row of a step's Parquet file); `tempering.types.Trajectory` is the
    in-memory episode it is written from."""

    run: str
    step: int
    task_id: str
    source: str
    prompt: str
    completion: str
    tokens: list[int]
    logprobs: list[float]
    reward: float
    components: dict[str, float]
    flags: list[str]
    advantage: float
    finish_reason: str
    kept: bool
    group: int
    versions: list[int] | None = None
    """Per token of `tokens`, the policy version that sampled it (None: unknown)."""

    def row(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["components"] = json.dumps(self.components, sort_keys=True)
        return out


class TrajectoryStore:
    def __init__(self, run_dir: str | Path, run: str):
        self.dir = Path(run_dir) / "trajectories"
        self.run = run

    def write(self, step: int, rows: Iterable[TrajectoryRow]) -> Path:
        self.dir.mkdir(parents=True, exist_ok=True)
        table = pa.Table.from_pylist([r.row() for r in rows], schema=SCHEMA)
        path = self.dir / f"step-{step:06d}.parquet"
        with atomic_path(path) as tmp:
            pq.write_table(table, tmp)
        return path


Order = Literal["worst", "best", "flagged"] | None


def read_trajectories(
    run_dir: str | Path, step: int | None = None, order: Order = None, limit: int | None = None
) -> list[dict[str, Any]]:
    """Rows of one run (optionally one step): `worst`/`best` sort by reward, `flagged` keeps
    rows with flags. Raises FileNotFoundError naming what is missing."""
    base = Path(run_dir) / "trajectories"
    if not base.is_dir():
        raise FileNotFoundError(f"{run_dir}: no trajectories/ directory (is this a GRPO run dir?)")
    files = sorted(base.glob("step-*.parquet"))
    if step is not None:
        files = [f for f in files if f.name == f"step-{step:06d}.parquet"]
        if not files:
            raise FileNotFoundError(f"{base}: no trajectories for step {step}")
    rows = [r for f in files for r in pq.read_table(f).to_pylist()]
    for r in rows:
        r["components"] = json.loads(r["components"])
        r.setdefault("versions", None)  # a store from before versions were kept: unknown
    if order == "flagged":
        rows = [r for r in rows if r["flags"]]
    elif order in ("worst", "best"):
        rows.sort(key=lambda r: r["reward"], reverse=order == "best")
    return rows[:limit] if limit else rows
