"""The SFT throughput bench (bench/throughput/sft.py): the batch that holds a step's tokens, the
headline over the sides that ran, and a side that needs what this machine lacks is recorded as
skipped, not lost."""

from pathlib import Path

import pytest
import torch

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[1]


def test_tokens_per_step_sets_the_batch_at_the_mean_conversation_length():
    sft = load_script("bench/throughput/sft.py", "sft_bench")
    # mean length (100 + 300) / 2 = 200 tokens: 1,000 tokens are 5 conversations, 32,768 are 163.84 -> 164
    assert sft.batch_for_tokens([100, 300], 1000) == 5
    assert sft.batch_for_tokens([100, 300], 32768) == 164
    assert sft.batch_for_tokens([500], 10) == 1  # never an empty step


def test_the_headline_compares_each_frameworks_fastest_side_that_ran():
    sft = load_script("bench/throughput/sft.py", "sft_bench")
    runs = {n: {"real_tokens_per_s": v} for n, v in (("tempering", 90), ("tempering_ckpt", 120), ("trl", 40))}
    runs["trl_flex"] = {"real_tokens_per_s": 60}
    found = sft.headline(runs)
    assert found["best_tempering_setting"] == "tempering_ckpt" and found["best_trl_setting"] == "trl_flex"
    assert found["ratio_real_tokens_per_s"] == 2.0 and found["ratios_by_setting"] == {
        "tempering": 1.5,
        "tempering_ckpt": 2.0,
    }
    assert sft.headline({"tempering": {"real_tokens_per_s": 1}}) == {}  # no TRL side ran: no ratio


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU case: these sides need a GPU")
def test_a_side_that_needs_a_gpu_is_recorded_as_skipped_without_starting():
    sft = load_script("bench/throughput/sft.py", "sft_bench")
    assert sft.run_side("trl_liger", None, 8) == {"skipped": "needs a CUDA GPU"}
    assert sft.missing_need("trl") is None and sft.missing_need("tempering_ckpt") is None
    # every side has its settings; checkpointing is the one thing tempering_ckpt changes
    assert set(sft.SIDES) == set(sft.TEMPERING_SIDE_SETTINGS) | set(sft.TRL_SIDE_SETTINGS)
    assert sft.side_settings("tempering_ckpt") == {"gradient_checkpointing": True}
    assert sft.side_settings("trl_liger") == {"use_liger_kernel": True}


def test_mfu_is_against_the_peak_of_the_precision_used_and_bf16_only_where_native():
    sft = load_script("bench/throughput/sft.py", "sft_bench")
    # 100 tokens/s at 1e9 model FLOPs a token; the head 6e8 of them runs on half the positions:
    # executed 1e9 - 6e8 * 0.5 = 7e8 a token.
    side = {"real_tokens_per_s": 100.0, "head_token_fraction": 0.5}
    sft.add_mfu(side, 1e9, 6e8, used_peak=2e11, bf16_peak=None)  # an AVX2 host: fp32, no bf16 peak
    assert side["mfu_vs_peak_of_precision_used"] == pytest.approx(0.5)
    assert side["mfu_executed_vs_peak_of_precision_used"] == pytest.approx(0.35)
    assert side["mfu_vs_bf16_peak"] is None and side["mfu_executed_vs_bf16_peak"] is None
    native = {"real_tokens_per_s": 100.0}  # TRL: the head on every position
    sft.add_mfu(native, 1e9, 6e8, used_peak=4e11, bf16_peak=4e11)
    assert native["mfu_executed_vs_bf16_peak"] == pytest.approx(0.25) == native["mfu_vs_bf16_peak"]
