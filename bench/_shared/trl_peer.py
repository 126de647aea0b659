"""TRL `SFTTrainer` as a throughput peer for Tempering's SFT benchmark (the GPU when there is one, else the CPU).

`run_trl_sft(model_dir, conversations, max_length, batch_size, steps, warmup_steps=2, settings=None)`
trains TRL's `SFTTrainer` (full parameters, learning rate 1e-5) on conversational data and returns::

    {"real_tokens": int,         # non-pad input tokens in the timed steps
     "seconds": float,           # wall time of the timed steps (warm-up steps excluded)
     "real_tokens_per_s": float,
     "steps": int, "warmup_steps": int,
     "settings": {...},          # the settings actually used (after resolving "auto")
     "loss": "full" | "assistant_only",
     "peak_rss_mb": float,       # process high-water RSS (ru_maxrss) at the end of the run
     ...}

How the measurement works
* Real tokens are counted in `training_step` from the batches the trainer actually consumed:
  `attention_mask.sum()` for padded batches; for padding-free batches (TRL flattens the batch into one
  row with `position_ids`, no attention mask, and no padding since `pad_to_multiple_of` is None on CPU)
  it is `input_ids.numel()`. Only optimizer steps after the `warmup_steps` first ones are counted.
* Time is wall clock from `on_step_end` of the last warm-up step to `on_step_end` of the last timed
  step, so it includes data loading/collation, forward, backward, optimizer step, and TRL's own
  per-step metrics -- everything the trainer does per step. Tokenisation/dataset preparation (done
  in `SFTTrainer.__init__`) and model loading are not timed.
* Gradient accumulation is 1: one step = one batch of `batch_size` rows.

Settings (override any with `settings={...}`; unknown keys are passed straight to `trl.SFTConfig`)
* "precision": "auto" | "fp32" | "bf16" | "bf16_weights".
  "bf16" = fp32 weights + `SFTConfig(bf16=True)` (accelerate CPU autocast to bf16, fp32 master weights).
  "bf16_weights" = model loaded in bf16 (pure bf16 incl. AdamW states -- lossy at lr 1e-5, for reference).
  "auto" = Tempering's `resolve_precision("auto")`: "bf16" on a GPU with bf16, or if the CPU has native
  bf16 matmul (AMX-BF16 or AVX512-BF16 in /proc/cpuinfo), else
  "fp32": without them PyTorch's bf16 GEMM falls back to slow paths (measured ~7x slower than fp32 on
  an AVX2-only EPYC).
* "packing", "packing_strategy", "padding_free", "group_by_length" (-> `train_sampling_strategy`),
  "gradient_checkpointing", "dataloader_num_workers", "dataloader_pin_memory", "optim", ...
* "assistant_only_loss": TRL 1.16 needs `{% generation %}` markers for this, and SmolLM2's template has
  none; TRL's `get_training_chat_template` does not know SmolLM2's template and raises ValueError. With
  `assistant_only_loss=True` we therefore install an equivalent template with the markers added (renders
  byte-identically, checked at run time). Default: False (TRL's default for conversational data: loss
  on the full sequence).

The defaults in `DEFAULT_SETTINGS` are the fastest combination measured on the benchmark CPU at
batch 8 / max_length 512 (see `SWEEP_RESULTS` below for the numbers).
"""

from __future__ import annotations

import gc
import os
import resource
import tempfile
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch

from tempering.models.precision import cpu_has_native_bf16, resolve_precision

__all__ = ["run_trl_sft", "DEFAULT_SETTINGS", "cpu_has_native_bf16", "SMOLLM2_TRAINING_TEMPLATE"]

# Fastest measured combination (see module docstring / SWEEP_RESULTS).
DEFAULT_SETTINGS: dict[str, Any] = {
    "precision": "auto",
    "packing": False,
    "padding_free": True,
    "group_by_length": False,
    "gradient_checkpointing": False,
    "dataloader_num_workers": 0,
    "dataloader_pin_memory": False,
    "assistant_only_loss": False,
}

