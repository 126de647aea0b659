"""Experiment trackers: a short SFT run mirrors metrics.jsonl, its config and its lineage into
TensorBoard, MLflow, Trackio and W&B (offline), each read back through the library's own reader;
a tracker that cannot run stops the run at start with a one-line error naming the extra."""

import json
import struct
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tempering.cli import app
from tempering.config import ConfigError, SFTConfig, load_config
from tempering.data.builtin import arithmetic_conversations
from tempering.evals.results import EvalResults, MetricResult, SuiteResult
from tempering.runs.registry import Registry
from tempering.tracking.trackers import TrackerUnavailable, require_trackers
from tests.conftest import tiny_llama

STEPS = 4


def sft_yaml(tmp_path: Path, model: str, loggers: list[str]) -> Path:
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in arithmetic_conversations(32, 1)))
    cfg = {
        "model": model,
        "lora": None,
        "data": {"train": str(train), "max_length": 96},
        "train": {"steps": STEPS, "batch_size": 4, "precision": "fp32", "loggers": loggers},
        "out": str(tmp_path / "runs"),
        "name": "tracked",
    }
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture()
def tiny_dir(tmp_path, smol_tokenizer):
    path = tmp_path / "tiny"
    tiny_llama(vocab=len(smol_tokenizer), tie=True).save_pretrained(path)
    smol_tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture()
def trackio_dir(tmp_path, monkeypatch):
    """Trackio's local store under tmp (it reads TRACKIO_DIR when imported: set both ways)."""
    where = tmp_path / "trackio"
    monkeypatch.setenv("TRACKIO_DIR", str(where))
    import trackio.sqlite_storage
    import trackio.utils

    for module in (trackio.utils, trackio.sqlite_storage, trackio):
        if hasattr(module, "TRACKIO_DIR"):
            monkeypatch.setattr(module, "TRACKIO_DIR", where)
    return where


def read_wandb_history(run_file: Path) -> list[dict]:
    """History rows of an offline `.wandb` file: W&B's LevelDB-style log of its protobuf `Record`s."""
    from wandb.proto import wandb_internal_pb2

    data, block, rows, pending = run_file.read_bytes(), 32768, [], b""
    pos = 7  # ":W&B", magic 0xBEE1, version
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if length == 0 and kind == 0:
            break
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST: one whole record
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            if record.WhichOneof("record_type") == "history":
                rows.append({i.key or ".".join(i.nested_key): json.loads(i.value_json) for i in record.history.item})
    return rows


def assert_tensorboard_matches(run_dir: Path, losses: dict[int, float], run_id: str) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tensorboard"))
    acc.Reload()
    assert {e.step: e.value for e in acc.Scalars("loss")} == pytest.approx(losses, rel=1e-6)  # float32 on disk
    (lineage,) = acc.Tensors("lineage/text_summary")
    assert f"- run_id: {run_id}" in lineage.tensor_proto.string_val[0].decode()
    (config,) = acc.Tensors("config/text_summary")
    assert f'"steps": {STEPS}' in config.tensor_proto.string_val[0].decode()


def assert_mlflow_matches(root: Path, losses: dict[int, float], run_id: str) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("tempering")
    (run,) = client.search_runs([experiment.experiment_id])
    history = client.get_metric_history(run.info.run_id, "loss")
    assert {m.step: m.value for m in history} == losses
    assert run.data.tags["tempering.run_id"] == run_id
    assert run.data.tags["tempering.registry"] == str((root / "registry.sqlite").resolve())
    assert run.data.tags["tempering.input.train.0.sha256"]  # the training file's content hash
    assert run.data.params["train.steps"] == str(STEPS)
    assert run.info.status == "FINISHED"


def assert_trackio_matches(losses: dict[int, float], run_id: str) -> None:
    from trackio.sqlite_storage import SQLiteStorage

    logs = SQLiteStorage.get_logs("tempering", "tracked")
    assert {row["step"]: row["loss"] for row in logs if "loss" in row} == losses


def assert_wandb_matches(run_dir: Path, losses: dict[int, float], run_id: str) -> None:
    (run_file,) = (run_dir / "wandb").glob("offline-run-*/run-*.wandb")
    rows = read_wandb_history(run_file)
    assert {row["_step"]: row["loss"] for row in rows if "loss" in row} == losses


