"""Multi-track pipelines: bad `tracks:` sections are one-line errors before any work, and a planted
regression (a track trained without replay that breaks the general suite) is caught by the gate,
rebalanced with replay, and released on the second attempt, with the attempts in lineage.

Tiny in-process models only: a word-level 2-layer Llama that answers "blue" (and "red" to `b`
prompts, so it already reads the prefix). Track `a` keeps "blue" on its prompts (trained with SGD
from a loss near 0, its task vector stays near 0: merging is not what this test measures,
bench/experiments/merge_tracks.py does), track `b` teaches "green" on `b` prompts and, trained
without replay, says "green" to everything. The settings (a prefix-reading base, 5 passes over b's
rows so that replay draws 13 general rows, lr 3e-3 for 150 steps) were chosen for margin: the
loop passed on 7 of 8 model seeds on an AVX512 host; with one answer for every prompt in the base,
3 replay rows and lr 1e-2 for 60 steps it passed on 1 of 5 (the outcome turned on float rounding).
"""

import json
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from tempering.cli import app
from tempering.pipeline.plan import PipelineError, load_plan
from tempering.pipeline.tracks import TracksPlan, TrackState, rebalance_step
from tests.conftest import tiny_llama, word_tokenizer
from tests.evals.conftest import env  # noqa: F401
from tests.recipes.test_loop import invoke, last_json
from tests.recipes.test_safety_gate import teach

GENERAL = ["g", "h", "k", "m", "n"]  # prefixes of general prompts: replay is diverse, as general data should be
WORDS = ["<pad>", "<s>", "</s>", "<unk>", "user", "assistant", ":", "|", "a", "b", *GENERAL]
WORDS += [f"w{i}" for i in range(1, 9)] + ["blue", "red", "green"]
TEMPLATE = (  # an assistant turn ends with </s>, so a trained reply stops where the suite expects it
    "{% for m in messages %}{{ m['role'] }} : {{ m['content'] }}{% if m['role'] == 'assistant' %} </s>{% endif %}"
    " | {% endfor %}{% if add_generation_prompt %}assistant :{% endif %}"
)
TRAIN, HELD = [f"w{i}" for i in range(1, 7)], ["w7", "w8"]
RULES = ["gen.accuracy >= base - 0.1", "track-a.accuracy >= 0.5", "track-b.accuracy >= 0.5"]


