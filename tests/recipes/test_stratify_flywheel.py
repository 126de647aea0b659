"""Stratification and the flywheel over a scripted engine (the one rollout path, real verifiers)."""

import json

import pytest

from tempering.config import SamplingSettings, SynthConfig
from tempering.recipes.stratify import bucket, pass_rates, sample_tasks, stratify
from tempering.recipes.synth import pick_best, reflow_final_answer, synth_rows
from tempering.rollout.engine import Completion
from tempering.types import Task


class ScriptedEngine:
    """An `Engine` whose replies are scripted per prompt: `script[prompt text](j)` is sample j."""

    identity = "scripted"
    precision = "fp32"

    def __init__(self, tasks, script):
        self.by_ids = {}
        self.script = script
        for t in tasks:
            self.by_ids[tuple(self.chat_prompt(t.chat()))] = t.prompt

    def chat_prompt(self, messages):
        return [ord(c) for c in messages[-1]["content"]]

    def sync_weights(self, weights):
        pass

    def generate(self, prompts, params):
        out = []
        for i, p in enumerate(prompts):
            text = self.by_ids[tuple(p)]
            out.append([Completion(i, [1, 2], [-0.1, -0.1], self.script[text](j), "stop") for j in range(params.n)])
        return out


def _tasks():
    return [
        Task(
            id=f"t{i}",
            prompt=f"What is {i}+{i}? Answer with just the number.",
            verifier={"type": "numeric", "answer": str(2 * i)},
            track="reasoning",
            source="test",
        )
        for i in range(4)
    ]


def _script():
    # t0 always right, t1 right in 2 of 4 (once bare, once in prose), t2 never, t3 right in 1 of 4
    return {
        "What is 0+0? Answer with just the number.": lambda j: "0",
        "What is 1+1? Answer with just the number.": lambda j: ["2", "5", "The answer is 2.", "7"][j],
        "What is 2+2? Answer with just the number.": lambda j: "5",
        "What is 3+3? Answer with just the number.": lambda j: ["1", "So 3 + 3 = 6, done", "9", "x"][j],
    }


def test_stratify_buckets_and_curriculum():
    tasks = _tasks()
    groups = sample_tasks(
        tasks,
        ScriptedEngine(tasks, _script()),
        SamplingSettings(),
        4,
        seed=0,
        batch_prompts=3,
        reward_workers=2,
        label="test",
    )
    rates = pass_rates(tasks, groups)
    assert [(r.passed, r.judged) for r in rates] == [(4, 4), (2, 4), (0, 4), (1, 4)]
    stratified, rl_set, report = stratify(rates)
    assert [t.difficulty for t in stratified] == [0.0, 0.5, 1.0, 0.75]
    assert report["buckets"] == {"too_easy": 1, "learnable": 2, "too_hard": 1, "unjudged": 0}
    assert [t.id for t in rl_set] == ["t1", "t3"]  # easy to hard
    assert report["mean_pass_rate"] == pytest.approx(7 / 16)
    _, rl_set, _ = stratify(rates, too_easy=0.5)  # t1 (0.5) now counts as mastered
    assert [t.id for t in rl_set] == ["t3"]
    assert bucket(None, 1.0, 0.0) == "unjudged"
    with pytest.raises(ValueError):
        stratify(rates, too_easy=0.2, too_hard=0.5)


def test_flywheel_keeps_best_reflows_and_records_provenance():
    tasks = _tasks()
    groups = sample_tasks(
        tasks,
        ScriptedEngine(tasks, _script()),
        SamplingSettings(),
        4,
        seed=0,
        batch_prompts=4,
        reward_workers=2,
        label="test",
    )
    cfg = SynthConfig(n=4, reflow="final_answer", pairs=True, model="m")
    sft, failures, pairs, counts = synth_rows(tasks, groups, cfg, "hash123")
    assert counts["kept"] == 3 and counts["passed"] == 7 and counts["failures"] == 9
    answers = {r["meta"]["task_id"]: r["messages"][-1]["content"] for r in sft}
    assert answers == {"t0": "0", "t1": "2", "t3": "6"}  # t3's prose answer reflowed to the number
    t3 = next(r for r in sft if r["meta"]["task_id"] == "t3")["meta"]
    assert t3["reflow"] == {"kind": "final_answer", "original": "So 3 + 3 = 6, done"}
    assert t3["generator_hash"] == "hash123" and t3["verifier"] == "numeric" and t3["passed_of_n"] == "1/4"
    assert t3["sampling"]["n"] == 4
    t1 = next(r for r in sft if r["meta"]["task_id"] == "t1")["meta"]
    assert t1["reflow"] == {"kind": "none"}  # the shortest correct one ("2") needs no rewrite
    assert counts["reflowed"] == 1
    assert {p["meta"]["task_id"] for p in pairs} == {"t1", "t3"} and all(p["source"] == "verifier" for p in pairs)
    assert {f["task_id"] for f in failures} == {"t1", "t2", "t3"}
    json.dumps([sft, failures, pairs])  # plain JSON rows


