"""GRPO with image prompts on a tiny VLM built here: the pixels reach the loss, the trainer's
log-probs replay the rollout's, a short run trains the adapter, and what cannot work is refused."""

import json
import math

import pytest
import torch
import yaml
from PIL import Image
from typer.testing import CliRunner

from tempering.cli import app
from tempering.config import SamplingParams
from tempering.data.images import data_url
from tempering.models.logprobs import grouped_logprobs
from tempering.models.lora import apply_lora
from tempering.models.vlm import load_vlm, save_vlm
from tempering.recipes.vision import LANGUAGE_LINEAR
from tempering.rollout.engine import HFEngine
from tempering.rollout.grpo_batches import GroupRows, grpo_tensors
from tempering.rollout.replay import FP32_EPSILON, replay
from tempering.types import Reward, Trajectory
from tests.conftest import tiny_vlm


def picture(colour):
    url = data_url(Image.new("RGB", (32, 32), colour))
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "colour?"}]}]  # fmt: skip


@pytest.fixture(scope="module")
def vlm():
    model, processor = tiny_vlm()
    from tempering.config import LoraSettings

    lora = LoraSettings(r=4, alpha=8, target_modules=LANGUAGE_LINEAR)
    model = apply_lora(model, lora, "tiny")
    with torch.no_grad():  # a trained adapter: the engine samples merged, the trainer unmerged
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    return model.eval(), processor


def test_the_trainer_replays_image_rollouts_within_the_fp32_contract(vlm):
    model, processor = vlm
    engine = HFEngine(model, processor.tokenizer, "fp32", processor=processor)
    prompts = [engine.chat_prompt(picture(c)) for c in ((255, 0, 0), (0, 0, 255), (0, 200, 0))]
    figures = replay(engine, model, prompts, SamplingParams(n=3, max_new_tokens=6, seed=0, temperature=1.0), "fp32")
    assert figures["tokens"] >= 9 and figures["max"] <= FP32_EPSILON, figures


def test_pixels_reach_the_grpo_batch_and_change_the_log_probs(vlm):
    model, processor = vlm
    engine = HFEngine(model, processor.tokenizer, "fp32", processor=processor)
    red, blue = (engine.chat_prompt(picture(c)) for c in ((255, 0, 0), (0, 0, 255)))
    assert list(red) == list(blue)  # the same tokens: only the pixels differ
    (sampled,) = engine.generate([red], SamplingParams(n=2, max_new_tokens=5, seed=0, temperature=1.0))

    def rows(prompt):
        trajs = [
            Trajectory(
                task_id="t",
                messages=[{"role": "assistant", "content": c.text}],
                token_ids=list(prompt) + c.token_ids,
                loss_mask=[0] * len(prompt) + [1] * len(c.token_ids),
                logprobs=[0.0] * len(prompt) + c.logprobs,
                prompt_length=len(prompt),
                rewards=[Reward(value=1.0)],
            )
            for c in sampled
        ]
        masks = [[1] * len(c.token_ids) for c in sampled]
        return GroupRows(list(prompt), trajs, masks, masks, torch.zeros(2), prompt.pixels)

    batch = grpo_tensors([rows(red), rows(blue)])
    assert batch.pixel_values is not None and batch.pixel_values.shape[0] == 2  # one image per group, in order
    torch.testing.assert_close(batch.pixel_values, torch.cat([red.pixels["pixel_values"], blue.pixels["pixel_values"]]))
    args = (batch.prompt_ids, batch.prompt_mask, batch.completion_ids, batch.completion_mask)
    with torch.no_grad():
        logp, _ = grouped_logprobs(model, *args, pixels=batch.pixels())
    seen = batch.completion_mask.bool()
    n = len(sampled)
    # the red group's rows are what the engine sampled, with the engine's log-probs; the blue group's
    # identical tokens get other log-probs: the picture reached the loss
    assert (logp[:n] - batch.engine_logprobs[:n])[seen[:n]].abs().max() <= FP32_EPSILON
    assert (logp[:n] - logp[n:])[seen[:n]].abs().max() > 1e-3


