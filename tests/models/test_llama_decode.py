"""The single-stream decode step: its logits against the HF forward (fp32, bf16 prepacked,
int8), RoPE by hand, and which models it refuses."""

import pytest
import torch

from tempering.models.cpu_features import supports
from tempering.models.llama_decode import (
    DenseKernel,
    DynamicInt8Kernel,
    LlamaDecoder,
    llama_decoder,
    rope,
    unsupported_reason,
)
from tempering.models.precision import cpu_has_vnni
from tests.conftest import needs_cpu, tiny_llama, tiny_moe

VOCAB = 96


def _steps(decoder: LlamaDecoder, model, ids: list[int], cache_len: int = 40) -> torch.Tensor:
    """Logits (T, V) of feeding `ids` one token at a time into an empty cache."""
    cfg = model.config
    shape = (1, cfg.num_key_value_heads, cache_len, cfg.hidden_size // cfg.num_attention_heads)
    keys = [torch.zeros(shape, dtype=decoder.dtype) for _ in range(cfg.num_hidden_layers)]
    values = [torch.zeros(shape, dtype=decoder.dtype) for _ in range(cfg.num_hidden_layers)]
    return torch.cat([decoder.step(torch.tensor([t]), i, keys, values) for i, t in enumerate(ids)])


IDS = [1, 17, 40, 5, 88, 3, 61, 29, 70, 12]


def test_fp32_steps_equal_the_hf_forward():
    model = tiny_llama(vocab=VOCAB, seed=1).eval()
    with torch.no_grad():
        ref = model(torch.tensor([IDS])).logits[0]
    got = _steps(LlamaDecoder(model, 64), model, IDS)
    assert torch.allclose(got, ref, atol=1e-5, rtol=1e-5)
    assert torch.equal(got.argmax(-1), ref.argmax(-1))


@needs_cpu("onednn_bf16")
def test_bf16_prepacked_steps_are_close_to_the_fp32_forward():
    model = tiny_llama(vocab=VOCAB, seed=1).eval()
    with torch.no_grad():
        ref = model(torch.tensor([IDS])).logits[0]
    bf16 = LlamaDecoder(model.bfloat16(), 64)
    assert bf16.dtype == torch.bfloat16 and bf16.onednn  # prepacked, post-ops fused
    got = _steps(bf16, model, IDS)
    # bf16 weights and activations: relative error of a few parts in a hundred
    assert (got - ref).norm() / ref.norm() < 0.03


def test_bf16_without_onednn_runs_f_linear_and_gives_the_prepacked_numbers(cpu_mask):
    """An AVX2-only host (masked here) refuses oneDNN's bf16 prepack: the step falls back to
    bf16 F.linear, as close to the fp32 forward as the prepacked step, with its greedy tokens."""
    model = tiny_llama(vocab=VOCAB, seed=1).eval()
    with torch.no_grad():
        ref = model(torch.tensor([IDS])).logits[0]
    bf16_model = model.bfloat16()
    prepacked = LlamaDecoder(bf16_model, 64) if supports("onednn_bf16") else None
    cpu_mask("avx2")
    plain = LlamaDecoder(bf16_model, 64)
    assert not plain.onednn and all(
        isinstance(plain.layers[0][name], DenseKernel) for name in ("qkv", "o", "gate", "up", "down")
    )
    got = _steps(plain, model, IDS)
    assert (got - ref).norm() / ref.norm() < 0.03
    if prepacked is not None:  # same bf16 products, summed in another order
        fused = _steps(prepacked, model, IDS)
        assert (got - fused).norm() / fused.norm() < 0.01 and torch.equal(got.argmax(-1), fused.argmax(-1))


def test_int8_steps_are_close_to_the_int8_model():
    from tempering.models.quantize import quantize_int8

    q = quantize_int8(tiny_llama(vocab=VOCAB, seed=1).eval())
    with torch.no_grad():
        ref = q(torch.tensor([IDS])).logits[0]
    decoder = LlamaDecoder(q, 64)
    assert decoder.int8 and decoder.dtype == torch.float32
    got = _steps(decoder, q, IDS)
    # the same int8 rows and scales; bf16 activations round a norm's output differently
    assert (got - ref).norm() / ref.norm() < 1e-2


def _per_channel(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The qint8 tensor of int8 rows `q` with per-row `scale` (what a dynamic int8 Linear holds)."""
    zero = torch.zeros(len(scale), dtype=torch.long)
    return torch.quantize_per_channel(q.float() * scale[:, None].float(), scale.double(), zero, 0, torch.qint8)


def test_dynamic_int8_kernel_by_hand():
    # x's range is 127 wide (min(x, 0) .. max(x, 0)), so its 7-bit grid has step 1 and integer x
    # quantise exactly: y = x q^T * scale, by hand
    q = torch.tensor([[1, -2, 3, 0], [127, -128, 5, 7]], dtype=torch.int8)
    rows = [_per_channel(q[:1], torch.tensor([0.5])), _per_channel(q[1:], torch.tensor([0.25]))]
    kernel = DynamicInt8Kernel(rows, reduce_range=True)
    assert kernel(torch.tensor([[0.0, 1, 2, 127]])).tolist() == [[2.0, 192.75]]  # (0-2+6+0)/2, (0-128+10+889)/4
    assert kernel(torch.tensor([[-3.0, 1, 2, 124]])).tolist() == [[0.5, 92.25]]  # (-3-2+6)/2, (-381-128+10+868)/4


def test_dynamic_int8_kernel_is_within_its_activation_rounding_of_the_dequantised_matmul():
    """x is rounded to a grid of step (max(x, 0) - min(x, 0)) / levels (uint8: 255 levels, 127
    with reduce_range), so each x_j moves by at most step / 2 and y_i by at most step / 2 *
    sum_j |W_ij|. x at its max beside weights of 127 would overflow fbgemm's int16 pair sums
    without VNNI: 8 bits are checked only where the step takes them (`cpu_has_vnni`)."""
    torch.manual_seed(0)
    w = torch.randn(96, 64) * 0.1
    w[:, :2] = w.abs().amax(1, keepdim=True)  # q = 127, 127 where x is at its max: a u8 x s8 pair sum of 64770
    scale = w.abs().amax(1) / 127
    q = torch.round(w / scale[:, None]).to(torch.int8)
    dequantised = q.float() * scale[:, None]
    extreme = torch.randn(1, 64)
    extreme[0, :2] = 5.0
    for reduce_range in (True, False) if cpu_has_vnni() else (True,):
        kernel = DynamicInt8Kernel([_per_channel(q, scale)], reduce_range)
        for x in (torch.randn(1, 64), torch.randn(1, 64) + 3, extreme):
            step = (x.max().clamp(min=0) - x.min().clamp(max=0)) / (127 if reduce_range else 255)
            bound = step / 2 * dequantised.abs().sum(1) + 1e-5
            err = (kernel(x) - x @ dequantised.T).abs()[0]
            assert (err <= bound).all() and err.max() > 0  # rounded, within the bound


def test_dynamic_int8_steps_equal_the_dynamic_int8_model_token_by_token():
    """A `quantize_int8(method="dynamic")` model: the step runs the same fbgemm op on the same
    int8 rows as that model fed one token at a time (its Linears quantise the activation over
    the whole input: fed all tokens at once they differ by ~2%). Equal here; the tolerance is
    fp32 rounding, which a norm rounding its last bit otherwise could move by a 7-bit step. The
    model's Linears take 7-bit activations (reduce_range): the step is set to the same."""
    from transformers import DynamicCache

    from tempering.models.quantize import quantize_int8

    q = quantize_int8(tiny_llama(vocab=VOCAB, seed=1).eval(), method="dynamic")
    cache = DynamicCache()
    with torch.no_grad():
        ref = torch.cat([q(torch.tensor([[t]]), past_key_values=cache, use_cache=True).logits[0] for t in IDS])
    decoder = LlamaDecoder(q, 64)
    assert decoder.int8 and decoder.dtype == torch.float32
    kernels = [layer[name] for layer in decoder.layers for name in ("qkv", "o", "gate", "up", "down")]
    for kernel in [*kernels, decoder.head]:
        assert isinstance(kernel, DynamicInt8Kernel) and kernel.reduce_range == (not cpu_has_vnni())
        kernel.reduce_range = True
    got = _steps(decoder, q, IDS)
    assert torch.allclose(got, ref, atol=1e-5) and torch.equal(got.argmax(-1), ref.argmax(-1))


def test_rope_by_hand():
    # 2 heads of head_dim 4: y = (1, 2, 3, 4 | 5, 6, 7, 8); rotate_half per head = (-3, -4, 1, 2 | -7, -8, 5, 6)
    y = torch.arange(1.0, 9.0)
    cos = torch.full((8,), 2.0)
    sin = torch.full((8,), 10.0)
    signed_sin = sin * torch.tensor([-1.0, -1, 1, 1, -1, -1, 1, 1])
    # y cos + rotate_half(y) sin = 2 y + 10 rotate_half(y)
    assert rope(y, cos, signed_sin, 4).tolist() == [-28, -36, 16, 28, -60, -68, 64, 76]


def test_models_it_does_not_serve_get_a_reason():
    assert unsupported_reason(tiny_llama(vocab=VOCAB)) is None
    moe = tiny_moe(vocab=VOCAB)
    assert unsupported_reason(moe) == "model type 'qwen3_moe' is not 'llama'"
    assert llama_decoder(moe, 64) is None
    biased = tiny_llama(vocab=VOCAB)
    biased.config.attention_bias = True
    assert unsupported_reason(biased) == "attention or MLP biases"
    dynamic = tiny_llama(vocab=VOCAB)
    dynamic.config.rope_parameters = {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}
    assert unsupported_reason(dynamic) == "rope type 'dynamic' (served: default, linear, llama3)"


def test_an_unmerged_lora_is_refused_and_a_merged_one_served():
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(tiny_llama(vocab=VOCAB), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    assert unsupported_reason(model) == "an unmerged LoRA adapter"
    model.merge_adapter()
    assert unsupported_reason(model) is None
    with torch.no_grad():
        ref = model(torch.tensor([IDS])).logits[0]
    assert torch.allclose(_steps(LlamaDecoder(model, 64), model, IDS), ref, atol=1e-5)


def test_positions_past_the_table_are_an_index_error():
    model = tiny_llama(vocab=VOCAB).eval()
    with pytest.raises(IndexError):
        _steps(LlamaDecoder(model, 16), model, IDS * 2)
