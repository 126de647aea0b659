"""`temper rm` end to end on a tiny model: it learns a rule, reports accuracy with a CI next to the
agreement ceiling, quarantines bad rows, and its output serves the `reward_model` verifier and
best-of-n ranking."""

import json
import random

import pytest
import yaml
from typer.testing import CliRunner

from tempering.cli import app
from tempering.recipes.rm import ScoredPair, agreement_ceiling, split_by_prompt
from tests.conftest import tiny_llama


@pytest.fixture()
def tiny_dir(tmp_path, smol_tokenizer):
    path = tmp_path / "tiny"
    tiny_llama(vocab=len(smol_tokenizer), tie=True).save_pretrained(path)
    smol_tokenizer.save_pretrained(path)
    return str(path)


GOOD, BAD = "The answer is {}.", "I refuse to answer this question, sorry."


def rule_pairs(n, seed, votes=False):
    """Chosen: answers the question; rejected: refuses. Half the rows as message lists."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        q = f"What is {a}+{b}?"
        row = {"prompt": q, "chosen": GOOD.format(a + b), "rejected": BAD, "source": "verifier"}
        if i % 2:
            row["prompt"] = [{"role": "user", "content": q}]
            row["chosen"] = [{"role": "assistant", "content": GOOD.format(a + b)}]
        if votes:
            row["votes"] = [
                {"annotator": "a1", "prefers": "chosen"},
                {"annotator": "a2", "prefers": "chosen"},
                {"annotator": "a3", "prefers": "rejected" if i % 4 == 0 else "chosen"},
            ]
        rows.append(row)
    return rows


def write_jsonl(path, rows, extra=()):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "".join(x + "\n" for x in extra))
    return str(path)


def rm_config(tmp_path, model):
    train = write_jsonl(
        tmp_path / "train.jsonl", rule_pairs(48, 0), extra=['{"prompt": "q", "chosen": "a"}', "{broken"]
    )
    held = write_jsonl(tmp_path / "eval.jsonl", rule_pairs(16, 1, votes=True))
    cfg = {
        "model": model,
        "lora": None,
        "data": {"train": train, "eval": held, "max_length": 128},
        "train": {
            "steps": 16,
            "batch_size": 8,
            "precision": "fp32",
            "optim": {"lr": 3e-3, "warmup_steps": 2},
            "checkpoint": {"every": 8},
        },
        "out": str(tmp_path / "runs"),
    }
    path = tmp_path / "rm.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_rm_cli_learns_reports_ceiling_and_serves_the_verifier(tmp_path, tiny_dir):
    result = CliRunner().invoke(app, ["rm", str(rm_config(tmp_path, tiny_dir)), "--name", "e2e"])
    assert result.exit_code == 0, result.output + repr(result.exception)
    s = json.loads(result.stdout.strip().splitlines()[-1])
    assert s["data"]["quarantined"] == 2 and s["data"]["train_pairs"] == 48 and s["data"]["eval_pairs"] == 16
    acc = s["heldout"]["accuracy"]
    assert acc["mean"] >= 0.9 and acc["low"] <= acc["mean"] <= acc["high"] and acc["n"] == 16
    assert s["heldout"]["mean_margin"] > s["heldout_before"]["mean_margin"]
    # 3 votes per pair; every 4th pair has one dissent: ceiling = (12 * 1 + 4 * 2/3) / 16
    assert s["heldout"]["ceiling"]["mean"] == pytest.approx((12 + 4 * 2 / 3) / 16)
    assert "agreement ceiling" in result.output
    q = (tmp_path / "runs" / "e2e" / "quarantine.jsonl").read_text().splitlines()
    assert len(q) == 2

    # the trained model as a verifier: the task's conversation is added to the spec by `score`
    from tempering.types import Task
    from tempering.verifiers import VerifierContext, score

    final = s["final"]
    task = Task(id="t", prompt="What is 12+30?", verifier={"type": "reward_model", "model": final})
    with VerifierContext() as ctx:
        good = score(task, GOOD.format(42), ctx)
        bad = score(task, BAD, ctx)
        again = score(task, GOOD.format(42), ctx)
    assert good.value > bad.value
    assert again.value == pytest.approx(good.value)
    assert good.components["score"] == pytest.approx(good.value)


class ScriptedEngine:
    """An `Engine` that answers every prompt with the given texts, in order."""

    def __init__(self, tokenizer, texts):
        self.tokenizer, self.texts = tokenizer, texts

    def chat_prompt(self, messages):
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def generate(self, prompts, params):
        from tempering.rollout.engine import Completion

        return [
            [Completion(i, [1], [0.0], self.texts[j % len(self.texts)], "stop") for j in range(params.n)]
            for i in range(len(prompts))
        ]


class LengthScorer:
    """Ranks answers by length: enough to check that best-of-n picks by score."""

    def score(self, conversations):
        return [float(len(c[-1]["content"])) for c in conversations]


def test_best_of_n_picks_the_top_score_and_measures_it(smol_tokenizer):
    from tempering.config import SamplingSettings
    from tempering.data.builtin import arithmetic_tasks
    from tempering.recipes.best_of_n import best_of_n, summarize

    tasks = arithmetic_tasks(4, 0, ops="+")
    answers = [str(int(t.verifier["answer"])) for t in tasks]
    # per task: a short wrong answer, and a long right one ("answer is N") that the scorer prefers
    engine = ScriptedEngine(smol_tokenizer, ["7", "the answer is " + answers[0]])
    records = best_of_n(tasks[:1], engine, LengthScorer(), SamplingSettings(max_new_tokens=8), n=4)
    assert records[0]["pick"] == 1 and records[0]["pick_passed"]
    assert records[0]["passed"] == [False, True, False, True]
    summary = summarize(records * 10, n=4)
    assert summary["rm_pick"] == 1.0 and summary["random_pick"] == 0.5 and summary["oracle"] == 1.0


def test_split_keeps_each_prompt_on_one_side_and_ceiling_counts_ties_half():
    pairs = [ScoredPair([0], [1], [2], prompt_key=f"p{i // 3}") for i in range(30)]
    train, held = split_by_prompt(pairs, 0.2, seed=0)
    assert len(held) == 6 and len(train) == 24
    assert not {p.prompt_key for p in train} & {p.prompt_key for p in held}
    assert split_by_prompt(pairs, 0.2, seed=0)[1] == held  # seeded
    voted = [
        ScoredPair([0], [1], [2], votes=["chosen", "tie"]),
        ScoredPair([0], [1], [2], votes=["rejected"]),
        ScoredPair([0], [1], [2]),
    ]
    assert agreement_ceiling(voted) == [0.75, 0.0]


def test_default_template_pairs_end_at_the_answer_eos_which_is_also_pad(tmp_path, smol_tokenizer):
    """SmolLM2 pads with its end-of-turn token: the case the last-real-token pooling exists for."""
    from tempering.config import RMDataSettings, RMSettings
    from tempering.recipes.rm import _scored_pairs, pair_batch

    assert smol_tokenizer.pad_token_id == smol_tokenizer.eos_token_id
    path = write_jsonl(tmp_path / "p.jsonl", rule_pairs(2, 0))
    pairs, _ = _scored_pairs([path], smol_tokenizer, RMDataSettings(train=[path]), RMSettings(), "tempering")
    eos = smol_tokenizer.eos_token_id
    for p in pairs:
        assert p.chosen[-1] == eos and p.rejected[-1] == eos  # glue after <|im_end|> is cut
    batch = pair_batch(pairs, smol_tokenizer.pad_token_id)
    assert batch["completion_ids"].shape[0] == 4 and int(batch["completion_mask"][0].sum()) == len(pairs[0].chosen)
