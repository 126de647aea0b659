"""Bad-case reflow (`feedback` stage): failed eval cases are clustered and mined for their nearest
*training* tasks (never the eval items themselves), served corrections become preference pairs,
arena votes pass through validated, and the next checkpoint's lineage shows all of it."""

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from tempering.cli import app
from tempering.config import FeedbackConfig, TaskSourceSettings
from tempering.data.builtin import arithmetic_tasks
from tempering.recipes.feedback import read_served, run_feedback
from tempering.runs.registry import Registry
from tests.conftest import tiny_llama

POOL = {"source": "builtin:arithmetic", "ops": "+", "n": 400, "seed": 0, "split": "train", "phrasing": "varied"}


def write_jsonl(path: Path, rows) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def eval_samples(tmp: Path) -> Path:
    """An eval run dir whose samples.jsonl holds 6 failures (word problems and symbolic) and 2 passes."""
    tasks = arithmetic_tasks(8, seed=0, split="heldout", ops="+", phrasing="reworded")
    rows = [
        {
            "suite": "add",
            "task_id": t.id,
            "template": 0,
            "seed": 0,
            "sample": 0,
            "prompt": t.prompt,
            "completion": "I think it is 7" if i < 6 else t.verifier["answer"],
            "reward": float(i >= 6),
            "passed": i >= 6,
            "status": "scored",
            "components": {"correct": float(i >= 6)},
        }
        for i, t in enumerate(tasks)
    ]
    run = tmp / "eval-run"
    run.mkdir()
    write_jsonl(run / "samples.jsonl", rows)
    (run / "results.json").write_text("{}")
    return run


SERVED = [
    {
        "id": "f1",
        "prompt": "What is 12+30?",
        "completion": "40",
        "correction": "42",
        "kind": "correction",
        "release": "v3",
    },
    {
        "id": "f2",
        "prompt": "Add 11 and 11.",
        "completion": "23",
        "kind": "thumbs_down",
        "task": {"answer": "22"},
    },
    {"id": "f3", "prompt": "Say hi", "completion": "hi", "kind": "thumbs_up"},
]
VOTES = [
    {
        "prompt": "What is 2+2?",
        "chosen": "4",
        "rejected": "5",
        "source": "arena",
        "votes": [{"annotator": "a", "prefers": "chosen"}],
    },
    {"prompt": "broken", "chosen": "x"},
]


def test_feedback_mines_training_neighbours_converts_corrections_and_keeps_votes(tmp_path):
    run = eval_samples(tmp_path)
    cfg = FeedbackConfig(
        evals=[str(run / "results.json")],
        served=[write_jsonl(tmp_path / "served.jsonl", SERVED)],
        votes=[write_jsonl(tmp_path / "votes.jsonl", VOTES)],
        pool=TaskSourceSettings(**POOL),
        per_failure=2,
        out=str(tmp_path / "runs"),
        name="fb",
    )
    s = run_feedback(cfg)
    assert s["eval_failures"] == 6 and s["served_rows"] == 3 and s["served_bad_cases"] == 2  # thumbs up is no bad case
    assert s["corrections"] == 1 and s["votes"] == 1 and s["votes_quarantined"] == 1
    out = tmp_path / "runs" / "fb"
    tasks = [json.loads(line) for line in (out / "tasks.jsonl").read_text().splitlines()]
    failed = {r["prompt"] for r in map(json.loads, (run / "samples.jsonl").read_text().splitlines()) if not r["passed"]}
    mined = [t for t in tasks if t["id"].startswith("arithadd-varied-train")]
    assert len(mined) == s["mined_tasks"] >= 6 and not failed & {t["prompt"] for t in mined}  # never the eval items
    assert {
        "id": "feedback-f2",
        "prompt": "Add 11 and 11.",
        "verifier": {"type": "numeric", "answer": "22"},
    }.items() <= next(
        t for t in tasks if t["id"] == "feedback-f2"
    ).items()  # id and prompt are the served row's; the verifier follows from the answer's form
    assert s["served_quarantined"] == 0
    report = json.loads((out / "feedback.json").read_text())
    by_task = {m["task_id"]: m for m in report["mined_for"]}
    word_failures = {
        r["task_id"]
        for r in map(json.loads, (run / "samples.jsonl").read_text().splitlines())
        if not r["passed"] and "How many" in r["prompt"]
    }
    assert word_failures  # the fixture has word problems among its failures
    for t in mined:  # a word problem's nearest training tasks are word problems too
        if by_task[t["id"]]["for"] in word_failures:
            assert "How many" in t["prompt"] or "how many" in t["prompt"], t["prompt"]
    pairs = [json.loads(line) for line in (out / "pairs.jsonl").read_text().splitlines()]
    assert pairs[0]["chosen"] == "42" and pairs[0]["rejected"] == "40" and pairs[0]["meta"]["feedback_id"] == "f1"
    assert pairs[1]["source"] == "arena" and (out / "votes.quarantine.jsonl").is_file()
    assert report["clusters"] and sum(c["size"] for c in report["clusters"]) == 8  # 6 eval + 2 served bad cases


