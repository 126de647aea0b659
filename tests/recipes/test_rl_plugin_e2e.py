"""A policy loss and an advantage estimator defined here, outside the package, are selected by name
in a GRPO config (`grpo.plugins` names this module) and train a tiny model; an unknown name is a
one-line error listing the registered ones, the plug-in's among them."""

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import torch
import yaml
from typer.testing import CliRunner

from tempering.algorithms import register_advantage, register_policy_loss
from tempering.cli import app

CALLS: Counter = Counter()
PLUGIN = __name__  # "tests.recipes.test_rl_plugin_e2e": the module a config names


@register_policy_loss("unclipped_pg", aggregation="seq_mean")
def unclipped_policy_gradient(logp, logp_old, advantages, mask, *, clip_low, clip_high):
    """Plain importance-weighted policy gradient: -r A per token, no clipping."""
    CALLS["loss"] += 1
    return -torch.exp(logp - logp_old) * advantages, torch.zeros_like(mask, dtype=torch.bool)


@register_advantage("rank")
def rank_advantages(rewards, groups):
    """Centred rank of each reward within its group, in [-1, 1]."""
    CALLS["advantage"] += 1
    out = torch.zeros_like(rewards)
    for g in groups.unique():
        idx = (groups == g).nonzero().flatten()
        ranks = rewards[idx].argsort().argsort().to(rewards.dtype)
        out[idx] = (2 * ranks / max(len(idx) - 1, 1) - 1) if len(idx) > 1 else 0.0
    return out


def write_config(tmp_path: Path, model_dir: Path, **grpo) -> Path:
    cfg = {
        "model": str(model_dir),
        "lora": {"r": 4, "alpha": 8, "last_layers": 1},
        "tasks": {"source": "builtin:arithmetic", "ops": "+", "n": 32},
        "heldout": None,
        "reward": [
            {"name": "digit", "weight": 1.0, "verifier": {"type": "regex", "pattern": "\\d", "on": "completion"}}
        ],
        "grpo": {"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 6, "dynamic_sampling": False, **grpo},
        "train": {"steps": 3, "precision": "fp32", "optim": {"lr": 1e-3}, "checkpoint": {"every": 3}},
        "out": str(tmp_path / "runs"),
        "name": "plugin",
    }
    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_plugin_loss_and_advantage_train_by_name(tmp_path, tiny_dir):
    CALLS.clear()
    off_policy = {"mode": "token_truncate", "cap": 2.0}
    config = write_config(
        tmp_path,
        tiny_dir,
        plugins=[PLUGIN],
        loss="unclipped_pg",
        advantage="rank",
        updates_per_batch=2,
        off_policy=off_policy,
    )
    res = CliRunner().invoke(app, ["grpo", str(config)])
    assert res.exit_code == 0, res.output
    run = tmp_path / "runs" / "plugin"
    steps = [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "reward_mean" in r]
    assert len(steps) == 3 and all(torch.isfinite(torch.tensor(r["loss"])) for r in steps)
    assert CALLS["advantage"] >= 2 and CALLS["loss"] >= 3  # ours ran, not a built-in
    # the TIS statistics are logged: trainer and engine agree here, so nothing is truncated
    assert {"is_ratio_mean", "is_ratio_max", "is_corrected_fraction"} <= set(steps[-1])
    assert abs(steps[-1]["is_ratio_mean"] - 1.0) < 1e-3 and steps[-1]["is_corrected_fraction"] == 0.0
    assert (run / "final" / "adapter_config.json").exists()


def test_unknown_name_is_one_line_listing_the_registered_ones(tmp_path, tiny_dir):
    res = CliRunner().invoke(app, ["grpo", str(write_config(tmp_path, tiny_dir, plugins=[PLUGIN], loss="nope"))])
    assert res.exit_code != 0
    line = res.output.strip()
    assert "\n" not in line and "Traceback" not in line, res.output
    assert (
        "grpo.loss: unknown policy loss 'nope' (registered: bnpo, cispo, dapo, dr_grpo, grpo, gspo, unclipped_pg)"
        in line
    )


def test_a_config_imports_the_plugin_module_by_name(tmp_path, tiny_dir):
    """In a fresh interpreter nothing has imported this file: the config's `plugins` does, when the
    run starts (`load_algorithms`), never while the config validates."""
    config = write_config(tmp_path, tiny_dir, plugins=[PLUGIN], loss="unclipped_pg", advantage="rank")
    code = (
        "import sys; from tempering.config import GRPOConfig, load_config; from tempering import algorithms; "
        "from tempering.config.grpo import load_algorithms; "
        f"cfg = load_config(GRPOConfig, {str(config)!r}); assert {PLUGIN!r} not in sys.modules; load_algorithms(cfg); "
        "print(algorithms.lookup('policy_loss', cfg.grpo.loss).fn.__module__, cfg.grpo.advantage)"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=root,
        env={"PYTHONPATH": f"{root / 'src'}:{root}", "PATH": "/usr/bin:/bin"},
        check=True,
    )
    assert out.stdout.split() == [PLUGIN, "rank"]


def test_grpo_plugins_register_a_verifier_before_the_tasks_load(tmp_path, monkeypatch):
    """`grpo.plugins` is the same door as a suite's `plugins`: a module there may register the
    verifier the training tasks name, and it is imported before they are checked."""
    from tempering.config import GRPOConfig
    from tempering.recipes.grpo import grpo_guard

    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "grpo_first_word.py").write_text(
        "from tempering.types import Reward\nfrom tempering.verifiers import register\n\n"
        "@register('grpo_first_word')\ndef first_word(spec, completion, ctx):\n"
        "    return Reward(value=float(completion.split()[:1] == [spec['word']]))\n"
    )
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        json.dumps({"id": "a", "prompt": "say 4", "verifier": {"type": "grpo_first_word", "word": "4"}}) + "\n"
    )
    cfg = GRPOConfig.model_validate(
        {"tasks": {"source": str(tasks)}, "grpo": {"plugins": ["grpo_first_word"]}, "train": {"steps": 1}}
    )
    grpo_guard(cfg)  # loads and checks the tasks: their verifier type is known