def _config(tmp_path, model, **change):
    cfg = {
        "model": str(model),
        "lora": {"r": 4, "alpha": 8},
        "tasks": {"source": "vision:colour_shape", "n": 16, "image_size": 32},
        "heldout": {
            "tasks": {"source": "vision:colour_shape", "n": 4, "split": "heldout", "image_size": 32},
            "max_new_tokens": 3,
        },
        # a reward the random model earns sometimes, so groups are not tied: a capital letter first
        "reward": [
            {"name": "correct", "weight": 1.0, "verifier": {"type": "exact"}},
            {
                "name": "capital",
                "weight": 0.5,
                "verifier": {"type": "regex", "pattern": "^\\s*[A-Z]", "on": "completion"},
            },
        ],  # fmt: skip
        "grpo": {
            "prompts_per_step": 2,
            "group_size": 4,
            "max_new_tokens": 4,
            "max_refills": 1,
            "beta": 0.05,
            "truncation": "keep",
        },
        "engine": {"kind": "hf"},
        "train": {"steps": 2, "eval_every": 2, "precision": "fp32", "optim": {"lr": 5e-2}},
        "out": str(tmp_path / "runs"),
        "name": "vg",
    }
    cfg.update(change)
    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_grpo_trains_a_tiny_vlm_on_image_tasks(tmp_path):
    model, processor = tiny_vlm()
    base = save_vlm(model, processor, tmp_path / "vlm")
    res = CliRunner().invoke(app, ["grpo", str(_config(tmp_path, base))])
    assert res.exit_code == 0, res.output
    run = tmp_path / "runs" / "vg"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 2 and [h["step"] for h in summary["heldout_history"]] == [0, 2]
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in steps if "reward_mean" in r]
    assert all(math.isfinite(r["reward_mean"]) and math.isfinite(r["loss"]) for r in steps)
    assert min(r["zero_variance_share"] for r in steps) < 1 and "kl" in steps[-1]  # some groups not tied
    assert max(r["logprob_mismatch"] for r in steps) < 1e-3  # engine (merged LoRA) and trainer agree
    tuned, _ = load_vlm(summary["final"])
    lora_b = [p for n, p in tuned.named_parameters() if "lora_B" in n]
    assert lora_b and any(p.abs().sum() > 0 for p in lora_b)  # the adapter (zero at the start) moved
    assert all("vision" not in n for n, _ in tuned.named_parameters() if "lora_" in n)
    assert (run / "heldout" / "step-000002" / "samples.jsonl").is_file()


@pytest.mark.parametrize(
    ("model", "change", "message"),
    [
        ("text", {}, "the prompts have images, and model"),
        ("vlm", {"lora": None}, "GRPO trains a vision-language model through LoRA"),
        ("vlm", {"train": {"steps": 1, "gradient_checkpointing": True}}, "train.gradient_checkpointing"),
        ("vlm", {"engine": {"kind": "vllm"}}, "engine.kind vllm takes no image prompts"),
    ],
)
def test_what_cannot_work_is_one_line_before_any_work(tmp_path, tiny_dir, model, change, message):
    if model == "vlm":
        m, processor = tiny_vlm()
        model_dir = save_vlm(m, processor, tmp_path / "vlm")
    else:
        model_dir = tiny_dir
    res = CliRunner().invoke(app, ["grpo", str(_config(tmp_path, model_dir, **change))])
    assert res.exit_code != 0 and message in res.output and "Traceback" not in res.output, res.output
    assert len([line for line in res.output.strip().splitlines() if line.strip()]) == 1, res.output
    assert not (tmp_path / "runs" / "vg").exists()  # refused before the run was recorded


def test_image_size_is_a_vision_source_key():
    from tempering.config import TaskSourceSettings

    with pytest.raises(ValueError, match="'image_size' is not a setting of task source 'builtin:arithmetic'"):
        TaskSourceSettings(source="builtin:arithmetic", image_size=32)


def test_the_shipped_vision_grpo_config_loads():
    from pathlib import Path

    from tempering.config import GRPOConfig, load_config

    cfg = load_config(GRPOConfig, Path(__file__).resolve().parents[2] / "examples" / "vision_grpo.yaml")
    assert (
        cfg.tasks.source == "vision:count"
        and cfg.tasks.options.model_dump()["image_size"] == 48
        and cfg.engine.kind == "hf"
    )
