"""A tiny model that has learned a task, so eval tests can see skill, noise and regressions.

The task ("recall"): the prompt `recall a b c` asks for the middle digit b. A 2-layer Llama
over a 40-word vocabulary learns it in a few seconds (it is a fixed-offset copy), which
gives a checkpoint with real accuracy that added weight noise measurably destroys.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from tempering.evals.results import MetricResult, SuiteResult
from tempering.runs.registry import Registry
from tests.conftest import tiny_llama, word_tokenizer

DIGITS = [str(d) for d in range(10)]
WORDS = [
    "<pad>",
    "<s>",
    "</s>",
    "<unk>",
    "user",
    "assistant",
    "system",
    ":",
    "|",
    "recall",
    "Question",
    "Please",
    "answer",
    ".",
    "?",
    *DIGITS,
]
TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} | {% endfor %}"
    "{% if add_generation_prompt %}assistant :{% endif %}"
)


def recall_tasks(n: int, seed: int, *, exclude: set[str] = frozenset()) -> list[dict]:
    """Task rows `recall a b c` -> b (numeric verifier), distinct prompts."""
    rng = random.Random(seed)
    rows, seen = [], set(exclude)
    while len(rows) < n:
        a, b, c = (rng.choice(DIGITS) for _ in range(3))
        prompt = f"recall {a} {b} {c}"
        if prompt in seen:
            continue
        seen.add(prompt)
        rows.append(
            {
                "id": f"recall-{seed}-{len(rows):03d}",
                "prompt": prompt,
                "verifier": {"type": "numeric", "answer": b},
                "track": "reasoning",
            }
        )
    return rows


def train_recall(model, tok, rows: list[dict], steps: int, lr: float = 2e-2, seed: int = 0) -> None:
    """Teacher-forced training on `prompt -> answer </s>` (loss on the answer tokens only)."""
    torch.manual_seed(seed)
    seqs = []
    for r in rows:
        prompt = tok.apply_chat_template(
            [{"role": "user", "content": r["prompt"]}], add_generation_prompt=True, tokenize=True
        )
        prompt = list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)
        seqs.append((prompt, [tok.convert_tokens_to_ids(r["verifier"]["answer"]), tok.eos_token_id]))
    ids = torch.tensor([p + a for p, a in seqs])
    labels = torch.full_like(ids, -100)
    labels[:, -2:] = ids[:, -2:]
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        loss = model(input_ids=ids, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()


def answer_accuracy(model, tok, rows: list[dict]) -> float:
    """Share of rows whose answer token is the model's argmax after the prompt (one forward)."""
    hits = 0
    with torch.no_grad():
        for r in rows:
            prompt = tok.apply_chat_template(
                [{"role": "user", "content": r["prompt"]}], add_generation_prompt=True, tokenize=True
            )
            prompt = list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)
            logits = model(input_ids=torch.tensor([prompt])).logits[0, -1]
            hits += int(logits.argmax()) == tok.convert_tokens_to_ids(r["verifier"]["answer"])
    return hits / len(rows)


def degrade_until(model, tok, rows: list[dict], at_most: float, scales=(0.35, 0.5, 0.7, 1.0)):
    """The least-noised copy (over `scales`) whose greedy answer accuracy is <= `at_most`.

    How much noise a trained tiny model survives depends on the host's kernels (the same
    training lands elsewhere on an AVX512 host than on an AVX2 one), so the test calibrates
    the damage instead of fixing the noise scale. Returns (copy, scale, accuracy)."""
    for scale in scales:
        noisy = degrade(model, scale)
        acc = answer_accuracy(noisy, tok, rows)
        if acc <= at_most:
            return noisy, scale, acc
    raise AssertionError(f"no noise scale in {scales} brought answer accuracy to <= {at_most}")


def degrade(model, scale: float, seed: int = 0):
    """A copy with Gaussian noise of `scale` x each tensor's std added to every weight."""
    import copy

    noisy = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in noisy.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * p.std() * scale)
    return noisy


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def sft_row(prompt: str, answer: str, **extra) -> dict:
    return {**extra, "messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]}


def record_run(out: Path, name: str, train: list[str], base: str, evals: list[str] = ()) -> Path:
    """A finished SFT run as run_sft records it (paths as given, relative to the cwd at training)."""
    from tempering.runs.registry import describe_input

    registry = Registry(out / "registry.sqlite")
    config = {"data": {"train": list(train), "eval": list(evals), "replay": None}, "out": str(out), "name": name}
    inputs = [describe_input(p, "train") for p in train] + [describe_input(p, "eval") for p in evals]
    run_id = registry.start(name, "sft", config, inputs, base)
    final = out / name / "final"
    final.mkdir(parents=True)
    (final / "config.json").write_text("{}")
    registry.record_output(run_id, "final", final)
    registry.record_output(run_id, "run_dir", final.parent)
    registry.finish(run_id, {"final": str(final)}, {})
    registry.close()
    return final


def write_suite(directory: Path, name: str, tasks_file: Path, **fields) -> Path:
    import yaml

    spec = {
        "name": name,
        "track": "reasoning",
        "tasks": {"source": str(tasks_file)},
        "templates": ["{prompt}", "Question : {prompt}"],
        "sampling": {"temperature": 1.0, "max_new_tokens": 3, "n": 4},
        "metrics": ["accuracy", "pass@2"],
        **fields,
    }
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture(scope="session")
def recall_model():
    """(trained model, tokenizer, 60 eval task rows): ~100% sampled accuracy at T=1 (a few seconds)."""
    torch.set_num_threads(1)
    tok = word_tokenizer(WORDS, TEMPLATE)
    eval_rows = recall_tasks(60, seed=1)
    train_rows = recall_tasks(100, seed=2, exclude={r["prompt"] for r in eval_rows})
    model = tiny_llama(vocab=len(WORDS), seed=0)
    model.config.eos_token_id = tok.eos_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    train_recall(model, tok, train_rows, steps=150)
    return model, tok, eval_rows


@pytest.fixture(scope="session")
def recall_dir(recall_model, tmp_path_factory) -> Path:
    """The trained model and its tokenizer saved as an HF directory."""
    model, tok, _ = recall_model
    path = tmp_path_factory.mktemp("recall-model")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A tmp dir as the eval cache, with no user suites: each test sees only its own suites."""
    monkeypatch.setenv("TEMPERING_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("TEMPERING_SUITES", str(tmp_path / "no-user-suites"))
    return tmp_path


@pytest.fixture
def suite_file(recall_model, env):
    """The recall model's 60 eval tasks as a suite file."""
    _, _, rows = recall_model
    return write_suite(env, "recall", write_jsonl(env / "recall.jsonl", rows))


def passkey_suite(model: str, scores: dict[str, list[float]], suite_hash: str) -> SuiteResult:
    """A `longctx-passkey` result holding these per-task accuracy samples (ids from `data.longctx.task_id`)."""
    return SuiteResult(
        suite="longctx-passkey",
        suite_hash=suite_hash,
        track="longctx",
        model_id=model,
        metrics={"accuracy": MetricResult.from_scores("accuracy", list(scores.values()))},
        primary_metric="accuracy",
        task_scores=scores,
    )