@pytest.fixture
def blue(tmp_path) -> Path:
    """A tiny model that answers "blue" to every prompt (so it passes the general suite), as an HF dir."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    tok = word_tokenizer(WORDS, TEMPLATE)
    model = tiny_llama(vocab=len(WORDS), seed=0)
    model.config.eos_token_id = model.generation_config.eos_token_id = tok.eos_token_id
    # b's prompts get another answer ("red"), so the base already reads the prefix: a base taught one
    # answer for every prompt ignores its input, and a track then learns "b -> green" slowly and unevenly
    teach(model, tok, [f"{p} {w}" for p in ["a", "b", *GENERAL] for w in TRAIN], "blue", steps=40)
    for _ in range(3):
        teach(model, tok, [f"b {w}" for w in TRAIN], "red", steps=4)
        teach(model, tok, [f"{p} {w}" for p in ["a", *GENERAL] for w in TRAIN], "blue", steps=4)
    path = tmp_path / "blue"
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def write_rows(path: Path, prefixes: str | list[str], words: list[str], answer: str, passes: int = 1) -> str:
    rows = [
        {"messages": [{"role": "user", "content": f"{p} {w}"}, {"role": "assistant", "content": answer}]}
        for _ in range(passes)
        for p in ([prefixes] if isinstance(prefixes, str) else prefixes)
        for w in words
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def write_suite(tmp: Path, name: str, prefix: str, answer: str) -> str:
    tasks = tmp / f"{name}.jsonl"
    tasks.write_text(
        "".join(
            json.dumps(
                {"id": f"{name}-{w}", "prompt": f"{prefix} {w}", "verifier": {"type": "exact", "answer": answer}}
            )
            + "\n"
            for w in HELD + TRAIN[:2]
        )
    )
    suite = {
        "name": name,
        "tasks": {"source": str(tasks)},
        "templates": ["{prompt}"],
        "sampling": {"temperature": 0.0, "n": 1, "max_new_tokens": 3},
        "metrics": ["accuracy"],
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(suite))
    return str(path)


def sft_stage(model: str, data: str, optim: str = "adamw") -> dict:
    return {
        "kind": "sft",
        "model": model,
        "lora": None,  # full weights: mergekit merges the exact task vectors
        "data": {"train": [data], "max_length": 32, "packing": False},
        "train": {
            "steps": 150,
            "batch_size": 8,
            "precision": "fp32",
            "threads": 1,
            "optim": {"name": optim, "lr": 3e-3, "warmup_steps": 0, "schedule": "constant"},
        },
    }


def tracks_pipeline(tmp: Path, model: str, **changes) -> Path:
    suites = [
        write_suite(tmp, "gen", "g", "blue"),
        write_suite(tmp, "track-a", "a", "blue"),
        write_suite(tmp, "track-b", "b", "green"),
    ]
    evals = {"kind": "eval", "suites": suites, "threads": 1, "precision": "fp32"}
    doc = {
        "out": str(tmp / "runs"),
        "stages": {
            "baseline": {**evals, "model": model},
            # SGD: a's loss starts near 0, so its task vector stays near 0 (Adam would take lr-sized steps
            # on any gradient, however small, and a's vector would pull b's prompts to "blue" in the merge)
            "sft_a": sft_stage(model, write_rows(tmp / "a.jsonl", "a", TRAIN, "blue"), optim="sgd"),
            # 5 passes over b's 6 prompts: replay at ratio r adds round(30 r / (1 - r)) general rows (13 of the
            # 36 at 0.3; with one pass it would be 3, too few to cover the general prefixes)
            "sft_b": sft_stage(model, write_rows(tmp / "b.jsonl", "b", TRAIN, "green", passes=5)),
            "merged": {
                "kind": "merge",
                "inputs": ["${sft_a.final}", "${sft_b.final}"],
                "method": "task_arithmetic",
                "base": model,
            },
            "after": {**evals, "model": "${merged.final}"},
            "gate": {"kind": "gate", "base": "${baseline.results}", "candidate": "${after.results}", "rules": RULES},
            "ship": {"kind": "release", "model": "${merged.final}", "gate": "${gate.verdict}"},
        },
        "tracks": {
            "a": {"stages": ["sft_a"], "suites": ["track-a"], "replay": 0.3},
            "b": {"stages": ["sft_b"], "suites": ["track-b"]},  # no replay: it will break the general suite
        },
        "rebalance": {
            "merge": "merged",
            "gate": "gate",
            "max_attempts": 3,
            # general data covers a's prompts too: b's replay then keeps them "blue" on its own
            "replay": {"data": write_rows(tmp / "general.jsonl", ["a", *GENERAL], TRAIN, "blue"), "ratio": 0.3},
        },
    }
    for dotted, value in changes.items():
        node = doc
        *parents, leaf = dotted.split("__")
        for p in parents:
            node = node[p]
        if value is None:
            node.pop(leaf)
        else:
            node[leaf] = value
    path = tmp / "tracks.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"tracks__a__stages": ["sft_x"]}, "tracks.a.stages: unknown stage 'sft_x'"),
        ({"tracks__a__stages": ["baseline"]}, "tracks.a.stages: stage 'baseline' is a 'eval' stage, not a training"),
        ({"tracks__a__weight": 0.0, "tracks__b__weight": 0.0}, "tracks: the weights sum to 0"),
        ({"tracks": {}, "rebalance": None}, "tracks: empty; name at least one track"),
        ({"tracks__a__stages": []}, "tracks.a.stages: List should have at least 1 item"),
        ({"tracks__b__stages": ["sft_a"]}, "tracks.b.stages: stage 'sft_a' is already in track 'a'"),
        ({"rebalance__merge": "after"}, "rebalance.merge: 'after' is not a merge stage"),
        ({"rebalance__gate": "nogate"}, "rebalance.gate: 'nogate' is not a gate stage"),
        ({"stages__merged__weights": [1, 1]}, "stage 'merged': weights: set by tracks.<name>.weight"),
        ({"rebalance": None}, "tracks: needs rebalance:"),
        ({"rebalance__replay__data": "nope.jsonl"}, "rebalance.replay.data.0: file not found"),
    ],
)
def test_a_bad_tracks_section_is_one_line_naming_the_file_and_key(tmp_path, changes, message):
    path = tracks_pipeline(tmp_path, "smollm2-135m-instruct", **changes)
    with pytest.raises(PipelineError) as exc:
        load_plan(path)
    text = str(exc.value)
    assert "\n" not in text and text.startswith(str(path)) and message in text, text
    assert not (tmp_path / "runs").exists()  # nothing ran, nothing written


def test_the_merge_must_take_each_tracks_last_stage_in_track_order(tmp_path):
    path = tracks_pipeline(
        tmp_path, "smollm2-135m-instruct", stages__merged__inputs=["${sft_b.final}", "${sft_a.final}"]
    )
    with pytest.raises(PipelineError, match=r"inputs: \[\$\{sft_a.final\}, \$\{sft_b.final\}\]"):
        load_plan(path)


def test_rebalancing_reweights_a_regressed_track_and_replays_or_shrinks_for_a_general_regression(tmp_path):
    plan = load_plan(tracks_pipeline(tmp_path, "smollm2-135m-instruct"))
    tracks: TracksPlan = plan.tracks
    state = tracks.initial_state()
    own = {"rules": [{"rule": "track-a.accuracy >= 0.5", "passed": False}, {"rule": RULES[0], "passed": True}]}
    step = rebalance_step(tracks, state, own)
    assert step.state["a"].weight == 1.5 and step.state["b"].weight == 1.0 and len(step.actions) == 1
    for rule in ["track-a@4096.accuracy >= 0.5", "no significant regression on track-a@4096.accuracy"]:
        at_length = rebalance_step(tracks, state, {"rules": [{"rule": rule, "passed": False}]})  # reads track-a
        assert (at_length.state["a"].weight, at_length.state["b"].weight) == (1.5, 1.0)
    general = {"rules": [{"rule": RULES[0], "passed": False}]}
    step = rebalance_step(tracks, state, general)
    assert (step.state["a"].replay, step.state["b"].replay) == (0.3, 0.3)  # b had none: it gets the ratio
    assert [a.split(":")[0] for a in step.actions] == ["b"]
    both = {t: TrackState(1.0, 0.3) for t in "ab"}
    step = rebalance_step(tracks, both, general)  # every track already replays: move back toward the base
    assert [s.weight for s in step.state.values()] == [pytest.approx(1 / 1.5)] * 2
    assert rebalance_step(tracks, state, {"rules": [{"rule": "contamination == 0", "passed": False}]}).actions == []


def test_a_planted_general_regression_is_rebalanced_with_replay_and_released(env, tmp_path, blue):  # noqa: F811
    res = invoke(tracks_pipeline(tmp_path, str(blue)))
    out = last_json(res.output)
    assert res.exit_code == 0 and out["status"] == "passed", res.output
    first, *_, last = out["attempts"]
    assert RULES[0] in first["failed_rules"] and first["status"] == "rejected", first  # the general suite broke
    assert first["tracks"]["b"]["replay"] == 0 and last["tracks"]["b"]["replay"] == 0.3
    assert any(a.startswith("b: a general suite regressed; re-mixed") for a in first["actions"])
    assert last["status"] == "passed" and out["stages"]["ship"]["status"] == "done"
    assert len(out["attempts"]) <= 3  # within the budget
    assert out["stages"]["sft_a"]["status"] == "cached"  # the track that did not change is not retrained
    why = CliRunner().invoke(app, ["lineage", last["candidate"], "--root", str(tmp_path / "runs")])
    text = " ".join(why.output.split())
    assert "rebalancing" in text and "attempt 1: rejected" in text, why.output
    assert f"attempt {len(out['attempts'])}: passed" in text, why.output
    assert f"FAIL {RULES[0]}" in text and "replay " in text and "release v1" in text
