"""The shipped safety and honesty data: splits disjoint by template and by item, look-alikes
paired with their requests, every row labelled, and bad safety rows quarantined by `temper data mix`."""

import json
from pathlib import Path

import pytest

from tempering.data.safety import (
    KINDS,
    QUESTION_TEMPLATES,
    REQUEST_TEMPLATES,
    row_problem,
    safety_pairs,
    safety_sft_rows,
    safety_tasks,
)
from tempering.data.safety_items import PAIRS
from tempering.evals.suite import load_suite


def template_of(prompt: str, item: str, templates: list[str]) -> str:
    return next(t for t in templates if t.replace("{x}", item) == prompt)


@pytest.mark.parametrize("kind", KINDS)
def test_splits_are_disjoint_by_template_and_by_item(kind):
    train, held = safety_tasks(kind, "train"), safety_tasks(kind, "heldout")
    assert train and held
    templates = REQUEST_TEMPLATES if kind in ("refuse", "comply") else QUESTION_TEMPLATES
    assert not set(templates["train"]) & set(templates["heldout"])
    items = {"train": set(), "heldout": set()}
    for split, tasks in (("train", train), ("heldout", held)):
        for t in tasks:
            item = t.id.split("-")[2]  # the item's digest
            items[split].add(item)
    assert not items["train"] & items["heldout"]


def test_every_request_has_a_lookalike_in_the_same_split_and_category():
    refuse, comply = safety_tasks("refuse", "heldout"), safety_tasks("comply", "heldout")
    assert [t.id.split("-")[2:] for t in refuse] == [t.id.split("-")[2:] for t in comply]
    assert [t.verifier["category"] for t in refuse] == [t.verifier["category"] for t in comply]
    assert sum(len(p) for p in PAIRS.values()) >= 40 and len(PAIRS) >= 7


def test_no_harmful_answer_is_written_anywhere():
    """The rows for requests to decline hold a decline; the pairs' other side is a bare assent."""
    for row in safety_sft_rows("train"):
        if row["label"] == "refuse":
            assert "can't" in row["messages"][1]["content"] or "won't" in row["messages"][1]["content"]
    for pair in safety_pairs("train"):
        if pair["meta"]["label"] == "refuse":
            assert pair["rejected"] == "Sure, I can help with that."


def test_the_naive_set_leaves_out_the_lookalikes():
    labels = {r["label"] for r in safety_sft_rows("train", lookalikes=False)}
    assert labels == {"refuse", "abstain"}
    assert {r["label"] for r in safety_sft_rows("train")} == {"refuse", "comply", "abstain", "answer"}
    assert all(row_problem(r) is None for r in safety_sft_rows("train"))


@pytest.mark.parametrize("suite", ["safety-refuse", "safety-comply", "honesty-unknown", "honesty-known"])
def test_the_suites_hold_the_heldout_split(suite):
    s = load_suite(suite)
    assert len(s.task_list) >= 30 and all("-heldout-" in t.id for t in s.task_list)


@pytest.mark.parametrize(
    "row, reason",
    [
        ({"label": "refuse"}, "needs a 'category'"),
        ({"category": "weapons"}, "needs a 'label'"),
        ({"label": "maybe", "category": "weapons"}, "unknown safety label 'maybe'"),
        ({"label": "refuse", "category": "person"}, "unknown category 'person' for label 'refuse'"),
    ],
)
def test_row_problems_are_named(row, reason):
    assert reason in (row_problem(row) or "")


def test_data_mix_quarantines_bad_safety_rows_with_file_and_line(tmp_path):
    from tempering.config import MixConfig
    from tempering.recipes.mix import run_mix

    good = safety_sft_rows("train")[:20]
    bad = [{"messages": good[0]["messages"]}, {**good[1], "label": "nope"}]
    data = tmp_path / "safety.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in good + bad))
    general = tmp_path / "general.jsonl"
    general.write_text("".join(json.dumps({"messages": r["messages"]}) + "\n" for r in good))
    cfg = MixConfig.model_validate(
        {
            "sources": [{"name": "safety", "data": [str(data)], "track": "safety"}],
            "replay": {"data": [str(general)], "ratio": 0.2},
            "size": 20,
            "out": str(tmp_path / "runs"),
            "name": "mix",
        }
    )
    summary = run_mix(cfg)
    assert summary["quarantined"] == 2
    lines = [json.loads(x) for x in (tmp_path / "runs" / "mix" / "quarantine.jsonl").read_text().splitlines()]
    assert [(q["location"], q["reason"].split(" (")[0]) for q in lines] == [
        ("line 21", "safety row needs a 'label'"),
        ("line 22", "unknown safety label 'nope'"),
    ]


def test_the_shipped_example_files_are_the_builders_output():
    root = Path(__file__).resolve().parents[2] / "examples" / "data"
    for name, rows in (("safety_sft.jsonl", safety_sft_rows("train")), ("safety_pairs.jsonl", safety_pairs("train"))):
        assert [json.loads(x) for x in (root / name).read_text().splitlines()] == rows, name


def test_the_unpaired_lookalikes_train_only_and_share_no_phrase_with_heldout_items():
    from tempering.data.safety_items import LOOKALIKES

    def trigrams(text: str) -> set[str]:
        words = text.lower().split()
        return {" ".join(words[i : i + 3]) for i in range(len(words) - 2)}

    extras = [x for rows in LOOKALIKES.values() for x, _ in rows]
    held = [t.prompt or "" for kind in ("refuse", "comply") for t in safety_tasks(kind, "heldout")]
    assert not [x for x in extras if any(x in p for p in held)]
    held_grams = set().union(*(trigrams(p) for p in held))
    assert not {x: trigrams(x) & held_grams for x in extras if trigrams(x) & held_grams}
    rows = safety_sft_rows("train")
    comply, refuse = (sum(r["label"] == label for r in rows) for label in ("comply", "refuse"))
    assert comply >= 3 * refuse and set(LOOKALIKES) == set(PAIRS)
