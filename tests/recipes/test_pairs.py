"""Verifier-built pairs: a scripted engine through the real rollout path and real verifiers."""

from __future__ import annotations

import json

import pytest

from tempering.config import PairsConfig, load_config
from tempering.data.preference import check_pair, load_pairs
from tempering.recipes.pairs import bare_answer, build_pairs, write_jsonl
from tempering.rollout.engine import Completion
from tempering.rollout.rollout import ThreadRewardWorkers
from tempering.types import Task


class ScriptedEngine:
    """An `Engine` whose samples for prompt i are `script[i]` (as many as asked, cycled)."""

    precision = "fp32"

    def __init__(self, script: list[list[str | tuple[str, str]]]):
        self.script = script
        self.calls = 0

    @property
    def identity(self) -> str:
        return "scripted"

    def chat_prompt(self, messages):
        return [1, 2, 3]

    def sync_weights(self, weights):
        pass

    def generate(self, prompts, params):
        out = []
        for i in range(len(prompts)):
            texts = self.script[self.calls + i]
            group = []
            for j in range(params.n):
                item = texts[j % len(texts)]
                text, finish = item if isinstance(item, tuple) else (item, "stop")
                group.append(Completion(i, [7] * 3, [-0.1] * 3, text, finish))
            out.append(group)
        self.calls += len(prompts)
        return out


def add_task(i: int, a: int, b: int) -> Task:
    return Task(
        id=f"t{i}",
        prompt=f"What is {a}+{b}? Answer with just the number.",
        verifier={"type": "numeric", "answer": str(a + b)},
    )


def build(script, tasks, **cfg):
    config = PairsConfig(output="unused.jsonl", k=len(script[0]), chunk_tasks=2, **cfg)
    with ThreadRewardWorkers(2) as workers:
        return build_pairs(tasks, ScriptedEngine(script), config, workers)


def test_correct_and_strict_pairs_from_sampled_replies():
    rows, counts = build([["92", "25+67 = 92", "25+67 = 124", "124"]], [add_task(0, 25, 67)])
    kinds = [(r["meta"]["kind"], r["chosen"], r["rejected"]) for r in rows]
    correct = [k for k in kinds if k[0] == "correct"]
    strict = [k for k in kinds if k[0] == "strict"]
    # correct: a correct reply (strict first) over each distinct wrong one
    assert {c[2] for c in correct} == {"25+67 = 124", "124"}
    assert all(c[1] in ("92", "25+67 = 92") for c in correct)
    # strict: the bare "92" over the sloppy correct reply first, then a wrong one
    assert strict[0][1:] == ("92", "25+67 = 92")
    assert strict[1][1] == "92" and strict[1][2] in ("25+67 = 124", "124")
    assert counts["strict"] == 1 and counts["sloppy"] == 1 and counts["wrong"] == 2
    assert counts["pairs"] == 4 and counts["reformatted"] == 0
    for r in rows:
        assert r["source"] == "verifier" and r["weight"] == 1.0
        assert r["meta"]["chosen_origin"] == "sampled"
        assert r["meta"]["scores"]["chosen"]["correct"] == 1.0
        check_pair(r)  # every row meets the shared pair contract


def test_strict_reply_is_reformatted_from_the_models_own_verified_answer():
    rows, counts = build([["25+67 = 92.", "The sum is 124", "25+67 = 124", "25+67 = 124"]], [add_task(0, 25, 67)])
    strict = [r for r in rows if r["meta"]["kind"] == "strict"]
    assert [r["chosen"] for r in strict] == ["92", "92"]
    assert strict[0]["rejected"] == "25+67 = 92."  # the format contrast comes first
    assert all(r["meta"]["chosen_origin"] == "reformatted" for r in strict)
    assert strict[0]["meta"]["scores"]["chosen"] == {"correct": 1.0, "strict0": 1.0, "strict1": 1.0}
    assert counts["reformatted"] == 2
    # the duplicate wrong reply is one rejected candidate, not two
    correct = [r for r in rows if r["meta"]["kind"] == "correct"]
    assert sorted(r["rejected"] for r in correct) == ["25+67 = 124", "The sum is 124"]


def test_no_reformat_no_strict_pairs():
    rows, _ = build([["25+67 = 92", "25+67 = 124"]], [add_task(0, 25, 67)], reformat=False)
    assert [r["meta"]["kind"] for r in rows] == ["correct"]


def test_reformat_never_uses_the_hidden_answer():
    # every reply is wrong: nothing is correct, so nothing may be paired (no gold answer leaks in)
    rows, counts = build([["25+67 = 124", "100", "I like cats"]], [add_task(0, 25, 67)])
    assert rows == [] and counts["tasks_paired"] == 0


