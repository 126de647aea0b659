"""The CPU-feature probes: the mask, a refused op becoming a reason (logged once, cached), and
for each probed path the fallback giving the same tokens / logits as the path it replaces."""

import logging

import pytest
import torch

from tempering.models import cpu_features
from tempering.models.cpu_features import CpuFeatureError, CpuPath, emulation_env, parse_mask, refusal, supports
from tempering.models.precision import auto_reason, resolve_precision
from tests.conftest import tiny_llama


def test_the_mask_is_host_kinds_or_flags_and_a_typo_is_one_line():
    assert parse_mask("avx2") == cpu_features.HOST_KINDS["avx2"]
    assert parse_mask("avx2, avx512_vnni") == cpu_features.HOST_KINDS["avx2"] | {"avx512_vnni"}
    assert "amx_bf16" in parse_mask("amx") and "amx_bf16" not in parse_mask("avx512_bf16")
    with pytest.raises(CpuFeatureError, match="'avx3' is not a host kind") as exc:
        parse_mask("avx2,avx3")
    assert "\n" not in str(exc.value)


def test_emulation_env_narrows_torch_only_where_the_mask_allows_nothing_wider_than_avx2():
    assert emulation_env("avx2") == {
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    }
    assert emulation_env("avx512") == {} and emulation_env("amx") == {}


def test_masked_flags_refuse_a_path_without_running_its_probe(cpu_mask, monkeypatch):
    ran = []
    monkeypatch.setitem(
        cpu_features.PATHS, "onednn_bf16", CpuPath(cpu_features.PATHS["onednn_bf16"].needs, lambda: ran.append(1), "x")
    )
    cpu_mask("avx2")
    assert "lacks avx_ne_convert or avx512bw+avx512dq+avx512vl (TEMPERING_CPU_FEATURES=avx2)" in (
        refusal("onednn_bf16") or ""
    )
    assert ran == []


def test_an_op_torch_refuses_is_a_reason_logged_once_and_cached(monkeypatch, caplog):
    """What an AVX2-only EPYC did at the first bf16 prepack: the op raised. The probe turns it
    into the path's refusal, logged once; the op is not tried again."""
    calls = []

    def refused():
        calls.append(1)
        raise RuntimeError("mkldnn_reorder_linear_weight: bf16 path needs the cpu support avx_ne_convert")

    monkeypatch.setitem(cpu_features.PATHS, "test_path", CpuPath((), refused, "the plain kernel runs"))
    with caplog.at_level(logging.INFO, logger="tempering.models.cpu_features"):
        assert not supports("test_path") and not supports("test_path")
    assert (
        refusal("test_path")
        == "RuntimeError: mkldnn_reorder_linear_weight: bf16 path needs the cpu support avx_ne_convert"
    )
    assert calls == [1]
    assert [r.getMessage() for r in caplog.records].count(
        "CPU path test_path off, the plain kernel runs: " + refusal("test_path")
    ) == 1


def test_a_probe_that_computes_wrong_numbers_is_refused(monkeypatch):
    monkeypatch.setitem(
        cpu_features.PATHS, "wrong", CpuPath((), lambda: cpu_features._close(torch.ones(2), torch.zeros(2), 0.1), "x")
    )
    assert refusal("wrong") == "probe result off by 1 (> 0.1)"


# --- each probed path: refused -> its fallback runs and agrees ------------------------------


def test_native_bf16_refused_makes_auto_fp32_and_the_engine_samples_fp32s_tokens(cpu_mask, smol_tokenizer):
    from tempering.config.sampling import SamplingParams
    from tempering.rollout.engine import HFEngine

    if supports("native_bf16"):
        assert resolve_precision("auto") == "bf16"
    cpu_mask("avx2")
    assert resolve_precision("auto") == "fp32"
    assert auto_reason("auto") == " (auto: the CPU lacks amx_bf16 or avx512_bf16 (TEMPERING_CPU_FEATURES=avx2))"
    assert auto_reason("fp32") == ""
    model = tiny_llama(vocab=len(smol_tokenizer), seed=3).eval()
    greedy = SamplingParams(temperature=0, max_new_tokens=8)
    prompts = [smol_tokenizer.encode("a b c"), smol_tokenizer.encode("hello there")]
    auto = HFEngine(model, smol_tokenizer, precision="auto")
    fp32 = HFEngine(model, smol_tokenizer, precision="fp32")
    assert auto.precision == "fp32"
    assert [g[0].token_ids for g in auto.generate(prompts, greedy)] == [
        g[0].token_ids for g in fp32.generate(prompts, greedy)
    ]


def test_vnni_refused_gives_7_bit_activations_and_the_dynamic_int8_models_own_logits(cpu_mask):
    """Without VNNI fbgemm's int16 pair sums could overflow at 8 bits: the step takes 7-bit
    activations (reduce_range), which is what the model's own dynamic Linears compute."""
    from tempering.models.llama_decode import DynamicInt8Kernel, LlamaDecoder
    from tempering.models.quantize import quantize_int8

    cpu_mask("avx2")
    q = quantize_int8(tiny_llama(vocab=96, seed=1).eval(), method="dynamic")
    decoder = LlamaDecoder(q, 16)
    assert isinstance(decoder.head, DynamicInt8Kernel) and decoder.head.reduce_range
    ids = [1, 17, 40, 5]
    with torch.no_grad():
        ref = q(torch.tensor([ids[:1]])).logits[0, -1]
    keys = [torch.zeros(1, 2, 16, 8) for _ in range(2)]
    values = [torch.zeros(1, 2, 16, 8) for _ in range(2)]
    got = decoder.step(torch.tensor(ids[:1]), 0, keys, values)[0]
    assert torch.allclose(got, ref, atol=1e-5)


def test_the_vnni_probe_sees_int16_saturation():
    """The probe's inputs overflow int16 pair sums: 7-bit activations (what a host without VNNI
    must use) stay exact, and 8 bits agree only where the sums are int32."""
    x = torch.full((1, 64), 1.0)
    scale = torch.full((4,), 1.0 / 127)
    w = torch.quantize_per_channel(torch.ones(4, 64), scale, torch.zeros(4, dtype=torch.long), 0, torch.qint8)
    packed = torch.ops.quantized.linear_prepack(w, None)
    assert torch.allclose(torch.ops.quantized.linear_dynamic(x, packed, True), torch.full((1, 4), 64.0), atol=0.5)
    if {"avx512_vnni", "avx_vnni"} & (cpu_features._proc_flags() or set()):  # the host's own flags, unmasked
        eight_bit = torch.ops.quantized.linear_dynamic(x, packed, False)
        assert torch.allclose(eight_bit, torch.full((1, 4), 64.0), atol=0.5)
        assert cpu_features.PATHS["vnni_int8"].probe() is None


def test_int8_weight_mm_refused_dequantises_and_gives_the_kernels_numbers(monkeypatch):
    from tempering.models.quantize import Int8WeightLinear

    torch.manual_seed(0)
    layer = Int8WeightLinear(torch.nn.Linear(32, 16, bias=True))
    x = torch.randn(3, 32)
    kernel = layer(x)
    monkeypatch.setitem(
        cpu_features.PATHS,
        "int8_weight_mm",
        CpuPath((), lambda: "RuntimeError: _weight_int8pack_mm not here", "dequantise"),
    )
    cpu_features.clear()
    fallback = layer(x)
    assert not supports("int8_weight_mm")
    assert torch.allclose(fallback, kernel, rtol=2e-2, atol=2e-2)  # bf16 products, another summation order
    cpu_features.clear()
