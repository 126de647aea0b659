"""Experiment trackers: each `metrics.jsonl` record, the run's config and its lineage, mirrored to
TensorBoard, MLflow, Trackio or Weights & Biases through the libraries' own writers.

`train.loggers` (every training objective, through the run's `tracking.context.RunContext`) and an
eval config's `loggers` name them. Where each one writes:

- `tensorboard`: event files under `<run dir>/tensorboard` (`torch.utils.tensorboard.SummaryWriter`);
- `mlflow`: a run in `$MLFLOW_TRACKING_URI`, else the SQLite store `<run root>/mlflow.db`;
  experiment `$MLFLOW_EXPERIMENT_NAME`, else `tempering`;
- `trackio`: project `$TRACKIO_PROJECT`, else `tempering`, in trackio's local store (`$TRACKIO_DIR`);
- `wandb`: always offline (`wandb sync` uploads later), under `<run dir>/wandb`.

The config goes in as parameters (dotted keys), the lineage (run id, registry, input and model
hashes) as tags. A requested tracker whose package is missing is a one-line error before
anything runs (`require_trackers`), naming the extra to install.
"""

from __future__ import annotations

import importlib
import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from tempering.errors import UserError

EXTRA = "trackers"
MODULES = {  # the modules each tracker imports; a missing one refuses the run at start
    "tensorboard": ("tensorboard", "torch.utils.tensorboard"),
    "mlflow": ("mlflow", "alembic"),
    "trackio": ("trackio",),
    "wandb": ("wandb",),
}


class TrackerUnavailable(UserError):
    """A requested tracker that cannot run here; the message is one line naming the extra."""


class Tracker(Protocol):
    def log_metrics(self, scalars: dict[str, float], step: int) -> None: ...
    def close(self) -> None: ...


def _import(module: str) -> Any:
    """The one import of a tracker's package (a test hides a module to take the error path)."""
    return importlib.import_module(module)


def require_trackers(names: Sequence[str]) -> None:
    """Raise `TrackerUnavailable` for the first tracker in `names` that is unknown or not installed."""
    for name in names:
        if name not in MODULES:
            raise TrackerUnavailable(f"unknown tracker {name!r}; known: {', '.join(MODULES)}")
        for module in MODULES[name]:
            try:
                _import(module)
            except ImportError:
                raise TrackerUnavailable(
                    f"tracker {name!r} needs the package {module.split('.')[0]!r}, which is not installed; "
                    f"install the extra: pip install 'tempering[{EXTRA}]'"
                ) from None


def flat_params(tree: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """Dotted keys -> string values (lists as JSON), the form every tracker's parameters take."""
    out: dict[str, str] = {}
    for key, value in tree.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            out.update(flat_params(value, dotted))
        else:
            out[dotted] = value if isinstance(value, str) else json.dumps(value, default=str)
    return out


NAMED_EVENTS = ("eval",)
"""Events whose keys are metric names already (`eval_loss`, `heldout/tasks/accuracy`): not prefixed."""


def record_scalars(record: dict[str, Any]) -> dict[str, float]:
    """The numbers of one metrics record; an event's (`skip`, `rollback`, `alarm`) are named
    `<event>/<key>`, a held-out measurement's (`eval`) by their own names."""
    event = record.get("event")
    scalars = {
        k: float(v)
        for k, v in record.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("step", "time")
    }
    return {f"{event}/{k}": v for k, v in scalars.items()} if event and event not in NAMED_EVENTS else scalars


class TensorBoardTracker:
    def __init__(self, run_dir: Path, run_name: str, config: dict, lineage: dict[str, str]):
        writer_cls = _import("torch.utils.tensorboard").SummaryWriter
        self.writer = writer_cls(str(run_dir / "tensorboard"))
        self.writer.add_text("config", "```\n" + json.dumps(config, indent=1, default=str) + "\n```", 0)
        self.writer.add_text("lineage", "\n".join(f"- {k}: {v}" for k, v in lineage.items()), 0)

    def log_metrics(self, scalars: dict[str, float], step: int) -> None:
        for key, value in scalars.items():
            self.writer.add_scalar(key, value, step)

    def close(self) -> None:
        self.writer.close()


class MLflowTracker:
    PARAM_CHARS = 6000  # MLflow's limit on one parameter value

    def __init__(self, run_dir: Path, run_name: str, config: dict, lineage: dict[str, str]):
        mlflow = _import("mlflow")
        entities = _import("mlflow.entities")
        self.Metric = entities.Metric
        uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{run_dir.parent.resolve() / 'mlflow.db'}"
        self.client = mlflow.MlflowClient(uri)
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or "tempering"
        found = self.client.get_experiment_by_name(name)
        experiment = found.experiment_id if found else self.client.create_experiment(name)
        tags = {f"tempering.{k}": v for k, v in lineage.items()}
        self.run_id = self.client.create_run(experiment, run_name=run_name, tags=tags).info.run_id
        params = [entities.Param(k, v[: self.PARAM_CHARS]) for k, v in flat_params(config).items()]
        for i in range(0, len(params), 100):  # log_batch takes at most 100 parameters a call
            self.client.log_batch(self.run_id, params=params[i : i + 100])

    def log_metrics(self, scalars: dict[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[self.Metric(k, v, now, step) for k, v in scalars.items()])

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


class TrackioTracker:
    def __init__(self, run_dir: Path, run_name: str, config: dict, lineage: dict[str, str]):
        self.trackio = _import("trackio")
        project = os.environ.get("TRACKIO_PROJECT") or "tempering"
        self.run = self.trackio.init(project=project, name=run_name, config={**flat_params(config), **lineage})

    def log_metrics(self, scalars: dict[str, float], step: int) -> None:
        self.run.log(scalars, step=step)

    def close(self) -> None:
        self.run.finish()


class WandbTracker:
    def __init__(self, run_dir: Path, run_name: str, config: dict, lineage: dict[str, str]):
        wandb = _import("wandb")
        (run_dir / "wandb").mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            mode="offline",  # never the network: `wandb sync <run dir>/wandb/offline-run-*` uploads
            dir=str(run_dir),
            project=os.environ.get("WANDB_PROJECT") or "tempering",
            name=run_name,
            config={"config": config, "lineage": lineage},
            tags=[f"run_id:{lineage['run_id']}"] if lineage.get("run_id") else None,
            settings=wandb.Settings(console="off", silent=True, save_code=False),
            reinit="finish_previous",
        )
        self.last_step = -1

    def log_metrics(self, scalars: dict[str, float], step: int) -> None:
        # wandb drops a step below the last one; an event logged at the current step joins its row
        self.run.log(scalars, step=max(step, self.last_step))
        self.last_step = max(step, self.last_step)

    def close(self) -> None:
        self.run.finish()


OPENERS: dict[str, Callable[[Path, str, dict, dict[str, str]], Tracker]] = {
    "tensorboard": TensorBoardTracker,
    "mlflow": MLflowTracker,
    "trackio": TrackioTracker,
    "wandb": WandbTracker,
}


def open_trackers(
    names: Sequence[str], run_dir: Path, config: dict | None = None, lineage: dict[str, str] | None = None
) -> list[Tracker]:
    """The trackers `names` asks for, opened on run `run_dir` (its name names the tracked run).

    Raises:
        TrackerUnavailable: a tracker is unknown or its package is not installed.
    """
    require_trackers(names)
    return [OPENERS[name](run_dir, run_dir.name, config or {}, lineage or {}) for name in names]
