"""`temper tinker serve` driven by the official `tinker` SDK on a tiny random model: training
(forward_backward + optim_step), sampling from saved weights, save/load state, the RL losses
(stable_reinforce on recorded samples), keys, the SDK's own errors for what the server refuses,
and tinker-cookbook's supervised loop and math_rl recipe run unmodified."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from tests.serve.conftest import ServerThread, tiny_tokenizer

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402

TEXT = "the quick brown fox jumps"


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    """A 2-layer random Llama over the byte-level test tokenizer, saved as an HF dir."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    out = tmp_path_factory.mktemp("tinker_base")
    LlamaForCausalLM(cfg).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def service(tiny_base, tmp_path_factory):
    """(ServiceClient of the official SDK, app) against a Tinker server on a free loopback port."""
    from tempering.serve.config import TinkerServeConfig
    from tempering.serve.tinker import create_tinker_app

    state = tmp_path_factory.mktemp("tinker_state")
    app = create_tinker_app(TinkerServeConfig(state=state, model=str(tiny_base), max_tokens=64, precision="fp32"))
    _, secret = app.state.store.create_key("sdk")
    thread = ServerThread(app)
    client = tinker.ServiceClient(base_url=thread.url, api_key=secret)
    yield client, app
    thread.stop()


@pytest.fixture(scope="module")
def trainer(service, tiny_base):
    client, _ = service
    return client.create_lora_training_client(base_model=str(tiny_base), rank=8, seed=0).result()


def text_datum(tokens: list[int]) -> types.Datum:
    """Next-token prediction on every token of `tokens` (weights 1)."""
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * (len(tokens) - 1)},
    )


def test_training_lowers_the_loss_and_the_sampler_holds_the_trained_weights(service, trainer, tiny_base):
    tokens = tiny_tokenizer().encode(TEXT)
    datum = text_datum(tokens)
    adam = types.AdamParams(learning_rate=1e-2)
    losses = []
    for _ in range(30):
        fwd = trainer.forward_backward([datum], "cross_entropy")
        trainer.optim_step(adam).result()
        out = fwd.result()
        logprobs = out.loss_fn_outputs[0]["logprobs"].to_torch()
        # the loss is the weighted sum of the returned target log-probs (Tinker's convention)
        assert out.metrics["loss:sum"] == pytest.approx(-float(logprobs.sum()), rel=1e-5)
        losses.append(out.metrics["loss:sum"])
    assert losses[-1] < 0.1 * losses[0]

    saved = trainer.save_weights_for_sampler("memorised").result()
    assert saved.path.startswith("tinker://") and saved.path.endswith("/sampler_weights/memorised")
    sampler = trainer.create_sampling_client(saved.path).result()
    prompt = types.ModelInput.from_ints(tokens[:4])
    params = types.SamplingParams(max_tokens=len(tokens) - 4, temperature=0.0, stop=[])
    result = sampler.sample(prompt, num_samples=2, sampling_params=params).result()
    assert len(result.sequences) == 2
    for seq in result.sequences:
        assert seq.tokens[:3] == tokens[4:7]  # greedy decoding continues the memorised text
        assert len(seq.logprobs) == len(seq.tokens) and all(lp <= 0 for lp in seq.logprobs)
    # the sampler's log-probs are the trained model's: score the sample with the training client
    seq = result.sequences[0]
    scored = trainer.forward([text_datum(tokens[:4] + seq.tokens)], "cross_entropy").result()
    trained = scored.loss_fn_outputs[0]["logprobs"].to_torch()[3:]
    assert torch.allclose(trained, torch.tensor(seq.logprobs), atol=1e-4)

    # the base model, sampled through the same client API, has not learnt the text
    base = service[0].create_sampling_client(base_model=str(tiny_base)).result()
    base_out = base.sample(prompt, num_samples=1, sampling_params=params).result()
    assert base_out.sequences[0].tokens != tokens[4:]


