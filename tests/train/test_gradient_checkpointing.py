"""`train.gradient_checkpointing`: the same losses and gradients (fp32, 1e-6) with less memory held for
the backward pass; `lora.last_layers` still stops the backward pass at the lowest adapted layer; engines
still decode on their KV cache from a checkpointed model left in training mode."""

import pytest
import torch

from tempering.batches import GRPOBatch
from tempering.config import GRPOSettings, LoraSettings, SamplingParams, TrainSettings
from tempering.data.batches import SFTBatches
from tempering.models.checkpointing import enable_checkpointing
from tempering.models.lora import apply_lora
from tempering.objectives.grpo import GRPOObjective
from tempering.objectives.sft import SFTObjective
from tempering.rollout.batching_engine import BatchingEngine
from tempering.rollout.engine import HFEngine
from tests.conftest import random_examples, tiny_llama

TOL = 1e-6


def make_model(lora: LoraSettings | None):
    model = tiny_llama(vocab=64, seed=0)
    if lora is None:
        return model
    model = apply_lora(model, lora, "tiny")
    torch.manual_seed(1)
    for name, p in model.named_parameters():
        if "lora_B" in name:  # peft starts B at 0, which would leave A's gradient 0 on both paths
            p.data.normal_(0, 0.1)
    return model


def sft_batch() -> dict:
    return SFTBatches(random_examples(6, seed=2, lo=20, hi=60), 6, 256, 0, True, seed=1).next_batch()


def grpo_batch() -> GRPOBatch:
    gen = torch.Generator().manual_seed(3)
    prompt_ids = torch.randint(3, 64, (2, 7), generator=gen)
    prompt_mask = torch.ones_like(prompt_ids)
    prompt_mask[1, :3] = 0  # left padding
    completion_ids = torch.randint(3, 64, (4, 9), generator=gen)
    completion_mask = torch.ones_like(completion_ids)
    completion_mask[1, 6:] = 0  # right padding
    completion_mask[3, 4:] = 0
    return GRPOBatch(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        completion_ids=completion_ids,
        completion_mask=completion_mask,
        loss_mask=completion_mask,
        sampled_mask=completion_mask,
        engine_logprobs=torch.zeros(4, 9),
        advantages=torch.tensor([1.0, -1.0, 0.5, -0.5]),
        n_real_tokens=int(completion_mask.sum()),
        old_logprobs=-torch.rand(4, 9, generator=gen) - 3.5,  # a stale policy: ratios away from 1
    )


def count_mlp_runs(model) -> list[int]:
    """Calls of each layer's MLP, replays included (module hooks do not fire in a checkpoint's replay)."""
    runs = [0] * len(model.get_decoder().layers)
    for i, layer in enumerate(model.get_decoder().layers):
        forward = layer.mlp.forward

        def counted(*args, i=i, forward=forward, **kwargs):
            runs[i] += 1
            return forward(*args, **kwargs)

        layer.mlp.forward = counted
    return runs


def step(model, objective, batch, checkpointing: bool) -> tuple[float, dict[str, torch.Tensor], list[int]]:
    """One forward and backward: the loss, the gradients, and how often each layer's MLP ran."""
    if checkpointing:
        enable_checkpointing(model)
    runs = count_mlp_runs(model)
    model.train()
    loss, _ = objective.loss(model, batch)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return float(loss), grads, runs


def assert_same_step(plain, checkpointed, forwards: int = 1) -> None:
    """Equal losses and gradients; each layer ran `forwards` times without checkpointing, and with it
    once (whole rows) plus its replay in the backward pass."""
    (loss0, grads0, runs0), (loss1, grads1, runs1) = plain, checkpointed
    assert abs(loss0 - loss1) <= TOL
    assert grads0.keys() == grads1.keys() and grads0
    largest = max(float(g.abs().max()) for g in grads0.values())
    assert largest > 1e-3  # gradients that mean something
    # 1e-6 relative to the largest gradient entry when it exceeds 1: a replayed forward may sum in
    # another order, and fp32 rounds at ~1e-7 of the magnitude (full-model GRPO gradients reach ~10)
    assert max(float((grads0[n] - grads1[n]).abs().max()) for n in grads0) <= TOL * max(1.0, largest)
    assert runs0 == [forwards] * 2 and runs1 == [2, 2]


LORA = LoraSettings(r=4, alpha=8)


@pytest.mark.parametrize("lora", [None, LORA], ids=["full", "lora"])
def test_sft_loss_and_gradients_equal_without_checkpointing(lora):
    batch = sft_batch()
    plain = step(make_model(lora), SFTObjective(), batch, checkpointing=False)
    assert_same_step(plain, step(make_model(lora), SFTObjective(), batch, checkpointing=True))