def test_bad_served_rows_are_quarantined_with_file_line_and_reason(tmp_path):
    bad = [
        {"completion": "no prompt"},
        {**SERVED[0], "oops": 1},
        {**SERVED[1], "task": {"verifier": {"type": "code", "tests": "import os"}}},
        {**SERVED[1], "task": {"answer": "22", "id": "mine", "prompt": "other"}},
        "not json",
        [1, 2],
    ]
    path = write_jsonl(tmp_path / "served.jsonl", [SERVED[0], *bad, SERVED[1]])
    rows, tasks, pairs, cases, errors = read_served([path])
    assert rows == 8 and [t.id for t in tasks] == ["feedback-f2"] and len(pairs) == 1  # the good rows still count
    assert [str(e) for e in errors[:2]] == [
        f"{path}:2: a feedback row needs 'prompt' or 'messages'",
        f"{path}:3: unknown key(s) oops",
    ]
    assert "answer: Field required" in errors[2].reason and "verifier: Extra inputs" in errors[2].reason
    assert "id: Extra inputs" in errors[3].reason and "prompt: Extra inputs" in errors[3].reason
    assert [e.location for e in errors] == [f"line {i}" for i in range(2, 8)]


def test_the_next_round_trains_on_feedback_and_its_lineage_shows_the_exports(tmp_path, smol_tokenizer, monkeypatch):
    monkeypatch.setenv("TEMPERING_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "tiny"
    tiny_llama(vocab=len(smol_tokenizer), tie=True).save_pretrained(model)
    smol_tokenizer.save_pretrained(model)
    served = write_jsonl(tmp_path / "served.jsonl", SERVED)
    votes = write_jsonl(tmp_path / "votes.jsonl", VOTES[:1] * 4)
    stages = {
        "feedback": {
            "kind": "feedback",
            "evals": [str(eval_samples(tmp_path))],
            "served": [served],
            "votes": [votes],
            "pool": POOL,
        },
        "dpo": {
            "kind": "dpo",
            "model": str(model),
            "lora": None,
            "data": {"train": ["${feedback.pairs}"], "max_length": 64},
            "train": {
                "steps": 2,
                "batch_size": 2,
                "precision": "fp32",
                "threads": 1,
                "optim": {"lr": 1e-4, "schedule": "constant", "warmup_steps": 0},
            },
        },
    }
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"out": str(tmp_path / "runs"), "stages": stages}, sort_keys=False))
    res = CliRunner().invoke(app, ["run", str(path)])
    assert res.exit_code == 0, res.output
    with Registry(tmp_path / "runs" / "registry.sqlite") as reg:
        dpo = next(r for r in reg.list() if r["kind"] == "dpo")
        rows = reg.lineage(dpo["id"])
    roles = {(r.kind, r.role, Path(r.path).name) for r in rows if r.path}
    assert ("feedback", "feedback", "served.jsonl") in roles and ("feedback", "votes", "votes.jsonl") in roles
    assert ("feedback", "failures", "eval-run") in roles
    assert any(r.kind == "dpo" and r.role == "train" and r.parent_run for r in rows)  # pairs.jsonl <- feedback run