def test_save_and_load_state_restore_the_weights(service, trainer):
    tokens = tiny_tokenizer().encode("pack my box with five dozen liquor jugs")
    datum = text_datum(tokens)
    before = trainer.forward([datum], "cross_entropy").result().metrics["loss:sum"]
    state = trainer.save_state("checkpoint").result()
    assert state.path.endswith("/weights/checkpoint")
    for _ in range(3):
        trainer.forward_backward([datum], "cross_entropy")
        trainer.optim_step(types.AdamParams(learning_rate=5e-2)).result()
    moved = trainer.forward([datum], "cross_entropy").result().metrics["loss:sum"]
    assert moved != pytest.approx(before, rel=1e-4)
    trainer.load_state_with_optimizer(state.path).result()
    assert trainer.forward([datum], "cross_entropy").result().metrics["loss:sum"] == pytest.approx(before, rel=1e-5)
    # a new training client made from the state starts from the same weights
    resumed = service[0].create_training_client_from_state_with_optimizer(state.path).result()
    assert resumed.model_id != trainer.model_id
    assert resumed.forward([datum], "cross_entropy").result().metrics["loss:sum"] == pytest.approx(before, rel=1e-5)


def test_rl_losses_are_the_ratio_weighted_advantages(trainer):
    """At the sampler's own log-probs the ratio is 1, so both losses are -sum(advantages)."""
    tokens = tiny_tokenizer().encode("abcdefgh")
    datum = text_datum(tokens)
    logprobs = trainer.forward([datum], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_torch()
    n = len(tokens) - 1
    advantages = [0.0] * (n - 3) + [1.0, 2.0, -0.5]
    rl = types.Datum(
        model_input=datum.model_input,
        loss_fn_inputs={"target_tokens": tokens[1:], "logprobs": logprobs.tolist(), "advantages": advantages},
    )
    for loss_fn in ("importance_sampling", "ppo"):
        out = trainer.forward([rl], loss_fn).result()
        assert out.metrics["loss:sum"] == pytest.approx(-2.5, abs=1e-4)
    # sampler log-probs 0.5 nats below the current ones: ratio e^0.5 = 1.65, clipped to 1.2 by ppo
    shifted = types.Datum(
        model_input=datum.model_input,
        loss_fn_inputs={
            "target_tokens": tokens[1:],
            "logprobs": (logprobs - 0.5).tolist(),
            "advantages": [0.0] * (n - 1) + [1.0],
        },
    )
    assert trainer.forward([shifted], "importance_sampling").result().metrics["loss:sum"] == pytest.approx(
        -math.exp(0.5), rel=1e-4
    )
    assert trainer.forward([shifted], "ppo").result().metrics["loss:sum"] == pytest.approx(-1.2, rel=1e-4)


def test_cispo_and_dro_are_tinkers_formulas_and_dro_needs_its_beta(trainer):
    """At the sampler's own log-probs the ratio is 1: cispo is -sum(A * logp), dro -sum(logp * A)
    (its quadratic term is 0); sampler log-probs 0.5 nats lower put cispo's ratio e^0.5 at 1.2."""
    tokens = tiny_tokenizer().encode("abcdefgh")
    datum = text_datum(tokens)
    logprobs = trainer.forward([datum], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_torch()
    n = len(tokens) - 1
    advantages = torch.tensor([0.0] * (n - 3) + [1.0, 2.0, -0.5])
    reinforce = -float((advantages * logprobs).sum())

    def rl(sampler_logprobs: torch.Tensor) -> types.Datum:
        inputs = {"target_tokens": tokens[1:], "logprobs": sampler_logprobs.tolist(), "advantages": advantages.tolist()}
        return types.Datum(model_input=datum.model_input, loss_fn_inputs=inputs)

    assert trainer.forward([rl(logprobs)], "cispo").result().metrics["loss:sum"] == pytest.approx(reinforce, rel=1e-4)
    dro = trainer.forward([rl(logprobs)], "dro", {"beta": 0.5}).result().metrics["loss:sum"]
    assert dro == pytest.approx(reinforce, rel=1e-4)
    clipped = trainer.forward([rl(logprobs - 0.5)], "cispo").result().metrics["loss:sum"]
    assert clipped == pytest.approx(1.2 * reinforce, rel=1e-4)
    # dro pulls towards the sampler: + beta/2 * 0.5^2 per position
    dro_far = trainer.forward([rl(logprobs - 0.5)], "dro", {"beta": 0.5}).result().metrics["loss:sum"]
    assert dro_far == pytest.approx(reinforce + 0.25 * 0.25 * n, rel=1e-4)
    with pytest.raises(tinker.RequestFailedError, match="dro needs loss_fn_config.beta .it has no default."):
        trainer.forward([rl(logprobs)], "dro").result()
    with pytest.raises(tinker.RequestFailedError, match="loss_fn_config key 'beta' is not used by cispo"):
        trainer.forward([rl(logprobs)], "cispo", {"beta": 0.5}).result()


def sampled_datum(prompt: list[int], seq, advantage: float, logprobs: float = 0.0) -> types.Datum:
    """The cookbook's datum of one sample (prompt + sample, shifted by one) with its provenance:
    inputs are the prompt and all but the last sampled token, targets the prompt's second token on."""
    tokens = prompt + list(seq.tokens)
    n_prompt, n_sampled = len(prompt), len(seq.tokens)
    inputs: dict[str, Any] = {
        "target_tokens": tokens[1:],
        "logprobs": [logprobs] * (len(tokens) - 1),
        "advantages": [0.0] * (n_prompt - 1) + [advantage] * n_sampled,
    }
    datum = types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]), loss_fn_inputs=inputs)
    sid = seq.sequence_id
    return datum.with_provenance(
        model_input=[
            types.PromptProvenanceSpan(sequence_id=sid, length=n_prompt),
            types.SampledProvenanceSpan(sequence_id=sid, length=n_sampled - 1),
        ],
        loss_fn_inputs=[
            types.PromptProvenanceSpan(sequence_id=sid, offset=1, length=n_prompt - 1),
            types.SampledProvenanceSpan(sequence_id=sid, length=n_sampled),
        ],
    )


