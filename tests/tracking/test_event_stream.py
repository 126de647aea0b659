"""One event stream per run: `metrics.jsonl` has one writer (`tracking/events.py`), and every
held-out number and alarm reaches every tracker. An SFT run with `eval_every` and a GRPO run with
a held-out suite are read back through TensorBoard's and MLflow's own readers; `keep_best` on a
GRPO held-out metric keeps the model of the best measurement (hand-scripted rewards)."""

import ast
import json
import shutil
import threading
from collections import Counter
from pathlib import Path

import pytest
import yaml
from safetensors.torch import load_file
from typer.testing import CliRunner

import tempering
from tempering.cli import app
from tempering.data.builtin import arithmetic_conversations
from tempering.tracking.events import read_events, read_metrics
from tempering.types import Reward
from tempering.verifiers.base import register
from tests.conftest import tiny_llama

SRC = Path(tempering.__file__).parent
SINK = Path("tracking") / "events.py"
PLUGIN = __name__  # the module a GRPO config's `grpo.plugins` names: it registers `scripted_reward`


# -- the scan: one writer of metrics.jsonl -----------------------------------------------------


def _mentions_metrics_file(node: ast.AST) -> bool:
    """Whether an expression names the event stream's file (the literal, `METRICS_FILE`,
    `metrics_path(...)` or an attribute `.metrics_path`)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and "metrics.jsonl" in sub.value:
            return True
        if isinstance(sub, ast.Name) and sub.id in ("METRICS_FILE", "metrics_path"):
            return True
        if isinstance(sub, ast.Attribute) and sub.attr in ("METRICS_FILE", "metrics_path"):
            return True
    return False


def _writes(call: ast.Call) -> bool:
    """`x.write_text(..)`, `x.write_bytes(..)`, or `open(..)` / `x.open(..)` in a writing mode."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name in ("write_text", "write_bytes"):
        return True
    if name != "open":
        return False
    modes = [a for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    modes += [k.value for k in call.keywords if k.arg == "mode"]
    return any(isinstance(m, ast.Constant) and set(str(m.value)) & set("awx+") for m in modes)


def _docstrings(tree: ast.AST) -> set[int]:
    """The string statements (module, class, function and attribute docstrings): prose, not code."""
    return {
        id(n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
    }


def metrics_writers(path: str, source: str) -> list[str]:
    """`path:line` of each place in `source` that writes the event stream's file or spells its name.

    A write counts when the written path's expression names the file, or is a variable bound in the
    same function to one that does (`p = run_dir / "metrics.jsonl"; p.open("a")`)."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    found = [
        f"{path}:{n.lineno} spells the file name"
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and "metrics.jsonl" in n.value and id(n) not in docs
    ]
    scopes = [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for scope in scopes:
        bound = {
            t.id
            for n in ast.walk(scope)
            if isinstance(n, ast.Assign) and _mentions_metrics_file(n.value)
            for t in n.targets
            if isinstance(t, ast.Name)
        }
        for call in (n for n in ast.walk(scope) if isinstance(n, ast.Call) and _writes(n)):
            target = call.func.value if isinstance(call.func, ast.Attribute) else (call.args or [call.func])[0]
            if _mentions_metrics_file(target) or (isinstance(target, ast.Name) and target.id in bound):
                found.append(f"{path}:{call.lineno} writes it")
    return sorted(set(found))


def scan(root: Path) -> list[str]:
    """Every writer of metrics.jsonl under the package `root`, the one sink left out."""
    found = []
    for py in sorted(root.rglob("*.py")):
        rel = py.relative_to(root)
        if rel != SINK:
            found += metrics_writers(str(rel), py.read_text(encoding="utf-8"))
    return found


def test_metrics_jsonl_has_one_writer_the_event_sink():
    assert scan(SRC) == []
    sink = (SRC / SINK).read_text()
    assert 'METRICS_FILE = "metrics.jsonl"' in sink and 'self.path.open("a"' in sink


PLANTED = {
    # the three writers this replaced, as they were written
    "old_monitor.py": """
import json
class EvalMonitor:
    def __init__(self, metrics_path):
        self.metrics_path = metrics_path
    def __call__(self, step, row):
        with self.metrics_path.open("a") as fh:
            fh.write(json.dumps({"event": "eval", **row}) + "\\n")
""",
    "old_grpo.py": """
import json
class HeldoutMonitor:
    def __init__(self, run_dir):
        self.metrics_path = run_dir / "metrics.jsonl"
    def alarm(self, alarm):
        with self.metrics_path.open("a") as fh:
            fh.write(json.dumps({"event": "alarm", **alarm}) + "\\n")
""",
    "through_the_name.py": """
from tempering.tracking.events import metrics_path
def log(run_dir, line):
    path = metrics_path(run_dir)
    path.write_text(line)
""",
}


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_the_scan_finds_a_planted_second_writer(name):
    assert metrics_writers(name, PLANTED[name]) != []


def test_the_scan_finds_a_writer_planted_in_a_copy_of_the_package_and_passes_readers(tmp_path):
    copy = tmp_path / "tempering"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "recipes" / "planted.py").write_text(
        'def note(run_dir, text):\n    open(run_dir / "metrics.jsonl", mode="a").write(text)\n'
    )
    assert scan(copy) == [
        "recipes/planted.py:2 spells the file name",
        "recipes/planted.py:2 writes it",
    ]
    reader = "from tempering.tracking.events import metrics_path\ndef n(d):\n    return metrics_path(d).read_text()\n"
    summary = "def f(d, s):\n    (d / 'summary.json').write_text(s)\n    return str(metrics_path(d))\n"
    assert metrics_writers("reader.py", reader) == [] and metrics_writers("summary.py", summary) == []


def test_a_record_cut_short_by_a_kill_is_left_out_and_events_are_parsed_not_matched(tmp_path):
    path = tmp_path / "metrics.jsonl"
    rows = [
        {"step": 1, "loss": 1.0, "note": 'a "eval" inside a string'},
        {"event": "eval", "step": 2, "eval_loss": 0.5},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"event": "eval", "st')
    assert read_metrics(path) == rows
    assert read_events(path, "eval") == rows[1:]  # the step record mentioning "eval" is not an event


# -- tiny runs read back through the trackers' own readers ---------------------------------------


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, smol_tokenizer):
    path = tmp_path_factory.mktemp("tiny")
    model = tiny_llama(vocab=len(smol_tokenizer), seed=5)
    model.config.eos_token_id = smol_tokenizer.eos_token_id
    model.save_pretrained(path)
    smol_tokenizer.save_pretrained(path)
    return path


@pytest.fixture()
def trackers_env(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)


def tensorboard_scalars(run_dir: Path) -> dict[str, dict[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tensorboard"))
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


def mlflow_history(root: Path, keys: list[str]) -> dict[str, dict[int, float]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("tempering")
    assert experiment is not None
    (run,) = client.search_runs([experiment.experiment_id])
    return {k: {m.step: m.value for m in client.get_metric_history(run.info.run_id, k)} for k in keys}


def test_an_sft_run_mirrors_eval_every_into_tensorboard_and_mlflow(tmp_path, tiny_dir, trackers_env):
    rows = arithmetic_conversations(40, 1)
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:32]))
    (tmp_path / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[32:]))
    cfg = {
        "model": str(tiny_dir),
        "lora": {"r": 4, "alpha": 8, "last_layers": 1},
        "data": {"train": str(tmp_path / "train.jsonl"), "eval": str(tmp_path / "eval.jsonl"), "max_length": 64},
        "train": {
            "steps": 4,
            "batch_size": 4,
            "eval_every": 2,
            "precision": "fp32",
            "loggers": ["tensorboard", "mlflow"],
        },
        "out": str(tmp_path / "runs"),
        "name": "sft",
    }
    (tmp_path / "sft.yaml").write_text(yaml.safe_dump(cfg))
    res = CliRunner().invoke(app, ["sft", str(tmp_path / "sft.yaml")])
    assert res.exit_code == 0, res.output
    run = tmp_path / "runs" / "sft"
    evals = {r["step"]: r["eval_loss"] for r in read_events(run / "metrics.jsonl", "eval")}
    assert sorted(evals) == [2, 4]
    assert tensorboard_scalars(run)["eval_loss"] == pytest.approx(evals, rel=1e-6)  # float32 on disk
    assert mlflow_history(tmp_path / "runs", ["eval_loss"])["eval_loss"] == evals


HELD_TASKS = 3
HELD_SCRIPT = [0.2, 0.9, 0.5, 0.3]  # the held-out reward of each measurement: steps 0, 2, 4, 6
TRAIN_RISE = 100  # the k-th training sample scores k / 100: the training reward rises every step
CALLS: Counter = Counter()
LOCK = threading.Lock()


@register("scripted_reward")
def scripted_reward(spec, completion, ctx):
    """Held-out tasks: HELD_SCRIPT[measurement]; training samples: a reward that rises with each one."""
    with LOCK:
        kind = "held" if spec.get("held") else "train"
        k = CALLS[kind]
        CALLS[kind] += 1
    if kind == "held":
        return Reward(value=HELD_SCRIPT[min(k // HELD_TASKS, len(HELD_SCRIPT) - 1)])
    return Reward(value=min(1.0, k / TRAIN_RISE))


def _tasks(path: Path, n: int, held: bool) -> str:
    rows = [
        {"id": f"{'h' if held else 't'}{i}", "prompt": f"say {i} {'held' if held else 'train'}",
         "verifier": {"type": "scripted_reward", **({"held": True} if held else {})}}
        for i in range(n)
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_a_grpo_run_mirrors_heldout_metrics_and_alarms_and_keeps_the_best_by_heldout_reward(
    tmp_path, tiny_dir, trackers_env
):
    CALLS.clear()
    cfg = {
        "model": str(tiny_dir),
        "lora": {"r": 4, "alpha": 8, "last_layers": 1},
        "tasks": {"source": _tasks(tmp_path / "train.jsonl", 16, held=False)},
        "heldout": {"tasks": {"source": _tasks(tmp_path / "held.jsonl", HELD_TASKS, held=True)}, "max_new_tokens": 2,
                    "alarm_window": 2},
        "grpo": {"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 3, "dynamic_sampling": False,
                 "max_refills": 0, "truncation": "keep", "reward_workers": 1, "plugins": [PLUGIN]},
        "train": {"steps": 6, "eval_every": 2, "keep_best": "heldout/tasks/reward", "precision": "fp32",
                  "optim": {"lr": 1e-3}, "checkpoint": {"every": 2, "keep_last": 5},
                  "loggers": ["tensorboard", "mlflow"]},
        "out": str(tmp_path / "runs"),
        "name": "g",
    }  # fmt: skip
    (tmp_path / "grpo.yaml").write_text(yaml.safe_dump(cfg))
    res = CliRunner().invoke(app, ["grpo", str(tmp_path / "grpo.yaml")])
    assert res.exit_code == 0, res.output
    run = tmp_path / "runs" / "g"
    metrics = run / "metrics.jsonl"

    # the held-out suite at 0, 2, 4 and 6, as scripted, under heldout/tasks/
    evals = {r["step"]: r["heldout/tasks/reward"] for r in read_events(metrics, "eval")}
    assert evals == pytest.approx({0: 0.2, 2: 0.9, 4: 0.5, 6: 0.3})

    # alarms: the training reward rose while the held-out reward fell (2 -> 4: -0.4; 4 -> 6: -0.2)
    train = {r["step"]: r["reward_mean"] for r in read_metrics(metrics) if "event" not in r}
    mean = lambda steps: sum(train[s] for s in steps) / len(steps)  # noqa: E731  (the last <= 5 steps)
    alarms = {r["step"]: r for r in read_events(metrics, "alarm")}
    assert sorted(alarms) == [4, 6]
    assert alarms[4]["heldout_change"] == pytest.approx(-0.4) and alarms[6]["heldout_change"] == pytest.approx(-0.2)
    assert alarms[4]["train_reward_rise"] == pytest.approx(mean([1, 2, 3, 4]) - mean([1, 2]))
    assert alarms[6]["train_reward_rise"] == pytest.approx(mean([2, 3, 4, 5, 6]) - mean([1, 2, 3, 4]))

    # both reach TensorBoard and MLflow, read back with their own readers
    keys = ["heldout/tasks/reward", "alarm/heldout_change", "alarm/train_reward_rise"]
    expected = {
        "heldout/tasks/reward": evals,
        "alarm/heldout_change": {s: a["heldout_change"] for s, a in alarms.items()},
        "alarm/train_reward_rise": {s: a["train_reward_rise"] for s, a in alarms.items()},
    }
    board = tensorboard_scalars(run)
    for key in keys:
        assert board[key] == pytest.approx(expected[key], rel=1e-6), key
    history = mlflow_history(tmp_path / "runs", keys)
    for key in keys:
        assert history[key] == pytest.approx(expected[key]), key

    # keep_best: step 2's 0.9 (step 0 is the untrained model and does not count); best/ is that model
    summary = json.loads((run / "summary.json").read_text())
    assert summary["best"] == {"step": 2, "value": pytest.approx(0.9)}
    best = load_file(run / "best" / "adapter_model.safetensors")
    at = {
        "best": best,
        **{s: load_file(run / "checkpoints" / f"step-{s:08d}" / "weights.safetensors") for s in (2, 4, 6)},
    }
    lora = {k.replace(".default", ""): v for k, v in at[2].items()}
    assert set(lora) == set(best) and all(best[k].equal(lora[k]) for k in best)
    later = {k.replace(".default", ""): v for k, v in at[6].items()}
    assert any(not best[k].equal(later[k]) for k in best)  # the final model differs: training moved it


def test_heldout_every_is_refused_naming_train_eval_every(tmp_path):
    from tempering.config import ConfigError, GRPOConfig, load_config

    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump({"heldout": {"every": 5}, "train": {"steps": 10}}))
    with pytest.raises(ConfigError) as err:
        load_config(GRPOConfig, path)
    assert len(str(err.value).splitlines()) == 1 and "heldout.every moved to train.eval_every" in str(err.value)
    # the old default holds: with held-out tasks and no schedule, every 10 steps; none without them
    path.write_text(yaml.safe_dump({"train": {"steps": 10}}))
    assert load_config(GRPOConfig, path).train.eval_every == 10
    path.write_text(yaml.safe_dump({"heldout": None, "train": {"steps": 10, "eval_every": 5}}))
    with pytest.raises(ConfigError, match="train.eval_every measures the held-out tasks, and heldout: is null"):
        load_config(GRPOConfig, path)