def test_reflow_only_extracts_what_the_verifier_reads():
    task = _tasks()[3]
    assert reflow_final_answer(task, "3 + 3 = 6") == "6"
    assert reflow_final_answer(task, "The answer is 1,006.") == "1006"
    assert reflow_final_answer(task, "no idea") is None
    exact = Task(id="e", prompt="Say hi", verifier={"type": "exact", "answer": "hi"})
    assert reflow_final_answer(exact, "The answer is: hi") == "hi"


def test_pick_best_prefers_high_reward_then_short():
    tasks = _tasks()
    groups = sample_tasks(
        tasks[1:2],
        ScriptedEngine(tasks, _script()),
        SamplingSettings(),
        4,
        seed=0,
        batch_prompts=1,
        reward_workers=1,
        label="test",
    )
    assert pick_best(groups[0], 1.0).completion == "2"
    assert pick_best(groups[0], 2.0) is None


@pytest.mark.slow
def test_stratify_and_synth_cli_on_the_default_model(tmp_path):
    """`temper data stratify` and `temper data synth` end to end on the default model (tiny sizes)."""
    from typer.testing import CliRunner

    from tempering.cli import app
    from tempering.runs.registry import Registry

    common = ["--set", "sampling.max_new_tokens=6", "--set", f"out={tmp_path}", "--set", "threads=2"]
    res = CliRunner().invoke(app, ["data", "stratify", "--n", "3", "--k", "2", "--name", "s", *common])
    assert res.exit_code == 0, res.output
    line = json.loads(res.stdout.strip().splitlines()[-1])
    assert line["tasks"] == 3 and line["too_easy"] + line["learnable"] + line["too_hard"] + line["unjudged"] == 3
    rows = [json.loads(x) for x in (tmp_path / "s" / "stratified.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(r["difficulty"] in (0.0, 0.5, 1.0) for r in rows)
    res = CliRunner().invoke(
        app, ["data", "synth", "--tasks-n", "3", "--n", "2", "--reflow", "final_answer", "--name", "y", *common]
    )
    assert res.exit_code == 0, res.output
    line = json.loads(res.stdout.strip().splitlines()[-1])
    assert line["candidates"] == 6 and line["kept"] <= 3
    failed = (tmp_path / "y" / "failures.jsonl").read_text().splitlines()
    assert len(failed) == line["candidates"] - line["passed"]
    with Registry(tmp_path / "registry.sqlite") as reg:
        kinds = {r["kind"]: r["status"] for r in reg.list()}
    assert kinds == {"stratify": "finished", "synth": "finished"}
    bad = CliRunner().invoke(app, ["data", "synth", "--tasks", str(tmp_path / "missing.jsonl"), *common])
    assert bad.exit_code == 2 and "missing.jsonl" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_stratify_samples_with_the_engine_its_config_names(tmp_path, smol_tokenizer):
    """`engine:` reaches the recipe: a speculative engine (prompt lookup) measures the same
    greedy pass rates under the same generator hash as the default HFEngine."""
    from tempering.config import StratifyConfig
    from tempering.recipes.stratify import run_stratify
    from tests.conftest import tiny_llama

    model_dir = tmp_path / "tiny"
    tiny_llama(vocab=len(smol_tokenizer), seed=4).save_pretrained(model_dir)
    smol_tokenizer.save_pretrained(model_dir)
    base = {
        "model": str(model_dir),
        "tasks": {"n": 4},
        "k": 2,
        "sampling": {"temperature": 0, "max_new_tokens": 6},
        "precision": "fp32",
        "out": str(tmp_path / "runs"),
    }
    plain = run_stratify(StratifyConfig(**base, name="hf"))
    fast = run_stratify(StratifyConfig(**base, name="spec", engine={"kind": "speculative", "draft": {}}))
    rates = [(tmp_path / "runs" / n / "pass_rates.jsonl").read_text() for n in ("hf", "spec")]
    assert rates[0] == rates[1] and rates[0].count("\n") == 4
    assert fast["generator_hash"] == plain["generator_hash"]
