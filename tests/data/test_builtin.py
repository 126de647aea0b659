from tempering.data.builtin import arithmetic_conversations, arithmetic_tasks
from tempering.verifiers import score


def test_arithmetic_splits_are_disjoint_seeded_and_verifiable():
    train = arithmetic_tasks(300, seed=0, split="train")
    held = arithmetic_tasks(100, seed=0, split="heldout")
    assert not {t.prompt for t in train} & {t.prompt for t in held}
    assert [t.prompt for t in arithmetic_tasks(300, 0)] == [t.prompt for t in train]
    for t, conv in zip(held, arithmetic_conversations(100, 0, "heldout")):
        assert conv["messages"][0]["content"] == t.prompt
        assert score(t, conv["messages"][1]["content"]).value == 1.0
        assert score(t, "0 and 1").value == 0.0 or t.verifier["answer"] == "1"
