"""tinker-cookbook's supervised recipe against `temper tinker serve` on loopback, default model.

Starts `temper tinker serve` (a subprocess on a free 127.0.0.1 port, its own state dir and
key), then runs the cookbook's own supervised training loop, `tinker_cookbook.supervised.train
.main`, unmodified, with the config `recipes/sl_basic.py` builds except for what cannot run
offline here:

  * the model: the default model's converted HF dir (what `smollm2-135m-instruct` resolves to)
    is `model_name`, so the cookbook's `get_tokenizer` loads it without a hub;
  * the renderer: `qwen3_instruct` (ChatML, SmolLM2's own chat format), set explicitly:
    sl_basic looks it up with `model_info.get_recommended_renderer_name`, which knows only the
    cookbook's hosted models and raises for any other;
  * the data: the cookbook's own `example_data/conversations.jsonl` through its
    `FromConversationFileBuilder` (sl_basic's "swap in your own dataset" branch) instead of
    NoRobots, which is a hub download.

Then samples from the final sampler checkpoint with the official SDK, and writes the losses
(the recipe's `train_mean_nll` per step, from its own metrics.jsonl), steps, time and the
sample to `bench/results/tinker.json`.

    python bench/experiments/tinker_sl.py [--steps 6 --batch 4]   (2-core host: 13 s a step idle, minutes loaded)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _shared.paths import RESULTS, ROOT, cpu_name  # noqa: E402
from _shared.serving import free_port, start_tinker_server  # noqa: E402


def recipe_config(model_dir: str, url: str, log_path: Path, args: argparse.Namespace):
    """sl_basic's train.Config, with the offline substitutions of the module docstring."""
    from importlib.resources import files

    from tinker_cookbook.renderers import TrainOnWhat
    from tinker_cookbook.supervised import train
    from tinker_cookbook.supervised.data import FromConversationFileBuilder
    from tinker_cookbook.supervised.types import ChatDatasetBuilderCommonConfig

    common = ChatDatasetBuilderCommonConfig(
        model_name_for_tokenizer=model_dir,
        renderer_name=args.renderer,
        max_length=args.max_length,
        batch_size=args.batch,
        train_on_what=TrainOnWhat.ALL_ASSISTANT_MESSAGES,
    )
    data = str(files("tinker_cookbook") / "example_data" / "conversations.jsonl")
    return train.Config(
        log_path=str(log_path),
        recipe_name="recipe_sl_basic",
        model_name=model_dir,
        renderer_name=args.renderer,
        dataset_builder=FromConversationFileBuilder(common_config=common, file_path=data),
        learning_rate=args.lr,
        lr_schedule="linear",
        num_epochs=args.epochs,
        eval_every=8,
        save_every=0,
        lora_rank=args.rank,
        base_url=url,
        max_steps=args.steps,
    ), data


def sample_final(url: str, key: str, log_path: Path, model_dir: str, renderer_name: str) -> dict:
    """Greedy answer of the final sampler checkpoint to one of the training prompts."""
    import tinker
    from tinker_cookbook import renderers
    from tinker_cookbook.tokenizer_utils import get_tokenizer

    checkpoints = [json.loads(line) for line in (log_path / "checkpoints.jsonl").read_text().splitlines()]
    sampler_path = [c["sampler_path"] for c in checkpoints if c.get("sampler_path")][-1]
    client = tinker.ServiceClient(base_url=url, api_key=key).create_sampling_client(model_path=sampler_path).result()
    renderer = renderers.get_renderer(renderer_name, get_tokenizer(model_dir))
    question = "What is the capital of France?"
    prompt = renderer.build_generation_prompt([{"role": "user", "content": question}])
    params = tinker.SamplingParams(max_tokens=24, temperature=0.0, stop=renderer.get_stop_sequences())
    seq = client.sample(prompt, num_samples=1, sampling_params=params).result().sequences[0]
    message, _ = renderer.parse_response(seq.tokens)
    return {
        "checkpoint": sampler_path,
        "prompt": question,
        "answer": renderers.get_text_content(message),
        "tokens": len(seq.tokens),
        "mean_logprob": sum(seq.logprobs) / max(1, len(seq.logprobs)),
    }


