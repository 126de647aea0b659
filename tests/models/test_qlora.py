"""LoRA over an int8 base (`lora.base: int8`): the frozen Linear layers are int8 per channel, the
adapters train in float, and the numbers equal LoRA over the dequantised float weights."""

import copy

import torch

from tempering.config import LoraSettings
from tempering.models.lora import apply_lora
from tempering.models.quantize import Int8WeightLinear, int8_base_in_place, int8_per_channel
from tests.conftest import tiny_llama


def dequantised_copy(model):
    """The float model whose decoder Linear weights are exactly what the int8 base computes with."""
    out = copy.deepcopy(model)
    for module in out.get_decoder().modules():
        if isinstance(module, torch.nn.Linear):
            q, scale = int8_per_channel(module.weight)
            module.weight.data = q.float() * scale[:, None]
    return out


def lora_loss_and_grads(model, base):
    if base == "int8":  # the base computes in fp32 here, so the two paths are the same arithmetic
        int8_base_in_place(model, torch.float32)
    torch.manual_seed(1)
    peft_model = apply_lora(model, LoraSettings(r=4, alpha=8, base=base), "tiny")
    with torch.no_grad():  # B starts at zero: give it values so every adapter gets a gradient
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(len(name))) * 0.1)
    ids = torch.randint(3, 64, (2, 12), generator=torch.Generator().manual_seed(0))
    loss = peft_model(input_ids=ids, labels=ids).loss
    loss.backward()
    grads = {n: p.grad for n, p in peft_model.named_parameters() if p.requires_grad}
    return peft_model, loss.detach(), grads


def test_lora_on_the_int8_base_equals_lora_on_its_dequantised_weights():
    model = tiny_llama()
    reference = dequantised_copy(model)
    int8_model, loss, grads = lora_loss_and_grads(model, "int8")
    _, ref_loss, ref_grads = lora_loss_and_grads(reference, "float")
    assert sum(isinstance(m, Int8WeightLinear) for m in int8_model.modules()) == 2 * 7  # q k v o gate up down
    assert grads.keys() == ref_grads.keys() and len(grads) == 2 * 7 * 2
    assert torch.allclose(loss, ref_loss, atol=1e-5)
    for name, grad in grads.items():
        assert grad.abs().sum() > 0, name
        assert torch.allclose(grad, ref_grads[name], atol=1e-5), name


def train(model, base, steps=12):
    torch.manual_seed(1)
    peft_model = apply_lora(model, LoraSettings(r=4, alpha=8, base=base), "tiny")
    optimizer = torch.optim.AdamW([p for p in peft_model.parameters() if p.requires_grad], lr=1e-2)
    ids = torch.randint(3, 64, (4, 16), generator=torch.Generator().manual_seed(0))
    losses = []
    for _ in range(steps):
        loss = peft_model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return peft_model, losses


def test_adapters_learn_over_the_int8_base_as_over_its_float_twin_and_the_base_stays_as_stored():
    """The default int8 base computes in bf16 (as QLoRA does): its curve follows the float twin's."""
    model = tiny_llama()
    reference = dequantised_copy(model)
    int8_model, losses = train(model, "int8")
    _, ref_losses = train(reference, "float")
    assert losses[-1] < losses[0] - 0.3
    assert max(abs(a - b) for a, b in zip(losses, ref_losses, strict=True)) < 0.02
    assert all(m.scale.dtype == torch.bfloat16 for m in int8_model.modules() if isinstance(m, Int8WeightLinear))
    stored = tiny_llama()  # the same seed: the weights the int8 codes were made from
    for name, module in int8_model.named_modules():
        if isinstance(module, Int8WeightLinear):
            twin = stored.get_submodule(name.removeprefix("base_model.model.").removesuffix(".base_layer"))
            assert torch.equal(module.weight_int8, int8_per_channel(twin.weight)[0]), name
