import pytest

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


def test_the_hash_split_is_disjoint_and_does_not_bias_last_digits():
    from collections import Counter

    from tempering.data.builtin import arithmetic_questions

    train = arithmetic_questions(3000, 0, "train", "+", split_by="hash")
    held = arithmetic_questions(600, 0, "heldout", "+", split_by="hash")
    assert not {q for q, _ in train} & {q for q, _ in held}
    for rows in (train, held):  # every last digit appears in both splits, none dominates
        digits = Counter(a % 10 for _, a in rows)
        assert set(digits) == set(range(10)) and max(digits.values()) < 0.2 * len(rows)
    parity = {a % 2 for _, a in arithmetic_questions(300, 0, "train", "+")}
    assert parity == {0}  # the parity rule's bias, which the hash rule exists to avoid
    assert len(held) / (len(held) + len(train)) > 0.1  # sanity: a real held-out share exists


def test_phrasings_keep_the_operands_and_reworded_wordings_are_never_trained_on():
    from tempering.data.builtin import REWORDED_PHRASINGS, TRAIN_PHRASINGS, arithmetic_questions

    canonical = arithmetic_questions(50, 0, "heldout", "+")
    for phrasing in ("varied", "reworded"):
        other = arithmetic_questions(50, 0, "heldout", "+", phrasing=phrasing)
        assert [a for _, a in other] == [a for _, a in canonical]  # same operands, other wording
        assert len({q.split(" ")[0] for q, _ in other}) > 3  # several wordings in use
    trained = {t for v in TRAIN_PHRASINGS.values() for t in v}
    assert not trained & {t for v in REWORDED_PHRASINGS.values() for t in v}
    with pytest.raises(ValueError, match="phrasing must be one of"):
        arithmetic_questions(1, 0, phrasing="poetic")