# Measured real tokens/s, batch 8, max_length 512, 64 bench conversations, 2 torch threads, on an AVX2-only
# AMD EPYC (no AMX / AVX512-BF16) while another process was using ~1 of the 2 cores, so absolute numbers
# are noisy (1-2 timed steps after 1 warm-up step each); the ranking is what matters.
SWEEP_RESULTS: dict[str, float] = {
    "fp32, padding_free (no packing), random order": 20.7,  # 2 steps, 3495 real = 3495 processed tokens
    "fp32, padded, group_by_length": 18.5,  # 1 step, 1240 real / 1672 padded
    "fp32, packing bfd (=> padding-free), 512-token rows": 17.4,  # 1 step, 3882 tokens, peak RSS 14.8 GB
    "fp32, padded, random order": 13.1,  # 2 steps, 3495 real / 6072 padded
    # bf16 autocast: not completed within budget; CPU autocast bf16 linear measured ~7 GFLOP/s vs ~51 fp32
    # on this CPU, and a 2048^2 bf16 matmul 0.26 GFLOP/s vs ~122 fp32: bf16 has no fast kernel here.
}

# SmolLM2's chat template with `{% generation %}` markers around each assistant turn (content + <|im_end|>).
SMOLLM2_TRAINING_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}"
    "{% if message['role'] == 'assistant' %}"
    "{{ '<|im_start|>assistant\n' }}{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\n' }}"
    "{% else %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _resolve_settings(settings: dict[str, Any] | None) -> dict[str, Any]:
    s = dict(DEFAULT_SETTINGS)
    s.update(settings or {})
    if s["precision"] == "auto":
        s["precision"] = resolve_precision("auto")  # bf16 on a GPU with bf16 or a CPU with native bf16
    if s["precision"] not in ("fp32", "bf16", "bf16_weights"):
        raise ValueError(f"unknown precision {s['precision']!r}")
    return s