def test_stable_reinforce_trains_on_the_samples_the_server_recorded(service, trainer):
    """sample(record_stability_info=True) keeps each sequence; stable_reinforce reads the sampler's
    recorded log-probs (not the client's `logprobs`): at the sampler's own weights the ratio is 1,
    so the loss is -A * sum(recorded log-probs). Every provenance claim is checked."""
    client, app = service
    sampler = trainer.save_weights_and_get_sampling_client(record_stability_info=True).result()
    prompt = tiny_tokenizer().encode("pack my")
    params = types.SamplingParams(max_tokens=6, temperature=1.0, seed=3)
    seqs = sampler.sample(types.ModelInput.from_ints(prompt), num_samples=2, sampling_params=params).result().sequences
    assert len({s.sequence_id for s in seqs}) == 2
    data = [sampled_datum(prompt, seqs[0], 1.0), sampled_datum(prompt, seqs[1], -0.5)]
    expected = -(sum(seqs[0].logprobs) - 0.5 * sum(seqs[1].logprobs))
    out = trainer.forward(data, "stable_reinforce").result()
    assert out.metrics["loss:sum"] == pytest.approx(expected, rel=1e-3)
    trainer.forward_backward(data, "stable_reinforce").result()  # and it trains

    def refused(datum: types.Datum, match: str, client_trainer=trainer) -> None:
        with pytest.raises(tinker.RequestFailedError, match=match):
            client_trainer.forward([datum], "stable_reinforce").result()

    swapped: dict[str, Any] = dict(data[0].loss_fn_inputs)
    targets = swapped["target_tokens"].tolist()
    targets[-1] = (targets[-1] + 1) % 100  # a token the sequence did not sample
    swapped["target_tokens"] = targets
    refused(
        types.Datum(data[0].model_input, swapped, data[0].model_input_spans, data[0].loss_fn_input_spans),
        r"loss_fn_input_spans\[1\] claims positions .* are sampled tokens\[0:\d+\] of 'seq-\w+'; they are not",
    )
    refused(types.Datum(data[0].model_input, data[0].loss_fn_inputs), "data.0. has no provenance")
    prompt_advantage: dict[str, Any] = dict(data[0].loss_fn_inputs)
    prompt_advantage["advantages"] = [0.5] + prompt_advantage["advantages"].tolist()[1:]
    refused(
        types.Datum(data[0].model_input, prompt_advantage, data[0].model_input_spans, data[0].loss_fn_input_spans),
        "an advantage at position 0, a prompt token",
    )
    # another key's training client finds no record of these sequences (not found, never "forbidden")
    _, other = app.state.store.create_key("other-recorder")
    stranger = tinker.ServiceClient(base_url=client.holder._base_url, api_key=other)
    theirs = stranger.create_lora_training_client(base_model=trainer.get_info().model_data.model_name, rank=8).result()
    refused(data[0], f"names sequence '{seqs[0].sequence_id}', which this server has no record of", theirs)


