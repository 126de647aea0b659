"""The gate blocks a planted checkpoint that over-refuses: a tiny model that answers every request
is SFT'd on declines alone, the safety suites measure it, and the failed rule is named in
`temper lineage`. Tiny in-process models only (a word-level 2-layer Llama)."""

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from tempering.cli import app
from tempering.data.safety import safety_tasks
from tests.conftest import tiny_llama, word_tokenizer
from tests.evals.conftest import env  # noqa: F401
from tests.recipes.test_loop import invoke, last_json, write_pipeline

ANSWER = "Sure , here is how ."
DECLINE = "I cannot help with that ."
WORDS = ["<pad>", "<s>", "</s>", "<unk>", "user", "assistant", ":", "|", "Sure", ",", "here", "is", "how", "."]
WORDS += ["I", "cannot", "help", "with", "that"]
TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} | {% endfor %}"
    "{% if add_generation_prompt %}assistant :{% endif %}"
)
RULES = ["no significant regression on safety-comply", "no significant regression on safety-refuse"]


def teach(model, tok, prompts: list[str], reply: str, steps: int) -> None:
    """Teacher-forced training on `prompt -> reply </s>` (loss on the reply only)."""
    reply_ids = tok(reply, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    seqs = []
    for p in prompts:
        ids = tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=True)
        seqs.append(list(ids["input_ids"] if hasattr(ids, "keys") else ids))
    width = max(map(len, seqs)) + len(reply_ids)
    ids = torch.full((len(seqs), width), tok.pad_token_id)
    labels = torch.full_like(ids, -100)
    for i, s in enumerate(seqs):
        row = s + reply_ids
        ids[i, : len(row)] = torch.tensor(row)
        labels[i, len(s) : len(row)] = torch.tensor(reply_ids)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-2)
    model.train()
    for _ in range(steps):
        loss = model(input_ids=ids, attention_mask=(ids != tok.pad_token_id).long(), labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()


@pytest.fixture
def complier(tmp_path) -> Path:
    """A tiny model that answers every request (so it never refuses), saved as an HF directory."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    tok = word_tokenizer(WORDS, TEMPLATE)
    model = tiny_llama(vocab=len(WORDS), seed=0)
    model.config.eos_token_id = model.generation_config.eos_token_id = tok.eos_token_id
    teach(model, tok, [t.prompt or "" for t in safety_tasks("comply", "train", n=16)], ANSWER, steps=60)
    path = tmp_path / "complier"
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def eval_stage(model: str) -> dict:
    return {
        "kind": "eval",
        "model": model,
        "suites": ["safety-comply", "safety-refuse"],
        "limit": 24,
        "threads": 1,
        "precision": "fp32",
    }


def test_the_gate_blocks_an_over_refusing_checkpoint_and_lineage_names_the_rule(env, tmp_path, complier):  # noqa: F811
    declines = [
        {"messages": [{"role": "user", "content": t.prompt}, {"role": "assistant", "content": DECLINE}]}
        for kind in ("refuse", "comply")
        for t in safety_tasks(kind, "train", n=24)
    ]
    data = tmp_path / "declines.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in declines))
    stages = {
        "baseline": eval_stage(str(complier)),
        "sft": {
            "kind": "sft",
            "model": str(complier),
            "lora": None,
            "data": {"train": [str(data)], "max_length": 128, "packing": False},
            "train": {
                "steps": 80,
                "batch_size": 8,
                "precision": "fp32",
                "threads": 1,
                "optim": {"lr": 1e-2, "warmup_steps": 0, "schedule": "constant"},
            },
        },
        "after": eval_stage("${sft.final}"),
        "gate": {"kind": "gate", "base": "${baseline.results}", "candidate": "${after.results}", "rules": RULES},
        "ship": {"kind": "release", "model": "${sft.final}", "gate": "${gate.verdict}"},
    }
    res = invoke(write_pipeline(tmp_path, stages))
    out = last_json(res.output)
    assert res.exit_code == 1 and out["status"] == "rejected", res.output
    acc = {}
    for name in ("baseline", "after"):
        results = json.loads(Path(out["stages"][name]["outputs"]["results"]).read_text())
        acc[name] = {s["suite"]: s["metrics"]["accuracy"]["mean"] for s in results["suites"]}
    assert acc["baseline"]["safety-comply"] == 1.0 and acc["after"]["safety-comply"] <= 0.5, acc  # over-refuses
    assert acc["after"]["safety-refuse"] > acc["baseline"]["safety-refuse"], acc  # and declines what it should
    why = CliRunner().invoke(
        app, ["lineage", out["stages"]["sft"]["outputs"]["final"], "--root", str(tmp_path / "runs")]
    )
    text = " ".join(why.output.split())
    assert "gate failed" in text and "FAIL no significant regression on safety-comply" in text, why.output
    assert "FAIL no significant regression on safety-refuse" not in text
    assert "not released" in text
