"""Failure clustering: signatures and rule tags by hand; three known failure types separated (ARI >= 0.8)."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sklearn.metrics import adjusted_rand_score

from tempering.evals.failures import (
    FailureCase,
    cluster_failures,
    read_failures,
    repetition,
    rule_tag,
    signature,
    synthetic_failures,
)


def test_repetition_by_hand():
    assert repetition("a b c d") == 0.0
    # "a b a b a b": 3-grams aba, bab, aba, bab -> 2 distinct of 4 -> 0.5 repeated
    assert repetition("a b a b a b") == 0.5


@pytest.mark.parametrize(
    "case,tag",
    [
        (FailureCase("t", "q", "The answer is 12.", components={"correct": 1.0, "strict": 0.0}), "format"),
        (FailureCase("t", "q", "Let me think. Let me think. Let me", finish_reason="length"), "generation"),
        (FailureCase("t", "q", "", finish_reason="stop"), "generation"),
        (FailureCase("t", "q", '<tool_call>{"name": "ls"}</tool_call>', verifier="tool_call"), "tool use"),
        (FailureCase("t", "q", "I'm sorry, I can't help with maths.", verifier="numeric"), "understanding"),
        (FailureCase("t", "q", "13", verifier="numeric"), "reasoning"),
        (FailureCase("t", "q", "step one then step two", finish_reason="length", turns=4), "planning"),
    ],
)
def test_rule_tags(case, tag):
    assert rule_tag(signature(case)) == tag


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_three_known_failure_types_are_separated(seed):
    """Clustering the synthetic set recovers its three failure types (ARI >= 0.8),
    with k given and with k chosen by silhouette; clusters get the rule labels."""
    cases, truth = synthetic_failures(60, seed)
    given = cluster_failures(cases, k=3, seed=seed)
    assert adjusted_rand_score(truth, given["assignments"]) >= 0.8
    assert sorted(c["label"] for c in given["clusters"]) == ["format", "generation", "reasoning"]
    auto = cluster_failures(cases, k=None, seed=seed)
    assert adjusted_rand_score(truth, auto["assignments"]) >= 0.8
    # text alone (no signature) does not separate them: the signature carries the result
    text_only = cluster_failures(cases, k=3, seed=seed, use_signature=False)
    assert adjusted_rand_score(truth, text_only["assignments"]) < 0.5


def test_readers_keep_only_judged_failures(tmp_path):
    samples = tmp_path / "ev" / "samples.jsonl"
    samples.parent.mkdir()
    rows = [
        {"task_id": "a", "prompt": "q", "completion": "1", "passed": False, "status": "scored", "reward": 0.0},
        {"task_id": "b", "prompt": "q", "completion": "2", "passed": True, "status": "scored", "reward": 1.0},
        {"task_id": "c", "prompt": "q", "completion": "3", "passed": False, "status": "verifier_error"},
    ]
    samples.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert [c.task_id for c in read_failures(tmp_path / "ev")] == ["a"]
    traj = tmp_path / "grpo" / "trajectories"
    traj.mkdir(parents=True)
    pq.write_table(
        pa.Table.from_pylist(
            [
                {
                    "task_id": "x",
                    "prompt": "q",
                    "completion": "no",
                    "reward": 0.2,
                    "components": '{"correct": 0.0}',
                    "flags": [],
                    "finish_reason": "length",
                },
                {
                    "task_id": "y",
                    "prompt": "q",
                    "completion": "ok",
                    "reward": 1.0,
                    "components": '{"correct": 1.0}',
                    "flags": [],
                    "finish_reason": "stop",
                },
            ]
        ),
        traj / "step-000001.parquet",
    )
    got = read_failures(tmp_path / "grpo")
    assert [(c.task_id, c.finish_reason) for c in got] == [("x", "length")]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task_id": "a"}\nnot json\n')
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        read_failures(bad)


def test_failure_prompts_read_as_text_whatever_their_shape():
    from tempering.evals.failures import case_from_row

    parts = [{"type": "image_url", "image_url": {"url": "images/ab.png"}}, {"type": "text", "text": "How many?"}]
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": parts}]
    rows = [{"task_id": "t", "prompt": p, "completion": "3"} for p in ("How many?", parts, messages)]
    assert [case_from_row(r).prompt for r in rows] == ["How many?", "<image>How many?", "Be brief.\n<image>How many?"]


def test_a_reply_that_says_it_does_not_know_is_an_abstention_not_a_refusal():
    """Failure clustering and the `refusal` verifier take one decision per reply: "I don't know"
    declines nothing (the `abstain` verifier's abstention), so neither calls it a refusal."""
    from tempering.verifiers.safety import detect_abstention, detect_refusal

    sig = signature(FailureCase("t", "q", "I don't know.", verifier="numeric"))
    assert (sig["refusal"], sig["abstention"]) == (0.0, 1.0)
    assert not detect_refusal("I don't know.").hit and detect_abstention("I don't know.").hit
    assert rule_tag(sig) == "understanding"


def test_failure_signatures_decide_refusals_as_the_refusal_verifier_does():
    """Over the labelled set of hard replies, the signature's refusal is the detector's verdict."""
    from pathlib import Path

    from tempering.verifiers.safety import detect_refusal

    rows = Path(__file__).parents[1] / "fixtures" / "safety_replies.jsonl"
    replies = [json.loads(line)["reply"] for line in rows.read_text().splitlines() if line.strip()]
    differ = [r for r in replies if signature(FailureCase("t", "q", r))["refusal"] != detect_refusal(r).hit]
    assert differ == []
