"""`temper dpo` end to end on a tiny model: bad pairs quarantined, the reference cached on
disk and reused, held-out reward accuracy rises, the run is recorded, SimPO runs reference-free."""

import json
import random

import pytest
import yaml
from typer.testing import CliRunner

from tempering.cli import app
from tests.conftest import tiny_llama


def write_pairs(path, n, seed, bad=()):
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        rows.append(
            {
                "prompt": f"What is {a}+{b}?",
                "chosen": str(a + b),
                "rejected": f"{a} + {b} = {a + b + 1}",
                "source": "verifier",
            }
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "".join(line + "\n" for line in bad))
    return str(path)


@pytest.fixture()
def setup(tmp_path, smol_tokenizer, monkeypatch):
    monkeypatch.setenv("TEMPERING_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "tiny"
    tiny_llama(vocab=len(smol_tokenizer), tie=True).save_pretrained(model)
    smol_tokenizer.save_pretrained(model)
    cfg = {
        "model": str(model),
        "lora": None,
        "data": {
            "train": write_pairs(tmp_path / "train.jsonl", 32, 0, ['{"prompt": "q", "chosen": "a"}', "{broken"]),
            "eval": write_pairs(tmp_path / "eval.jsonl", 16, 1),
            "max_length": 96,
        },
        "dpo": {"beta": 0.5},
        "train": {
            "steps": 10,
            "batch_size": 8,
            "precision": "fp32",
            "optim": {"lr": 3e-3, "schedule": "constant"},
            "checkpoint": {"every": 5},
        },
        "out": str(tmp_path / "runs"),
    }
    path = tmp_path / "dpo.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path, tmp_path


def run(*args):
    res = CliRunner().invoke(app, ["dpo", *map(str, args)])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_dpo_cli_learns_quarantines_and_caches_the_reference(setup):
    cfg, tmp = setup
    first = run(cfg, "--name", "a")
    assert first["data"]["quarantined"] == 2 and first["data"]["valid"] == 32
    quarantine = (tmp / "runs" / "a" / "quarantine.jsonl").read_text().splitlines()
    assert "missing 'rejected'" in json.loads(quarantine[0])["reason"]
    assert first["reference"] == "cache" and first["hit"] is False
    assert first["eval_before"]["reward_accuracy"] == 0.0  # policy == reference before training
    assert first["eval_after"]["reward_accuracy"] > 0.8
    assert first["eval_after"]["loss"] < first["eval_before"]["loss"]
    assert (tmp / "runs" / "a" / "final" / "model.safetensors").is_file()
    again = run(cfg, "--name", "a")  # finished: reported, not redone
    assert again["run_id"] == first["run_id"]
    other = run(cfg, "--name", "b", "--set", "train.seed=1", "--set", "dpo.beta=0.2")
    assert other["hit"] is True and other["key"] == first["key"]  # same model, tokenizer, data


def test_simpo_needs_no_reference_and_bad_loss_is_one_line(setup):
    cfg, _ = setup
    summary = run(cfg, "--name", "s", "--loss", "simpo", "--set", "dpo.beta=2.0", "--steps", "4")
    assert summary["reference"] == "none" and summary["loss"] == "simpo"
    res = CliRunner().invoke(app, ["dpo", str(cfg), "--loss", "hinge"])
    assert res.exit_code == 2 and "dpo.loss" in res.stderr and "Traceback" not in res.output
    assert "unknown preference loss 'hinge' (registered: dpo, ipo, kto, orpo, simpo)" in res.stderr
    # a name of another family says which family it belongs to ('ppo' is a Tinker API loss)
    res = CliRunner().invoke(app, ["dpo", str(cfg), "--loss", "ppo"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert (
        "'ppo' is registered as a Tinker API loss, not a preference loss (registered: dpo, ipo, kto, orpo, simpo)"
        in res.stderr
    )
