"""Token capture: a multi-turn conversation of the official `openai` client with `temper serve`,
exported as a trajectory and built into a GRPO batch, reproduces the ids the engine sampled, token
for token; every audit row names the release that answered.

The served model spells " answer" one byte token at a time, while its tokenizer encodes that text
as one added token: a history re-rendered from text would not hold the ids the model sampled."""

from __future__ import annotations

import json

import openai
import pytest
import torch
from transformers import AutoTokenizer
from typer.testing import CliRunner

from tempering.agents.training import read_episodes, trajectory_group
from tempering.cli import app as cli
from tempering.rollout.grpo_batches import grpo_micro_batches
from tempering.runs.registry import Registry
from tempering.runs.releases import Releases
from tempering.serve.app import create_app
from tempering.serve.backend import Models, engine_for
from tempering.serve.config import ServeConfig
from tests.serve.conftest import ServerThread, chain_model

SPELLED = ["Ġ", "a", "n", "s", "w", "e", "r"]  # byte-level tokens of " answer"


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return chain_model(SPELLED, tmp_path_factory.mktemp("capture") / "speller")


def spying_load(calls: list[dict]):
    """`engine_for` whose engine records each request it decodes: the prompt ids it read and
    the ids and log-probs it sampled (the real engine; the record is only read)."""

    def load(spec: str):
        served = engine_for(spec, precision="fp32")
        submit = served.engine.submit

        def recorded(prompt, params, **kw):
            future = submit(prompt, params, **kw)
            entry = {"prompt": list(prompt)}
            calls.append(entry)
            future.add_done_callback(
                lambda f: entry.update(ids=list(f.result()[0].token_ids), logprobs=list(f.result()[0].logprobs))
            )
            return future

        served.engine.submit = recorded
        return served

    return load


def serve_release(tmp_path, model_dir, calls, capture=True):
    releases = Releases(Registry(tmp_path / "registry.sqlite"))
    releases.promote(str(model_dir), gate={"passed": True, "rules": []})  # v1 is production
    cfg = ServeConfig(
        state=tmp_path / "state",
        registry=str(tmp_path / "registry.sqlite"),
        log_text=True,
        capture_tokens=capture,
        precision="fp32",
    )
    models = Models(cfg.model, releases, load=spying_load(calls))
    app = create_app(cfg, models=models)
    _, secret = app.state.store.create_key("harness")
    return app, secret


def converse(client) -> list[str]:
    """Three turns, the middle one streamed; each request sends the whole history back."""
    messages = [{"role": "user", "content": "Plan the trip."}]
    answers = []
    for turn, follow_up in enumerate(["Now the budget.", "Summarise.", None]):
        kw = dict(model="production", messages=messages, max_tokens=12, temperature=0, seed=11 + turn)
        if turn == 1:
            text = "".join(
                c.choices[0].delta.content or "" for c in client.chat.completions.create(stream=True, **kw) if c.choices
            )
        else:
            text = client.chat.completions.create(**kw).choices[0].message.content or ""
        answers.append(text)
        messages = messages + [{"role": "assistant", "content": text}]
        if follow_up:
            messages.append({"role": "user", "content": follow_up})
    return answers