def test_a_stable_reinforce_call_cut_into_steps_gives_each_datum_its_own_record(service, trainer, monkeypatch):
    """With `step_tokens` 1 every datum is a step of its own (the scheduler's batches); each
    datum's provenance must still be read at its index in the whole call, not in its batch: the
    loss is -sum_k A_k * sum(recorded log-probs of sequence k) only if datum k gets sequence k's
    record, and a bad span in the third datum is refused as data[2]."""
    from tempering.serve import tinker_ops

    client, app = service
    sampler = trainer.save_weights_and_get_sampling_client(record_stability_info=True).result()
    prompt = tiny_tokenizer().encode("pack my")
    params = types.SamplingParams(max_tokens=6, temperature=1.0, seed=5)
    seqs = sampler.sample(types.ModelInput.from_ints(prompt), num_samples=4, sampling_params=params).result().sequences
    advantages = [1.0, -0.5, 2.0, 0.25]
    data = [sampled_datum(prompt, s, a) for s, a in zip(seqs, advantages, strict=True)]
    expected = -sum(a * sum(s.logprobs) for s, a in zip(seqs, advantages, strict=True))
    cut: list[int] = []

    def batches(data, step_tokens):
        out = real_batches(data, step_tokens)
        cut.append(len(out))
        return out

    real_batches = tinker_ops.batches
    monkeypatch.setattr(tinker_ops, "batches", batches)
    monkeypatch.setattr(app.state.cfg, "step_tokens", 1)
    out = trainer.forward(data, "stable_reinforce").result()
    assert cut == [4]  # one step per datum
    assert out.metrics["loss:sum"] == pytest.approx(expected, rel=1e-3)
    for datum, got in zip(data, out.loss_fn_outputs, strict=True):
        assert len(got["logprobs"].tolist()) == len(datum.loss_fn_inputs["target_tokens"].tolist())

    third: dict[str, Any] = dict(data[2].loss_fn_inputs)
    targets = third["target_tokens"].tolist()
    targets[-1] = (targets[-1] + 1) % 100  # a token sequence 2 did not sample
    third["target_tokens"] = targets
    bad = types.Datum(data[2].model_input, third, data[2].model_input_spans, data[2].loss_fn_input_spans)
    with pytest.raises(tinker.RequestFailedError, match=r"data\[2\]\.loss_fn_input_spans\[1\] claims positions"):
        trainer.forward([data[0], data[1], bad, data[3]], "stable_reinforce").result()


def test_the_key_temper_keys_create_prints_is_taken_by_the_sdk_as_is_and_older_keys_still_work(service):
    import hashlib
    import sqlite3

    from typer.testing import CliRunner

    from tempering.cli import app as cli

    client, app = service
    made = CliRunner().invoke(cli, ["keys", "create", "printed", "--state", str(app.state.cfg.state)])
    printed = made.output.strip().splitlines()[-1]
    assert printed.startswith("tml-")
    url = client.holder._base_url
    assert tinker.ServiceClient(base_url=url, api_key=printed).get_server_capabilities().supported_models
    # a key printed before the tml- prefix (`tmp-...`) is stored as its hash; the SDK takes it as tml- + key
    old = "tmp-" + "x" * 43
    with sqlite3.connect(app.state.cfg.db_path) as db:
        db.execute(
            "INSERT INTO keys VALUES ('key-old', 'old', ?, NULL, 0, NULL)", (hashlib.sha256(old.encode()).hexdigest(),)
        )
    assert app.state.store.authenticate(old).name == "old"  # the OpenAI server's check, unchanged
    assert tinker.ServiceClient(base_url=url, api_key="tml-" + old).get_server_capabilities().supported_models


def test_refusals_come_back_as_the_sdks_errors_naming_the_call(service, trainer, tiny_base):
    client, app = service
    with pytest.raises(tinker.BadRequestError, match="create_model: base model 'no/such-model' is not served"):
        client.create_lora_training_client(base_model="no/such-model", rank=4).result()
    tokens = tiny_tokenizer().encode("abcdef")
    with pytest.raises(tinker.RequestFailedError, match="loss_fn 'gspo' is not supported here .supported: cispo, "):
        trainer.forward_backward([text_datum(tokens)], "gspo").result()
    with pytest.raises(tinker.RequestFailedError, match="lacks 'weights' for cross_entropy"):
        datum = types.Datum(
            model_input=types.ModelInput.from_ints(tokens[:-1]), loss_fn_inputs={"target_tokens": tokens[1:]}
        )
        trainer.forward_backward([datum], "cross_entropy").result()
    with pytest.raises(tinker.BadRequestError, match="save_weights_external .*is not supported"):
        trainer.save_weights_external("x").result()
    with pytest.raises(tinker.AuthenticationError):
        tinker.ServiceClient(base_url=client.holder._base_url, api_key="tml-not-a-key").get_server_capabilities()


