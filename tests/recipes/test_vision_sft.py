"""The two-stage vision recipe on a tiny assembled VLM: each stage trains what it says and nothing
else, a bad image row is quarantined, and the model learns to see (held-out accuracy rises)."""

import json
from pathlib import Path

import torch
from PIL import Image

from tempering.config import SamplingParams, TrainSettings, VisionSFTConfig
from tempering.data.batches import SFTBatches
from tempering.data.images import data_url
from tempering.data.vision_render import render_vision_example
from tempering.data.vision_tasks import sft_rows, vision_tasks
from tempering.models.vlm import load_vlm, part_of, save_vlm, trainable_parts
from tempering.objectives.sft import SFTObjective
from tempering.recipes.vision import run_vision_sft
from tempering.rollout.engine import HFEngine
from tempering.train.trainer import Trainer
from tests.conftest import tiny_vlm

ROOT = Path(__file__).resolve().parents[2]


def stage(tmp_path, model, name, parts, lora=None, steps=2):
    cfg = {
        "model": str(model),
        "parts": parts,
        "lora": lora,
        "out": str(tmp_path / "runs"),
        "name": name,
        "data": {"train": [str(tmp_path / "train.jsonl")], "packing": False, "max_length": 256},
        "train": {"steps": steps, "batch_size": 4, "precision": "fp32", "optim": {"lr": 1e-2}},
    }
    return run_vision_sft(VisionSFTConfig.model_validate(cfg))


def weights(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def assert_changed_only(before, after, parts):
    changed = {n for n, w in before.items() if not torch.equal(w, after[n])}
    assert {part_of(n) for n in changed} == parts, sorted(changed)[:5]


def test_two_stages_train_what_they_name_and_quarantine_bad_images(tmp_path):
    model, processor = tiny_vlm()
    base = save_vlm(model, processor, tmp_path / "vlm")
    rows = sft_rows(vision_tasks("colour_shape", 8, seed=0, size=32))
    bad = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "nope.png"}}]},
                        {"role": "assistant", "content": "red"}]}  # fmt: skip
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [*rows[:3], bad, *rows[3:]]))

    one = stage(tmp_path, base, "align", ["vision", "projector"])
    assert one["trainable_parameters"]["language"] == 0 and one["data"]["quarantined"] == 1
    (quarantined,) = [json.loads(line) for line in (tmp_path / "runs" / "align" / "quarantine.jsonl").open()]
    assert (quarantined["location"], quarantined["reason"]) == (
        "line 4",
        f"message 0: content part 0: image file not found: {tmp_path / 'nope.png'}",
    )
    aligned = weights(load_vlm(one["final"])[0])
    assert_changed_only(weights(model), aligned, {"vision", "projector"})

    two = stage(tmp_path, one["final"], "tune", ["projector"], lora={"r": 4, "alpha": 8})
    counts = two["trainable_parameters"]
    assert counts["vision"] == 0 and counts["projector"] > 0 and counts["language"] > 0  # LoRA only there
    tuned = load_vlm(two["final"])[0].merge_and_unload()
    assert_changed_only(aligned, weights(tuned), {"projector", "language"})
    assert all("vision" not in n for n, _ in load_vlm(two["final"])[0].named_parameters() if "lora_" in n)


def colour_accuracy(model, processor, tasks):
    engine = HFEngine(model, processor.tokenizer, "fp32", processor=processor)
    out = engine.generate(
        [engine.chat_prompt(t.chat()) for t in tasks], SamplingParams(max_new_tokens=4, temperature=0)
    )
    return sum(o[0].text.split()[:1] == t.verifier["answer"].split()[:1] for t, o in zip(tasks, out)) / len(tasks)


def test_a_tiny_vlm_learns_to_name_colours_it_sees(tmp_path):
    torch.manual_seed(0)
    model, processor = tiny_vlm(image_size=32, patch_size=8)
    train = [
        render_vision_example(processor, r["messages"]) for r in sft_rows(vision_tasks("colour_shape", 128, 0, size=32))
    ]
    heldout = vision_tasks("colour_shape", 30, 0, "heldout", size=32)
    before = colour_accuracy(model, processor, heldout)
    trainable_parts(model, {"vision", "projector", "language"})
    settings = TrainSettings.model_validate(
        {"steps": 80, "batch_size": 16, "precision": "fp32", "optim": {"lr": 5e-3, "schedule": "constant"}}
    )
    batches = SFTBatches(train, 16, 256, processor.tokenizer.pad_token_id, False, 0)
    Trainer(model, SFTObjective(), batches, settings, tmp_path / "run").fit()
    after = colour_accuracy(model, processor, heldout)
    assert before == 0.0 and after >= 0.4, (before, after)  # chance: 1 in 6 colours


def test_image_prompts_sample_through_the_engine_with_their_pixels():
    model, processor = tiny_vlm()
    engine = HFEngine(model, processor.tokenizer, "fp32", processor=processor)
    msgs = [[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_url(Image.new("RGB", (32, 32), c))}},
                                          {"type": "text", "text": "colour?"}]}] for c in ((255, 0, 0), (0, 0, 255))]  # fmt: skip
    prompts = [engine.chat_prompt(m) for m in msgs]
    assert prompts[0].pixels["pixel_values"].shape == (1, 3, 32, 32)
    together = engine.generate(prompts, SamplingParams(max_new_tokens=3, temperature=0, top_logprobs=1))
    alone = [engine.generate([p], SamplingParams(max_new_tokens=3, temperature=0, top_logprobs=1))[0] for p in prompts]
    for t, a in zip(together, alone):
        assert t[0].token_ids == a[0].token_ids
        torch.testing.assert_close(torch.tensor(t[0].logprobs), torch.tensor(a[0].logprobs), atol=1e-4, rtol=0)
    assert together[0][0].top_logprobs != together[1][0].top_logprobs  # the picture changes the answer


def test_the_shipped_vision_configs_load_and_bad_keys_are_refused(tmp_path):
    import pytest

    from tempering.config import ConfigError, load_config

    for name in ("vision_projector.yaml", "vision_lora.yaml"):
        cfg = load_config(VisionSFTConfig, ROOT / "examples" / name)
        assert all(
            p.endswith(".jsonl") and (ROOT / "examples" / "data").joinpath(p.rsplit("/", 1)[-1]).is_file()
            for p in cfg.data.train
        )
    base = {"model": "m", "data": {"train": ["t.jsonl"], "packing": False}, "train": {"steps": 1}}
    for change, message in (
        ({"data": {"train": ["t.jsonl"]}}, "examples with images are padded, not packed"),
        ({"parts": ["language"], "lora": {"r": 4}}, "trains the language model in full"),
        ({"parts": ["eyes"]}, "parts.0"),
    ):
        with pytest.raises((ConfigError, ValueError), match=message):
            VisionSFTConfig.model_validate({**base, **change})
