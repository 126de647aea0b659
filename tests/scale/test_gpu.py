"""GPU checks of the scale-out path; they skip here, naming what they need.

On a GPU machine: GRPO on the default model with its rollout engine as a Ray replica on the
GPU (`scale.engine_gpus`) runs a few steps and logs `logprob_mismatch` every step; with vLLM
installed (`pip install -e '.[vllm]'`, GPU hosts only), GRPO with vLLM rollouts
(`engine: {kind: vllm}`, rollout/vllm_engine.py, weights synced from the trainer every step)
does the same.
"""

import importlib.util
import json

import pytest
import yaml

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (and Ray); none on this machine")


@needs_gpu
@pytest.mark.gpu(covers=["default-device", "trainer-cuda"])
@pytest.mark.slow
def test_grpo_with_a_gpu_engine_replica_logs_the_mismatch(tmp_path):
    pytest.importorskip("ray", reason="the engine replicas run in Ray actors; Ray is not installed")
    from tempering.config import GRPOConfig, load_config
    from tempering.recipes.grpo import run_grpo

    cfg = {
        "model": "smollm2-135m-instruct",
        "lora": {"r": 8, "alpha": 16},
        "heldout": None,
        "name": "gpu",
        "tasks": {"source": "builtin:arithmetic", "ops": "+", "n": 64},
        "grpo": {"prompts_per_step": 4, "group_size": 4, "max_new_tokens": 32},
        "train": {"steps": 3, "precision": "auto"},
        "out": str(tmp_path / "runs"),
        "scale": {"reward_workers": 2, "engine_replicas": 1, "engine_gpus": 0.5, "num_cpus": 4},
    }
    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump(cfg))
    run_grpo(load_config(GRPOConfig, path))
    steps = [
        r
        for r in map(json.loads, (tmp_path / "runs" / "gpu" / "metrics.jsonl").read_text().splitlines())
        if "logprob_mismatch" in r
    ]
    assert len(steps) == 3 and all(r["logprob_mismatch"] < 0.05 and r["sync_mb"] > 0 for r in steps)


needs_vllm = pytest.mark.skipif(
    not torch.cuda.is_available() or importlib.util.find_spec("vllm") is None,
    reason="needs a CUDA GPU and vLLM (pip install -e '.[vllm]' on a GPU host); neither is on this machine",
)


@needs_vllm
@pytest.mark.gpu(covers=["vllm"])
@pytest.mark.slow
def test_grpo_with_vllm_rollouts_logs_the_mismatch(tmp_path):
    from tempering.config import GRPOConfig, load_config
    from tempering.recipes.grpo import run_grpo

    cfg = {
        "model": "smollm2-135m-instruct",
        "lora": {"r": 8, "alpha": 16},
        "heldout": None,
        "name": "vllm",
        "tasks": {"source": "builtin:arithmetic", "ops": "+", "n": 64},
        "grpo": {"prompts_per_step": 4, "group_size": 4, "max_new_tokens": 32},
        "engine": {"kind": "vllm"},
        "train": {"steps": 3, "precision": "auto"},
        "out": str(tmp_path / "runs"),
    }
    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump(cfg))
    run_grpo(load_config(GRPOConfig, path))
    steps = [
        r
        for r in map(json.loads, (tmp_path / "runs" / "vllm" / "metrics.jsonl").read_text().splitlines())
        if "logprob_mismatch" in r
    ]
    assert len(steps) == 3 and all(r["logprob_mismatch"] < 0.1 for r in steps)