def run_trl_sft(
    model_dir: str,
    conversations: list[dict],
    max_length: int,
    batch_size: int,
    steps: int,
    warmup_steps: int = 2,
    settings: dict[str, Any] | None = None,
) -> dict:
    """Train TRL's SFTTrainer for `warmup_steps + steps` optimizer steps and time the last `steps`."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    s = _resolve_settings(settings)
    # attn_implementation goes to the model's loading, not to SFTConfig
    extra = {k: v for k, v in s.items() if k not in DEFAULT_SETTINGS and k not in ("seed", "attn_implementation")}
    precision = s["precision"]

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if s["assistant_only_loss"]:
        from trl.chat_template_utils import has_generation_markers

        if not has_generation_markers(tokenizer.chat_template):
            probe = conversations[0]["messages"]
            before = tokenizer.apply_chat_template(probe, tokenize=False)
            after = tokenizer.apply_chat_template(probe, tokenize=False, chat_template=SMOLLM2_TRAINING_TEMPLATE)
            if before != after:
                raise ValueError("model's chat template is not SmolLM2's; cannot add {% generation %} markers")
            tokenizer.chat_template = SMOLLM2_TRAINING_TEMPLATE

    dtype = torch.bfloat16 if precision == "bf16_weights" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=dtype, attn_implementation=s.get("attn_implementation", "sdpa")
    )

    padding_free = bool(s["padding_free"])
    packing = bool(s["packing"])
    cfg_max_length = max_length
    if padding_free and not packing:
        # TRL refuses padding_free without packing unless max_length is None (it doesn't truncate then).
        # We truncate the rendered conversations ourselves below instead.
        cfg_max_length = None

    out_dir = tempfile.mkdtemp(prefix="trl_peer_")
    cfg_kwargs = dict(
        output_dir=out_dir,
        max_steps=warmup_steps + steps,
        per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=1,
        learning_rate=1e-5,
        lr_scheduler_type="constant",
        warmup_steps=0,
        max_length=cfg_max_length,
        packing=packing,
        padding_free=padding_free,
        assistant_only_loss=bool(s["assistant_only_loss"]),
        bf16=precision in ("bf16", "bf16_weights"),
        fp16=False,
        use_cpu=not torch.cuda.is_available(),
        gradient_checkpointing=bool(s["gradient_checkpointing"]),
        train_sampling_strategy="group_by_length" if s["group_by_length"] else "random",
        dataloader_num_workers=int(s["dataloader_num_workers"]),
        dataloader_pin_memory=bool(s["dataloader_pin_memory"]),
        logging_steps=10_000,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=int(s.get("seed", 0)),
    )
    cfg_kwargs.update(extra)
    args = SFTConfig(**cfg_kwargs)

    data = conversations
    if cfg_max_length is None and max_length is not None:
        # padding-free without packing: keep sequences within max_length by dropping trailing turns, and
        # as a last resort let TRL's own data through (rare: bench data is <= ~505 tokens).
        data = [_fit_conversation(tokenizer, c, max_length) for c in conversations]
    train_ds = Dataset.from_list([{"messages": c["messages"]} for c in data])

    counter = {"real_tokens": 0, "batches": 0, "padded_tokens": 0}
    clock: dict[str, float] = {}

    class _Timer(TrainerCallback):
        def on_step_end(self, args_, state, control, **kw):
            if state.global_step == warmup_steps:
                clock["t0"] = time.perf_counter()
            if state.global_step == warmup_steps + steps:
                clock["t1"] = time.perf_counter()

    class _CountingSFTTrainer(SFTTrainer):
        def training_step(self, model_, inputs, *a, **kw):
            if self.state.global_step >= warmup_steps:
                am = inputs.get("attention_mask")
                ids = inputs["input_ids"]
                counter["real_tokens"] += int(am.sum()) if am is not None else int(ids.numel())
                counter["padded_tokens"] += int(ids.numel())
                counter["batches"] += 1
            return super().training_step(model_, inputs, *a, **kw)

    trainer = _CountingSFTTrainer(
        model=model, args=args, train_dataset=train_ds, processing_class=tokenizer, callbacks=[_Timer()]
    )
    if warmup_steps == 0:
        clock["t0"] = time.perf_counter()
    trainer.train()
    seconds = clock["t1"] - clock["t0"]
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0

    used = {k: v for k, v in s.items()}
    used.update(
        {
            "trl_sft_config": {
                k: getattr(args, k)
                for k in (
                    "bf16",
                    "packing",
                    "packing_strategy",
                    "padding_free",
                    "max_length",
                    "train_sampling_strategy",
                    "gradient_checkpointing",
                    "dataloader_num_workers",
                    "dataloader_pin_memory",
                    "optim",
                    "learning_rate",
                    "lr_scheduler_type",
                    "assistant_only_loss",
                    "completion_only_loss",
                    "loss_type",
                    "pad_to_multiple_of",
                    "torch_compile",
                )
            },
            "model_dtype": str(dtype).replace("torch.", ""),
            "attn_implementation": model.config._attn_implementation,
            "torch_threads": torch.get_num_threads(),
            "cpu_native_bf16": cpu_has_native_bf16(),
            "device": "cuda" if torch.cuda.is_available() else "cpu",
            "effective_padding_free": bool(trainer.padding_free),
        }
    )
    result = {
        "real_tokens": counter["real_tokens"],
        "padded_tokens": counter["padded_tokens"],
        "seconds": seconds,
        "real_tokens_per_s": counter["real_tokens"] / seconds if seconds > 0 else float("nan"),
        "steps": steps,
        "warmup_steps": warmup_steps,
        "batch_size": batch_size,
        "max_length": max_length,
        "loss": "assistant_only" if s["assistant_only_loss"] else "full",
        "settings": used,
        "peak_rss_mb": peak_rss_mb,
    }
    del trainer, model
    gc.collect()
    return result


def _fit_conversation(tokenizer, conv: dict, max_length: int) -> dict:
    msgs = list(conv["messages"])
    while True:
        n = len(tokenizer.apply_chat_template(msgs, tokenize=True, return_dict=True)["input_ids"])
        n_assistant = sum(m["role"] == "assistant" for m in msgs)
        if n <= max_length or n_assistant <= 1:
            return {"messages": msgs}
        # drop the last user/assistant exchange
        msgs = msgs[:-2]


if __name__ == "__main__":
    import json
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from sft_data import make_bench_conversations

    model_dir = os.environ.get("SMOL_DIR", "/tmp/smol")
    overrides = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    steps = int(os.environ.get("TRL_PEER_STEPS", "6"))
    warm = int(os.environ.get("TRL_PEER_WARMUP", "2"))
    res = run_trl_sft(
        model_dir,
        make_bench_conversations(64, seed=0),
        max_length=512,
        batch_size=8,
        steps=steps,
        warmup_steps=warm,
        settings=overrides,
    )
    print(json.dumps(res, indent=1, default=str))