def test_each_training_client_is_a_registry_run_with_its_base_model_and_saved_weights(service, trainer, tiny_base):
    from tempering.runs.registry import Registry

    _, app = service
    trainer.save_weights_for_sampler("recorded").result()
    registry = Registry(app.state.cfg.registry_location)
    run = registry.get(app.state.jobs.runs[trainer.model_id])
    assert run["kind"] == "tinker" and run["base_model"] == str(tiny_base)
    assert [i.role for i in registry.inputs(run["id"])] == ["base_model"]
    outputs = {o["role"]: o["path"] for o in registry.outputs(run["id"])}
    assert outputs["sampler"].endswith("sampler_weights/recorded")


def test_a_read_result_is_dropped_after_its_keep_time_and_an_unread_one_is_kept():
    import asyncio

    from tempering.serve.tinker_sched import Scheduler

    calls = Scheduler()
    calls.KEEP_S = 0.0
    read, unread = calls.submit("k", "a", lambda: 1), calls.submit("k", "b", lambda: 2)
    assert asyncio.run(calls.wait(read, "k", 5)).result() == 1
    calls.submit("k", "c", lambda: 3)  # a submit drops what was read longer than KEEP_S ago
    with pytest.raises(KeyError):
        asyncio.run(calls.wait(read, "k", 5))
    assert asyncio.run(calls.wait(unread, "k", 5)).result() == 2
    calls.close()


def test_a_step_past_its_deadline_fails_its_call_refuses_the_rest_and_marks_the_worker_stuck():
    """A step that never returns: the watchdog fails its call (naming it), the other key's queued
    call and every later submit are refused with the generic line, and `stuck` says why."""
    import asyncio
    import threading

    from tempering.serve.tinker_sched import STUCK, CallRefused, Scheduler

    calls = Scheduler(call_timeout_s=0.2, grace_s=0.3)
    release = threading.Event()
    hung = calls.submit("a", "forward_backward", lambda: release.wait(120))
    queued = calls.submit("b", "sample", lambda: 1)
    future = asyncio.run(calls.wait(hung, "a", 60))
    assert future is not None, "the hung call was still running after 60 s"
    with pytest.raises(CallRefused, match=r"^forward_backward: tinker worker stuck: a step gave no answer after"):
        future.result()
    other = asyncio.run(calls.wait(queued, "b", 60))
    assert other is not None
    with pytest.raises(CallRefused) as refused:
        other.result()
    assert str(refused.value) == f"sample: {STUCK}"
    assert calls.stuck is not None and "forward_backward" in calls.stuck
    with pytest.raises(CallRefused, match="stuck"):
        calls.submit("c", "sample", lambda: 2)
    release.set()
    calls.close()


