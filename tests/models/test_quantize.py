"""int8: which layers are quantized, the head choice, the original untouched, outputs close."""

import pytest
import torch
from torch.ao.nn.quantized.dynamic import Linear as DynamicInt8Linear

from tempering.models.quantize import CastLinear, Int8WeightLinear, int8_per_channel, quantize_int8, state_bytes
from tests.conftest import tiny_llama


@pytest.mark.parametrize("method,int8_type", [("weight", Int8WeightLinear), ("dynamic", DynamicInt8Linear)])
@pytest.mark.parametrize("head", ["int8", "bf16", "fp32"])
def test_quantize_int8_layers_and_head(head, method, int8_type):
    model = tiny_llama(vocab=256, seed=0).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    q = quantize_int8(model, head, method=method)
    decoder_linears = [m for n, m in q.named_modules() if n.startswith("model.layers.") and n.endswith("proj")]
    assert len(decoder_linears) == 2 * 7 and all(isinstance(m, int8_type) for m in decoder_linears)
    expected_head = {"int8": int8_type, "bf16": CastLinear, "fp32": torch.nn.Linear}[head]
    assert type(q.lm_head) is expected_head
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # a copy: the original is intact
    ids = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref, out = model(ids).logits, q(ids).logits
    # int8 weights with per-channel scales (and bf16 or int8 activations): a relative error
    # of a few parts in a hundred at most
    assert (out - ref).norm() / ref.norm() < 0.05
    assert state_bytes(q) < state_bytes(model)


def test_int8_per_channel_by_hand():
    w = torch.tensor([[0.5, -1.27, 0.0], [2.54, 1.0, -0.01]])
    q, scale = int8_per_channel(w)
    assert torch.allclose(scale, torch.tensor([0.01, 0.02]))
    assert q.tolist() == [[50, -127, 0], [127, 50, -0]]


def test_int8_weight_linear_is_the_dequantized_matmul_in_bf16():
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 48)
    layer = Int8WeightLinear(linear)
    x = torch.randn(3, 5, 64)
    q, scale = int8_per_channel(linear.weight)
    expected = x.bfloat16().float() @ (q.float() * scale.bfloat16().float()[:, None]).T + linear.bias.bfloat16().float()
    out = layer(x)
    assert out.shape == (3, 5, 48) and out.dtype == torch.float32
    assert torch.allclose(out, expected, rtol=2e-2, atol=2e-2)  # bf16 output rounding only


def test_quantize_int8_rejects_an_unknown_head_or_method():
    with pytest.raises(ValueError, match="'int4' is not one of int8, bf16, fp32"):
        quantize_int8(tiny_llama(), "int4")
    with pytest.raises(ValueError, match="'awq' is not one of weight, dynamic"):
        quantize_int8(tiny_llama(), method="awq")


def test_layers_the_weight_only_kernel_cannot_take_stay_float():
    from tempering.models.quantize import int8_weight_fits

    # the kernel reads in_features in blocks of 16 (8 gave wrong numbers, 24 crashed): such layers stay float
    assert int8_weight_fits(torch.nn.Linear(32, 8)) and not int8_weight_fits(torch.nn.Linear(24, 8))
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=24,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).eval()
    q = quantize_int8(model)
    mlp = q.model.layers[0].mlp
    assert isinstance(mlp.up_proj, Int8WeightLinear) and type(mlp.down_proj) is torch.nn.Linear
    ids = torch.randint(0, 64, (2, 7), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref, out = model(ids).logits, q(ids).logits
    assert (out - ref).norm() / ref.norm() < 0.05
