"""Data audit of preference pairs: each finding on a hand-built file."""

from __future__ import annotations

from tempering.data.audit import audit_pairs, prompt_keys


def pair(prompt, chosen, rejected, votes=None, source="verifier"):
    row = {"prompt": prompt, "chosen": chosen, "rejected": rejected, "source": source}
    if votes:
        row["votes"] = [{"annotator": f"a{i}", "prefers": v} for i, v in enumerate(votes)]
    return row


def test_audit_findings_by_hand():
    rows = [
        pair("What is 1+1?", "2", "1 + 1 is 3, I think"),  # chosen shorter
        pair("What is 1+1?", "2", "1 + 1 is 3, I think"),  # duplicate row, repeated prompt
        pair("Say hi", "Hello  there", "hello there"),  # identical after normalising
        pair("Name a colour", "Red, the colour of fire", "blue", votes=["tie", "tie", "chosen"]),
        pair([{"role": "user", "content": "What is 2+2?"}], "4", "five", source="human"),
    ]
    audit = audit_pairs(rows, other_splits={"heldout": prompt_keys([pair("what is  2+2?", "x", "y")])})
    s = audit.summary()
    assert s["rows"] == 5
    # chosen longer: only "Red, the colour of fire" vs "blue"; rejected longer: rows 1, 2 and 5
    assert s["chosen_longer_share"] == 0.2 and s["rejected_longer_share"] == 0.6
    assert s["identical"] == 1 and audit.examples["identical"] == ["row 3"]
    assert s["duplicate_rows"] == 1 and audit.examples["duplicate_rows"] == ["row 2"]
    assert s["repeated_prompts"] == 2
    assert s["tie_votes"] == 2 and s["tie_majority"] == 1
    # a string prompt is one user turn: the held-out string matches row 5's message-list prompt
    assert s["across_splits"] == {"heldout": 1} and audit.examples["across:heldout"] == ["row 5"]
    assert s["sources"] == {"verifier": 4, "human": 1}
    warnings = audit.warnings()
    assert any("chosen == rejected" in w for w in warnings) and any("duplicate" in w for w in warnings)
    assert any("tie" in w for w in warnings)


def test_prompts_shared_across_splits_are_found_after_normalising():
    train = [pair("What is 12+30?", "42", "41"), pair("What is 5+5?", "10", "11")]
    heldout = [pair("what is   12+30?", "42", "43")]
    audit = audit_pairs(train, ["t.jsonl:1", "t.jsonl:2"], {"heldout.jsonl": prompt_keys(heldout)})
    assert audit.across_splits == {"heldout.jsonl": 1}
    assert audit.examples["across:heldout.jsonl"] == ["t.jsonl:1"]
    assert any("share their prompt with heldout.jsonl" in w for w in audit.warnings())


def test_length_bias_warning():
    rows = [pair(f"q{i}", "a much longer chosen reply", "short") for i in range(8)] + [pair("q", "a", "bb")] * 2
    audit = audit_pairs(rows)
    assert audit.chosen_longer_share == 0.8
    assert any(
        w.startswith("length bias: chosen is longer in 80% of pairs and shorter in 20%") for w in audit.warnings()
    )
    assert audit_pairs([]).summary()["chosen_longer_share"] is None