def test_the_cookbooks_supervised_loop_runs_unmodified_and_lowers_the_loss(service, tiny_base, tmp_path, monkeypatch):
    """tinker-cookbook's own `supervised.train.main` (sl_basic's config on the cookbook's example
    conversations), a few steps against the server; the same datums score lower after."""
    import asyncio
    import json
    from importlib.resources import files

    cookbook = pytest.importorskip("tinker_cookbook")
    from tinker_cookbook.renderers import TrainOnWhat
    from tinker_cookbook.supervised import train
    from tinker_cookbook.supervised.data import FromConversationFileBuilder
    from tinker_cookbook.supervised.types import ChatDatasetBuilderCommonConfig

    client, _ = service
    url, key = client.holder._base_url, client.holder._api_key
    monkeypatch.setenv("TINKER_API_KEY", key)
    monkeypatch.setenv("TINKER_TELEMETRY", "0")
    common = ChatDatasetBuilderCommonConfig(
        model_name_for_tokenizer=str(tiny_base),
        renderer_name="qwen3_instruct",
        max_length=96,
        batch_size=2,
        train_on_what=TrainOnWhat.ALL_ASSISTANT_MESSAGES,
    )
    data = str(files(cookbook) / "example_data" / "conversations.jsonl")
    config = train.Config(
        log_path=str(tmp_path / "log"),
        recipe_name="recipe_sl_basic",
        model_name=str(tiny_base),
        renderer_name="qwen3_instruct",
        dataset_builder=FromConversationFileBuilder(common_config=common, file_path=data),
        learning_rate=1e-2,
        lr_schedule="linear",
        num_epochs=1,
        eval_every=0,
        save_every=0,
        lora_rank=8,
        base_url=url,
        max_steps=3,
    )
    asyncio.run(train.main(config))
    rows = [json.loads(line) for line in (tmp_path / "log" / "metrics.jsonl").read_text().splitlines()]
    assert len([r for r in rows if "train_mean_nll" in r]) == 3
    states = [json.loads(line) for line in (tmp_path / "log" / "checkpoints.jsonl").read_text().splitlines()]
    state = [s["state_path"] for s in states if s.get("state_path")][-1]

    dataset, _ = config.dataset_builder()
    dataset.set_epoch(seed=0)  # the order the loop's first epoch trained in
    trained = [d for i in range(3) for d in dataset.get_batch(i)]
    base = client.create_lora_training_client(base_model=str(tiny_base), rank=8).result()
    final = client.create_training_client_from_state(state).result()
    before, after = mean_nll(base, trained), mean_nll(final, trained)
    assert after < before - 0.05, (before, after)


def mean_nll(trainer, datums: list) -> float:
    """The cookbook's train_mean_nll, sum(-logp * w) / sum(w), over one `forward`."""
    out = trainer.forward(datums, "cross_entropy").result()
    total = weight = 0.0
    for d, o in zip(datums, out.loss_fn_outputs):
        w, logprobs = d.loss_fn_inputs["weights"].tolist(), o["logprobs"].tolist()
        total -= sum(lp * x for lp, x in zip(logprobs, w))
        weight += sum(w)
    return total / weight


@pytest.mark.slow
@pytest.mark.parametrize("loss_fn", [None, "importance_sampling"])
def test_the_cookbooks_math_rl_recipe_runs_unmodified_with_its_default_loss(
    service, tiny_base, tmp_path, monkeypatch, loss_fn
):
    """tinker-cookbook's `recipes/math_rl/train.py` (arithmetic environment) with its default loss,
    stable_reinforce, for 4 steps: its samplers record stability info and every step's
    forward_backward trains on those records (a datum whose provenance the server cannot check
    would fail the run). Only what cannot work offline is given: the local model and a renderer.
    With `importance_sampling` the same datums carry provenance, which that loss does not read."""
    import asyncio
    import json

    pytest.importorskip("pylatexenc")  # the recipe's own dependency (tinker-cookbook's math-rl extra)
    from tinker_cookbook.recipes.math_rl import train

    from tempering.runs.registry import Registry

    client, app = service
    monkeypatch.setenv("TINKER_API_KEY", client.holder._api_key)
    monkeypatch.setenv("TINKER_TELEMETRY", "0")
    config = train.CLIConfig(
        model_name=str(tiny_base),
        renderer_name="qwen3_instruct",
        base_url=client.holder._base_url,
        log_path=str(tmp_path / "log"),
        groups_per_batch=2,
        lora_rank=8,
        eval_every=0,
        save_every=0,
        max_steps=4,
        **({"loss_fn": loss_fn} if loss_fn else {}),
    )
    assert config.loss_fn == (loss_fn or "stable_reinforce") and config.env == "arithmetic"
    asyncio.run(train.cli_main(config))
    rows = [json.loads(line) for line in (tmp_path / "log" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "env/all/reward/total" in r]
    assert [r["progress/batch"] for r in steps] == [0, 1, 2, 3]
    assert all(r["env/all/total_episodes"] == 8 and abs(r["optim/kl_sample_train_v1"]) < 1e-3 for r in steps)
    final = [json.loads(line) for line in (tmp_path / "log" / "checkpoints.jsonl").read_text().splitlines()][-1]
    model_id = final["state_path"].removeprefix("tinker://").split("/")[0]
    run = Registry(app.state.cfg.registry_location).latest(f"tinker-{model_id}")
    assert run is not None and len(run["metrics"]["losses"]) == 4  # one training forward_backward a step
    assert all(math.isfinite(x) for x in run["metrics"]["losses"])