def test_truncated_and_empty_replies_are_never_chosen():
    script = [[("25+67 = 92 and then 92", "length"), "   ", "25+67 = 124"]]
    rows, counts = build(script, [add_task(0, 25, 67)], kinds=["correct"])
    assert rows == []  # the only correct reply was cut off; the blank one is no candidate
    assert counts["judged"] == 2
    rows, _ = build(script, [add_task(0, 25, 67)], kinds=["strict"])
    assert [(r["chosen"], r["rejected"]) for r in rows] == [("92", "25+67 = 92 and then 92"), ("92", "25+67 = 124")]


def test_verifier_errors_are_dropped_not_called_wrong():
    broken = Task(id="b", prompt="What is 1+1?", verifier={"type": "numeric", "answer": "not a number"})
    rows, counts = build([["2", "3"], ["92", "124"]], [broken, add_task(1, 25, 67)])
    assert counts["judged"] == 2 and counts["samples"] == 4
    assert {r["meta"]["task_id"] for r in rows} == {"t1"}


def test_provenance_and_pairs_per_kind():
    rows, _ = build([["92", "1", "2", "3", "4"]], [add_task(0, 25, 67)], pairs_per_kind=3, kinds=["strict"])
    assert len(rows) == 3 and len({r["rejected"] for r in rows}) == 3
    meta = rows[0]["meta"]
    assert meta["generator"]["identity"] == "scripted"
    assert meta["sampling"]["k"] == 5 and meta["sampling"]["temperature"] == 1.0
    assert meta["verifier"]["task"] == {"type": "numeric", "answer": "92"}
    assert meta["samples"]["chosen"] == 0


def test_written_rows_load_with_the_pair_loader(tmp_path):
    rows, _ = build([["92", "25+67 = 92", "124"]], [add_task(0, 25, 67)])
    path = write_jsonl(rows, tmp_path / "p.jsonl")
    loaded = load_pairs([str(path)])
    assert len(loaded.records) == len(rows) and not loaded.errors
    assert json.loads(path.read_text().splitlines()[0])["prompt"].startswith("What is 25+67")


@pytest.mark.parametrize(
    "text, want", [("25 + 67 = 92.", "92"), ("The answer is 1,024", "1024"), ("half: 1/2", "0.5"), ("no number", None)]
)
def test_bare_answer(text, want):
    assert bare_answer(text) == want


def test_config_from_flags_and_unknown_keys(tmp_path):
    cfg = load_config(PairsConfig, None, ["k=4"], {"output": "x.jsonl", "tasks.ops": "+"})
    assert cfg.k == 4 and cfg.tasks.options.ops == "+" and cfg.kinds == ["correct", "strict"]
    with pytest.raises(Exception, match="kinds"):
        load_config(PairsConfig, None, ["kinds=[fast]"], {"output": "x"})


@pytest.mark.slow
def test_pairs_from_the_default_model_end_to_end(tmp_path):
    """16 additions x 8 samples from the default model: every written row is a valid pair whose
    chosen side the task's verifier passes and whose rejected side it ranks lower; the run is
    recorded with its output. (At temperature 1 about 5% of its replies are correct, so 128
    samples without one correct reply would be a ~0.1% event.)"""
    from tempering.config import PairSampling, TaskSourceSettings
    from tempering.data.builtin import arithmetic_tasks
    from tempering.recipes.pairs import run_pairs
    from tempering.runs.registry import Registry
    from tempering.verifiers import score

    cfg = PairsConfig(
        tasks=TaskSourceSettings(n=16, ops="+"),
        k=8,
        sampling=PairSampling(max_new_tokens=24),
        output=str(tmp_path / "pairs.jsonl"),
        out=str(tmp_path / "runs"),
        name="pairs-e2e",
        threads=1,
    )
    summary = run_pairs(cfg)
    assert summary["samples"] == 128 and summary["strict"] + summary["sloppy"] + summary["wrong"] == summary["judged"]
    loaded = load_pairs([cfg.output])
    assert not loaded.errors and len(loaded.records) == summary["pairs"] > 0
    tasks = {t.id: t for t in arithmetic_tasks(16, 0, "train", "+")}
    for rec in loaded.records:
        pair, task = rec.value, tasks[rec.value.meta["task_id"]]
        chosen, rejected = score(task, pair.chosen).value, score(task, pair.rejected).value
        assert chosen == 1.0
        if pair.meta["kind"] == "correct":
            assert rejected == 0.0
        else:
            assert pair.chosen.strip().lstrip("-").isdigit() and pair.rejected.strip() != pair.chosen.strip()
    with Registry(tmp_path / "runs" / "registry.sqlite") as registry:
        run = registry.latest("pairs-e2e")
        assert run["status"] == "finished" and run["outputs"]["pairs"].endswith("pairs.jsonl")
    assert run_pairs(cfg)["run_id"] == summary["run_id"]  # a finished run is reported, not redone
