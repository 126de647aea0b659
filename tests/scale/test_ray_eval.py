"""Eval shards on Ray: `temper eval run` with `scale:` samples on an engine replica and scores on
reward actors, and gives the in-process samples and scores (one replica; fp32; a local Ray)."""

import json

import pytest
import yaml

pytest.importorskip("ray")

from tempering.config import ScaleSettings
from tempering.evals.evaluate import evaluate_model
from tempering.evals.suite import load_suite
from tests.conftest import tiny_llama


def rows(out):
    return [
        (r["task_id"], r["seed"], r["sample"], r["completion"], r["reward"])
        for r in map(json.loads, (out / "samples.jsonl").read_text().splitlines())
    ]


def test_eval_on_ray_actors_gives_the_in_process_samples_and_scores(tmp_path, smol_tokenizer):
    model = tmp_path / "tiny"
    tiny = tiny_llama(vocab=49152, seed=5)
    tiny.config.eos_token_id = smol_tokenizer.eos_token_id
    tiny.save_pretrained(model)
    smol_tokenizer.save_pretrained(model)
    suite = tmp_path / "caps.yaml"  # a check the random tiny model passes about every third sample
    suite.write_text(
        yaml.safe_dump(
            {
                "name": "caps",
                "metrics": ["accuracy"],
                "tasks": [
                    {
                        "source": "builtin:arithmetic",
                        "ops": "+",
                        "n": 12,
                        "verifier": {"type": "regex", "pattern": "[A-Z]{2}", "on": "completion"},
                    }
                ],
                "sampling": {"temperature": 1.0, "max_new_tokens": 8, "n": 2},
            }
        )
    )
    local = evaluate_model(str(model), [load_suite(suite)], tmp_path / "local", cache=False, precision="fp32")
    remote = evaluate_model(
        str(model),
        [load_suite(suite)],
        tmp_path / "ray",
        cache=False,
        precision="fp32",
        scale=ScaleSettings(reward_workers=2, engine_replicas=1, num_cpus=2),
    )
    a, b = rows(tmp_path / "local"), rows(tmp_path / "ray")
    assert len(a) == 24 and a == b
    assert 0 < sum(r[4] for r in a) < len(a)  # scores vary, so equality says something
    assert local.suites[0].metrics["accuracy"].mean == remote.suites[0].metrics["accuracy"].mean
