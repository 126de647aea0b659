"""The demo's before/after accuracy: greedy replies through the one rollout path, numeric verifier."""

from tempering.recipes.demo import heldout_accuracy
from tempering.types import Conversation
from tests.evals.conftest import recall_dir, recall_model  # noqa: F401 (fixtures)


def test_heldout_accuracy_scores_greedy_replies_with_the_numeric_verifier(recall_model, recall_dir):
    _, _, rows = recall_model
    convs = [Conversation(messages=[{"role": "user", "content": r["prompt"]},
                                    {"role": "assistant", "content": r["verifier"]["answer"]}]) for r in rows[:20]]
    accuracy, replies = heldout_accuracy(str(recall_dir), convs, max_new_tokens=3)
    assert accuracy > 0.9 and len(replies) == 20
    assert sum(reply == r["verifier"]["answer"] for reply, r in zip(replies, rows)) / 20 == accuracy
    wrong = [Conversation(messages=[c.messages[0], {"role": "assistant", "content": "99"}]) for c in convs]
    assert heldout_accuracy(str(recall_dir), wrong, max_new_tokens=3)[0] == 0.0