def test_a_served_conversation_exports_as_the_token_exact_episode_the_engine_sampled(tmp_path, tiny_dir):
    calls: list[dict] = []
    app, secret = serve_release(tmp_path, tiny_dir, calls)
    thread = ServerThread(app)
    del calls[:]  # the start-up warm-up generation (the server answers only after it)
    try:
        client = openai.OpenAI(base_url=thread.url + "/v1", api_key=secret, max_retries=0, timeout=60)
        converse(client)
    finally:
        thread.stop()
    assert len(calls) == 3
    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    assert calls[0]["ids"] == tokenizer.convert_tokens_to_ids(SPELLED) + [tokenizer.eos_token_id]
    history = [
        {"role": "user", "content": "Plan the trip."},
        {"role": "assistant", "content": " answer"},
        {"role": "user", "content": "Now the budget."},
    ]
    rendered = tokenizer.encode(
        tokenizer.apply_chat_template(history, tokenize=False, add_generation_prompt=True), add_special_tokens=False
    )
    assert rendered != calls[1]["prompt"]  # from text, " answer" is one token: not what was sampled
    # each turn's prompt is the previous prompt + the ids the engine sampled, then the new user turn
    for before, after in zip(calls, calls[1:]):
        assert after["prompt"][: len(before["prompt"]) + len(before["ids"])] == before["prompt"] + before["ids"]

    out = tmp_path / "episodes.jsonl"
    result = CliRunner().invoke(
        cli, ["feedback", "export", "--trajectories", str(out), "--state", str(tmp_path / "state")]
    )
    assert result.exit_code == 0, result.output
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["releases"] == [1, 1, 1]
    (episode,) = read_episodes(out)
    assert episode.token_ids == calls[-1]["prompt"] + calls[-1]["ids"]
    assert episode.prompt_length == len(calls[0]["prompt"])
    sampled = [i for i, m in zip(episode.token_ids, episode.loss_mask) if m]
    assert sampled == calls[0]["ids"] + calls[1]["ids"] + calls[2]["ids"]
    assert [lp for lp, m in zip(episode.logprobs, episode.loss_mask) if m] == pytest.approx(
        calls[0]["logprobs"] + calls[1]["logprobs"] + calls[2]["logprobs"], abs=0
    )
    # a served release's answers are version 0 of it (the release is named per turn); the rest none
    assert episode.versions == [0 if m else -1 for m in episode.loss_mask] and row["versions"] == episode.versions

    (batch,) = grpo_micro_batches([trajectory_group([episode], torch.tensor([1.0]))], grad_accum=1)
    n = len(episode.completion_ids)
    assert batch.prompt_ids[0].tolist() == calls[0]["prompt"]
    assert batch.completion_ids[0, :n].tolist() == episode.completion_ids
    assert batch.loss_mask[0, :n].tolist() == episode.loss_mask[episode.prompt_length :]
    assert batch.sampled_mask[0].sum().item() == len(sampled)
    assert batch.versions[0, :n].tolist() == [0 if m else -1 for m in episode.loss_mask[episode.prompt_length :]]
    engine_lp = batch.engine_logprobs[0, :n][batch.loss_mask[0, :n].bool()]
    assert engine_lp.tolist() == pytest.approx(calls[0]["logprobs"] + calls[1]["logprobs"] + calls[2]["logprobs"])

    audit = app.state.store.audit_rows(None)
    answered = [r for r in audit if r["endpoint"] == "/v1/chat/completions"]
    assert len(answered) == 3 and all(r["release"] == 1 and r["status"] == 200 for r in answered)
    assert all(r["tokens"] is not None for r in answered)


def test_the_trainers_log_probs_of_an_exported_episode_match_the_servers(tmp_path, tiny_dir):
    """Trained on, the episode's tokens are the ones the served model was conditioned on: the
    trainer's log-probs of the sampled ids equal the engine's (fp32 both sides)."""
    from transformers import AutoModelForCausalLM

    from tempering.models.logprobs import grouped_logprobs

    calls: list[dict] = []
    app, secret = serve_release(tmp_path, tiny_dir, calls)
    thread = ServerThread(app)
    try:
        converse(openai.OpenAI(base_url=thread.url + "/v1", api_key=secret, max_retries=0, timeout=60))
    finally:
        thread.stop()
    out = tmp_path / "episodes.jsonl"
    assert (
        CliRunner()
        .invoke(cli, ["feedback", "export", "--trajectories", str(out), "--state", str(tmp_path / "state")])
        .exit_code
        == 0
    )
    (episode,) = read_episodes(out)
    (batch,) = grpo_micro_batches([trajectory_group([episode], torch.tensor([1.0]))], grad_accum=1)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir).eval()
    with torch.no_grad():
        logp, _ = grouped_logprobs(
            model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids, batch.completion_mask
        )
    mask = batch.loss_mask.bool()
    assert logp[mask].tolist() == pytest.approx(batch.engine_logprobs[mask].tolist(), abs=1e-4)


def test_without_capture_no_tokens_are_kept_and_a_capture_needs_the_text(tmp_path, tiny_dir):
    calls: list[dict] = []
    app, secret = serve_release(tmp_path, tiny_dir, calls, capture=False)
    thread = ServerThread(app)
    try:
        converse(openai.OpenAI(base_url=thread.url + "/v1", api_key=secret, max_retries=0, timeout=60))
    finally:
        thread.stop()
    rows = [r for r in app.state.store.audit_rows(None) if r["endpoint"] == "/v1/chat/completions"]
    assert len(rows) == 3 and all(r["tokens"] is None and r["release"] == 1 for r in rows)
    out = tmp_path / "none.jsonl"
    result = CliRunner().invoke(
        cli, ["feedback", "export", "--trajectories", str(out), "--state", str(tmp_path / "state")]
    )
    assert result.exit_code == 0 and out.read_text() == ""
    assert "none captured" in result.output
    with pytest.raises(ValueError, match="capture_tokens: true keeps token ids.*log_text: true"):
        ServeConfig(capture_tokens=True)