def mean_nll(trainer, datums: list) -> float:
    """The recipe's train_mean_nll formula, sum(-logp * w) / sum(w), over one batched `forward`."""
    out = trainer.forward(datums, "cross_entropy").result()
    total = weight = 0.0
    for d, o in zip(datums, out.loss_fn_outputs):
        w, logprobs = d.loss_fn_inputs["weights"].tolist(), o["logprobs"].tolist()
        total -= sum(lp * x for lp, x in zip(logprobs, w))
        weight += sum(w)
    return total / weight


def before_after(url: str, key: str, config, state_path: str, steps: int) -> dict:
    """Mean NLL of the trained batches and of the next (never trained) batch under the base
    model (a fresh LoRA client: its adapters start at zero) and under the final state: the same
    datums, so the drop is the training's."""
    import tinker

    dataset, _ = config.dataset_builder()
    dataset.set_epoch(seed=0)  # the order the recipe's first epoch trains in
    trained = [d for i in range(steps) for d in dataset.get_batch(i)]
    held_out = list(dataset.get_batch(steps))
    service = tinker.ServiceClient(base_url=url, api_key=key)
    base = service.create_lora_training_client(base_model=config.model_name, rank=config.lora_rank).result()
    final = service.create_training_client_from_state(state_path).result()
    return {
        "trained_batches_nll": {"base": mean_nll(base, trained), "final": mean_nll(final, trained)},
        "next_batch_nll": {"base": mean_nll(base, held_out), "final": mean_nll(final, held_out)},
        "datums": {"trained": len(trained), "next_batch": len(held_out)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--lr", type=float, default=2e-4, help="sl_basic's learning rate")
    parser.add_argument("--rank", type=int, default=32, help="LoRA rank (the cookbook's default)")
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--renderer", default="qwen3_instruct")
    parser.add_argument("--out", type=Path, default=RESULTS / "tinker.json")
    args = parser.parse_args()

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT / "src")}
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TINKER_TELEMETRY="0")
    from tempering.models.load import resolve_model

    model_dir = resolve_model("smollm2-135m-instruct")
    work = Path(tempfile.mkdtemp(prefix="tinker_bench_"))
    port = free_port()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # a `timeout` still stops the server (finally)
    proc, key = start_tinker_server(work / "state", port, env)
    os.environ["TINKER_API_KEY"] = key
    url = f"http://127.0.0.1:{port}"
    try:
        from tinker_cookbook.supervised import train

        config, data = recipe_config(model_dir, url, work / "log", args)
        started = time.perf_counter()
        asyncio.run(train.main(config))
        seconds = time.perf_counter() - started
        rows = [json.loads(line) for line in (work / "log" / "metrics.jsonl").read_text().splitlines()]
        nll = [r["train_mean_nll"] for r in rows if "train_mean_nll" in r]
        sample = sample_final(url, key, work / "log", model_dir, args.renderer)
        state = [json.loads(line) for line in (work / "log" / "checkpoints.jsonl").read_text().splitlines()]
        nll_check = before_after(
            url, key, config, [c["state_path"] for c in state if c.get("state_path")][-1], len(nll)
        )
    finally:
        proc.terminate()
        proc.wait(30)
    result = {
        "what": "tinker-cookbook supervised.train.main (sl_basic's config) against temper tinker serve, loopback",
        "model": "smollm2-135m-instruct (LoRA)",
        "precision": "auto (server default)",
        "data": data,
        "settings": vars(args) | {"out": str(args.out)},
        "steps": len(nll),
        "train_mean_nll_first": nll[0],
        "train_mean_nll_last": nll[-1],
        "train_mean_nll": nll,
        "note": "train_mean_nll is each step's own batch (different batches); the before/after is the same datums",
        "before_after": nll_check,
        "seconds": round(seconds, 1),
        "seconds_per_step": round(seconds / max(1, len(nll)), 2),
        "sample": sample,
        "cpu": cpu_name(),
        "threads": os.cpu_count(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    other = json.loads(args.out.read_text()) if args.out.exists() else {}
    result |= {k: v for k, v in other.items() if k == "math_rl"}  # bench/experiments/tinker_math_rl.py's section
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "train_mean_nll"}, indent=1))


if __name__ == "__main__":
    main()