@pytest.mark.parametrize("lora", [None, LORA], ids=["full", "lora"])
def test_grpo_loss_and_gradients_equal_without_checkpointing(lora):
    # the checkpointed layers ignore a KV cache, so the prompt-once path runs whole rows instead
    objective, batch = GRPOObjective(GRPOSettings(max_new_tokens=9)), grpo_batch()
    plain = step(make_model(lora), objective, batch, checkpointing=False)
    assert_same_step(plain, step(make_model(lora), objective, batch, checkpointing=True), forwards=2)


def test_last_layers_backward_still_stops_at_the_lowest_adapted_layer():
    lora = LoraSettings(r=4, alpha=8, last_layers=1)
    batch = sft_batch()
    loss0, grads0, runs0 = step(make_model(lora), SFTObjective(), batch, checkpointing=False)
    loss1, grads1, runs1 = step(make_model(lora), SFTObjective(), batch, checkpointing=True)
    assert abs(loss0 - loss1) <= TOL and grads0.keys() == grads1.keys()
    assert all(".layers.1." in n for n in grads1)
    assert max(float((grads0[n] - grads1[n]).abs().max()) for n in grads0) <= TOL
    # layer 0 is frozen and its input needs no gradient: it is not replayed in the backward pass
    assert runs0 == [1, 1] and runs1 == [1, 2]


def test_the_trainer_turns_it_on(tmp_path):
    from tempering.train.trainer import Trainer

    model = tiny_llama()
    Trainer(model, SFTObjective(), object(), TrainSettings(steps=1, gradient_checkpointing=True), tmp_path)  # type: ignore[arg-type]
    assert all(layer.gradient_checkpointing for layer in model.get_decoder().layers)


@pytest.mark.parametrize("kind", [HFEngine, BatchingEngine], ids=["hf", "batching"])
def test_engines_decode_on_their_kv_cache_from_a_checkpointed_model(kind, smol_tokenizer):
    params = SamplingParams(temperature=0.0, max_new_tokens=6)
    prompts = [[5, 6, 7, 8], [9, 10]]
    plain = tiny_llama(vocab=len(smol_tokenizer), seed=4)
    expected = [g[0].token_ids for g in kind(plain, smol_tokenizer, precision="fp32").generate(prompts, params)]
    model = tiny_llama(vocab=len(smol_tokenizer), seed=4)
    enable_checkpointing(model)
    model.train()  # as the trainer leaves it between steps
    lengths = []
    model.get_decoder().layers[0].mlp.register_forward_hook(lambda _m, args, _o: lengths.append(args[0].shape[1]))
    got = [g[0].token_ids for g in kind(model, smol_tokenizer, precision="fp32").generate(prompts, params)]
    assert got == expected and all(len(t) == 6 for t in got)
    # each prompt is prefilled once, then every decoding step feeds one new token: the cache is used
    assert 1 <= len([n for n in lengths if n > 1]) <= len(prompts), lengths
    assert lengths.count(1) >= params.max_new_tokens - 1, lengths
    assert model.training


def saved_bytes(model, batch, checkpointing: bool) -> int:
    """Bytes the forward pass keeps for the backward pass (what activation checkpointing saves)."""
    if checkpointing:
        enable_checkpointing(model)
    model.train()
    total = 0

    def pack(t):
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss, _ = SFTObjective().loss(model, batch)
    loss.backward()
    return total


def test_checkpointing_keeps_less_for_the_backward_pass():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=64,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
    )
    batch = SFTBatches(random_examples(2, seed=5, lo=500, hi=512), 2, 1024, 0, False, seed=1).next_batch()
    torch.manual_seed(0)
    plain = saved_bytes(LlamaForCausalLM(cfg), batch, checkpointing=False)
    torch.manual_seed(0)
    kept = saved_bytes(LlamaForCausalLM(cfg), batch, checkpointing=True)
    print(f"saved for backward: {plain / 2**20:.1f} MiB without, {kept / 2**20:.1f} MiB with checkpointing")
    assert kept < plain / 2


def test_on_policy_divergence_loss_and_gradients_equal_without_checkpointing():
    # the whole-distribution distillation loss reads the decoder states (`grouped_hidden`), whole rows
    # under checkpointing
    from tempering.objectives.distill import OnPolicyDivergenceObjective

    objective = OnPolicyDivergenceObjective(tiny_llama(vocab=64, seed=5), "reverse_kl", None, 1.0, [])
    batch = grpo_batch()
    plain = step(make_model(None), objective, batch, checkpointing=False)
    assert_same_step(plain, step(make_model(None), objective, batch, checkpointing=True), forwards=2)