def test_an_sft_run_mirrors_its_metrics_config_and_lineage_into_every_tracker(
    tmp_path, tiny_dir, trackio_dir, monkeypatch
):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    cfg = sft_yaml(tmp_path, tiny_dir, ["tensorboard", "mlflow", "trackio", "wandb"])
    result = CliRunner().invoke(app, ["sft", str(cfg)])
    assert result.exit_code == 0, result.output
    root, run_dir = tmp_path / "runs", tmp_path / "runs" / "tracked"
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    losses = {r["step"]: r["loss"] for r in records if "loss" in r and "event" not in r}
    assert sorted(losses) == list(range(1, STEPS + 1))
    run_id = json.loads((run_dir / "summary.json").read_text())["run_id"]
    assert_tensorboard_matches(run_dir, losses, run_id)
    assert_mlflow_matches(root, losses, run_id)
    assert_trackio_matches(losses, run_id)
    assert_wandb_matches(run_dir, losses, run_id)


@pytest.mark.parametrize("hidden, tracker", [("mlflow", "mlflow"), ("tensorboard", "tensorboard"), ("wandb", "wandb")])
def test_a_tracker_whose_package_is_missing_stops_the_run_at_start(tmp_path, monkeypatch, hidden, tracker):
    monkeypatch.setitem(sys.modules, hidden, None)  # `import hidden` now raises ImportError
    cfg = sft_yaml(tmp_path, "no-such-model-is-loaded-first", [tracker])
    result = CliRunner().invoke(app, ["sft", str(cfg)])
    assert result.exit_code != 0
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "tempering[trackers]" in lines[0] and repr(tracker) in lines[0], result.output
    assert "Traceback" not in result.output
    registry = tmp_path / "runs" / "registry.sqlite"
    if registry.exists():  # nothing was recorded: the check runs before the stage starts
        with Registry(registry) as reg:
            assert reg.list() == []


def test_an_unknown_tracker_name_is_a_config_error_listing_the_known_ones(tmp_path):
    cfg = sft_yaml(tmp_path, "m", ["neptune"])
    with pytest.raises(ConfigError) as err:
        load_config(SFTConfig, cfg)
    message = str(err.value)
    assert "sft.yaml: train.loggers.0:" in message and len(message.splitlines()) == 1
    assert all(name in message for name in ("tensorboard", "mlflow", "trackio", "wandb"))
    with pytest.raises(TrackerUnavailable, match="known: tensorboard, mlflow, trackio, wandb"):
        require_trackers(["neptune"])


def test_eval_results_go_to_the_trackers_with_the_model_hash(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    from tempering.config import EvalConfig
    from tempering.evals.evaluate import track_results

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "evals")
    metric = MetricResult(name="accuracy", mean=0.25, low=0.0, high=0.75, n=4)
    suite = SuiteResult(
        suite="arith",
        suite_hash="abc123",
        model_id="m",
        model_hash="feedbeef",
        metrics={"accuracy": metric},
        primary_metric="accuracy",
    )
    cfg = EvalConfig(suites=["arith"], model="m", out=str(tmp_path / "evals" / "base"), loggers=["mlflow"])
    track_results(cfg, EvalResults(model="m", suites=[suite]))
    client = MlflowClient(f"sqlite:///{tmp_path / 'evals' / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("evals").experiment_id])
    assert run.data.metrics == {"arith/accuracy": 0.25, "arith/accuracy/low": 0.0, "arith/accuracy/high": 0.75}
    assert run.data.tags["tempering.model_hash"] == "feedbeef"
    assert run.data.tags["tempering.suite.arith.hash"] == "abc123"
    assert run.data.params["loggers"] == '["mlflow"]'


def test_an_eval_with_a_tracker_that_cannot_run_stops_before_the_model_loads(tmp_path, monkeypatch):
    from tempering.config import EvalConfig
    from tempering.evals.evaluate import EvalError, evaluate_config

    monkeypatch.setitem(sys.modules, "trackio", None)
    cfg = EvalConfig(suites=["arithmetic"], model="no-such-model", out=str(tmp_path / "e"), loggers=["trackio"])
    with pytest.raises(EvalError, match=r"tracker 'trackio' needs the package 'trackio'.*tempering\[trackers\]"):
        evaluate_config(cfg)
