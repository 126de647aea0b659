"""`temper serve --tinker` driven by the official `tinker` SDK on a tiny random model: training
(forward_backward + optim_step), sampling from saved weights, save/load state, the RL losses,
and the SDK's own errors for what the server refuses."""

from __future__ import annotations

import math

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
    client = tinker.ServiceClient(base_url=thread.url, api_key="tml-" + secret)
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


def test_refusals_come_back_as_the_sdks_errors_naming_the_call(service, trainer, tiny_base):
    client, app = service
    with pytest.raises(tinker.BadRequestError, match="create_model: base model 'no/such-model' is not served"):
        client.create_lora_training_client(base_model="no/such-model", rank=4).result()
    tokens = tiny_tokenizer().encode("abcdef")
    with pytest.raises(tinker.RequestFailedError, match="loss_fn 'cispo' is not supported"):
        trainer.forward_backward([text_datum(tokens)], "cispo").result()
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
