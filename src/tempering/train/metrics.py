"""Per-step metrics: a JSONL file always, TensorBoard / MLflow when asked and installed."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Sequence

from rich.console import Console

console = Console(stderr=True)
quiet_console = Console(stderr=True, quiet=True)  # ranks other than 0 of a torchrun print nothing


class MetricsLog:
    """Appends one JSON object per record to `path`; mirrors scalars to optional sinks."""

    def __init__(self, path: Path, loggers: Sequence[str] = ()):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fh = path.open("a", encoding="utf-8")
        self._sinks = [s for s in (self._open_sink(name, path.parent) for name in loggers) if s]

    @staticmethod
    def _open_sink(name: str, run_dir: Path) -> Any:
        try:
            if name == "tensorboard":
                from torch.utils.tensorboard import SummaryWriter

                return SummaryWriter(str(run_dir / "tensorboard"))
            if name == "mlflow":
                import mlflow  # pyright: ignore[reportMissingImports]  # optional: not a dependency

                mlflow.start_run(run_name=run_dir.name)
                return mlflow
        except ImportError:
            console.print(f"[yellow]logger {name!r} requested but its package is not installed; skipping[/yellow]")
        return None

    def write(self, record: dict[str, Any]) -> None:
        record = {"time": round(time.time(), 3), **record}
        self._fh.write(json.dumps(record) + "\n")
        self._fh.flush()
        step = record.get("step", 0)
        scalars = {k: v for k, v in record.items() if isinstance(v, (int, float)) and k not in ("step", "time")}
        for sink in self._sinks:
            if hasattr(sink, "add_scalar"):
                for k, v in scalars.items():
                    sink.add_scalar(k, v, step)
            else:
                sink.log_metrics(scalars, step=step)

    def event(self, kind: str, **info: Any) -> None:
        """A discrete event (skip, rollback, resume) — logged and shown."""
        self.write({"event": kind, **info})
        console.print(f"[yellow]{kind}[/yellow] " + " ".join(f"{k}={v}" for k, v in info.items()))

    def close(self) -> None:
        self._fh.close()
        for sink in self._sinks:
            if hasattr(sink, "close"):
                sink.close()
            elif hasattr(sink, "end_run"):
                sink.end_run()


class NoMetrics:
    """The metrics log of a rank other than 0: only rank 0 writes (train/distributed.py)."""

    def __init__(self, path: Path):
        self.path = path

    def write(self, record: dict[str, Any]) -> None:
        pass

    def event(self, kind: str, **info: Any) -> None:
        pass

    def close(self) -> None:
        pass


def read_metrics(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
