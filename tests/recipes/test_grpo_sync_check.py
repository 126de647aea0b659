"""The weight-sync check (`rollout/sync_check.py`): an engine whose sync leaves its weights behind
stops a short GRPO run at the first check after the first weight change, in one line naming the
version, the step and the measured gap; the same run with a real sync passes every check."""

import copy
import json

import pytest
import yaml
from typer.testing import CliRunner

import tempering.rollout.select as select
import tempering.rollout.source as source_module
from tempering.cli import app
from tempering.config import GRPOSettings
from tempering.rollout.engine import HFEngine
from tempering.rollout.replay import FP32_EPSILON
from tempering.rollout.source import RolloutSource
from tempering.rollout.sync_check import SyncCheck
from tempering.types import Task
from tests.conftest import tiny_llama


class BaseWeightsEngine(HFEngine):
    """The planted bug: a sync that keeps the engine's base weights (a no-op)."""

    def sync_weights(self, weights):
        pass


def _config(tmp_path, model_dir, lora) -> str:
    cfg = {
        "model": str(model_dir),
        "lora": {"r": 4, "alpha": 8} if lora else None,
        "tasks": {"source": "builtin:arithmetic", "ops": "+", "n": 8},
        "heldout": None,
        "reward": [
            # a reward the random tiny model earns about every third sample, so every step has a gradient
            {"name": "caps", "weight": 1.0, "verifier": {"type": "regex", "pattern": "[A-Z]{2}", "on": "completion"}}
        ],
        "grpo": {
            "prompts_per_step": 2,
            "group_size": 4,
            "max_new_tokens": 8,
            "dynamic_sampling": False,
            "truncation": "keep",
        },
        "train": {"steps": 3, "precision": "fp32", "optim": {"lr": 1e-2}},
        "out": str(tmp_path / "runs"),
        "name": "g",
    }
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def _with_own_copy(engine_class, monkeypatch):
    """GRPO's engine over its own copy of the trainer's model (as a replica holds), checked every step."""
    monkeypatch.setattr(
        select,
        "build_engine",
        lambda s, model, tok, precision, **kw: engine_class(copy.deepcopy(model), tok, precision),
    )
    monkeypatch.setattr(source_module, "SyncCheck", lambda every, *args: SyncCheck(1, *args))


@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_an_engine_that_keeps_its_base_weights_stops_the_run_at_the_first_check(tmp_path, tiny_dir, lora, monkeypatch):
    _with_own_copy(HFEngine, monkeypatch)
    res = CliRunner().invoke(app, ["grpo", _config(tmp_path / "synced", tiny_dir, lora)])
    assert res.exit_code == 0, res.output
    lines = (tmp_path / "synced" / "runs" / "g" / "metrics.jsonl").read_text().splitlines()
    checks = [
        (r["step"], r["sync_check_version"], r["sync_check_max"])
        for r in map(json.loads, lines)
        if "sync_check_max" in r
    ]
    assert [(s, v) for s, v, _ in checks] == [(2, 1.0), (3, 2.0)]  # synced after steps 1 and 2, checked before 2 and 3
    assert all(gap <= FP32_EPSILON for _, _, gap in checks), checks

    _with_own_copy(BaseWeightsEngine, monkeypatch)
    res = CliRunner().invoke(app, ["grpo", _config(tmp_path / "planted", tiny_dir, lora)])
    assert res.exit_code == 2 and "Traceback" not in res.output
    line = res.stderr.strip().splitlines()[-1]
    assert "weight sync check at step 1: the engine's log-probs after syncing version 1 are " in line
    gap = float(line.split(" are ")[1].split(" from ")[0])
    assert gap > FP32_EPSILON and "fp32 replay epsilon 1e-05" in line
    assert not (tmp_path / "planted" / "runs" / "g" / "final").exists()


def test_an_engine_sharing_the_trainers_model_has_nothing_to_check(smol_tokenizer):
    model = tiny_llama(vocab=49152, seed=3)
    tasks = [Task(id="t", prompt="say 1", verifier={"type": "exact", "answer": "1"})]
    shared = RolloutSource(tasks, HFEngine(model, smol_tokenizer), GRPOSettings(), grad_accum=1, seed=0, model=model)
    own = RolloutSource(
        tasks, HFEngine(copy.deepcopy(model), smol_tokenizer), GRPOSettings(), grad_accum=1, seed=0, model=model
    )
    try:
        assert shared._check is None and own._check is not None
    finally:
        shared.close()
        own.close()
