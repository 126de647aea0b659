"""Memory levers of full fine-tuning: peak RSS and tokens/s of one SFT step, each lever alone and together.

Models: the default (SmolLM2-135M, full parameters) and the ~1.07B `llama-1b` shape of
`_shared/model_shapes.py` (Llama-3.2-1B's shape with the default vocabulary, random weights).
Levers: `ckpt` (`train.gradient_checkpointing`) and `8bit` (`train.optim.state_bits: 8`,
torchao AdamW8bit), as `none`, `ckpt`, `8bit`, `both`; and LoRA (r=16, every Linear) over the
float base (`lora`) or the int8 base (`qlora`, `lora.base: int8`).

Each (model, levers) runs in its own child process, one at a time, under a hard address-space
cap (`RLIMIT_AS`, as `prlimit --as` sets it): a child that needs more fails at its allocation
instead of growing into the memory of the other work on the machine. The child builds the model
and the optimizer (the optimizer states are allocated first, by a zero-learning-rate step on zero
gradients, which also compiles torchao's update), drops the kernel's peak-RSS mark
(/proc/self/clear_refs), runs one SFT step (forward, backward, optimizer step) on one sequence of
`--length` random tokens (loss on the second half, fp32), and reports that step's peak RSS
(VmHWM), the RSS before it, the exact bytes of parameters and optimizer states, and tokens/s.
The ~1B children are skipped (with the reason recorded) when `MemAvailable` is below their cap
(plus 0.5 GB), so a capped child can never push the machine's other work out of memory.

    python bench/throughput/memory.py [--models default,1b] [--levers none,ckpt,8bit,both,lora,qlora]

Writes bench/results/memory.json (merged with the runs already there) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.model_shapes import SHAPES, VOCAB  # noqa: E402
from _shared.paths import RESULTS, cpu_name  # noqa: E402
from _shared.proc import status_kb  # noqa: E402

LEVERS = {"none": (False, 32), "ckpt": (True, 32), "8bit": (False, 8), "both": (True, 8), "lora": (False, 32)}
LEVERS["qlora"] = LEVERS["lora"]
"""(checkpointing, optimizer state bits); `lora` / `qlora`: LoRA r=16 on every Linear over the float
base / the int8 base (`lora.base: int8`) instead of full fine-tuning."""
LENGTH = {"default": 512, "1b": 64}
CAP_GB = {"default": 8.0, "1b": 14.0}
"""The address-space cap of each child (virtual memory: torch and transformers map ~1 GB at import).
The ~1B child is skipped when `MemAvailable` is under its cap plus 0.5 GB."""
GB = 1024**3


def build_model(name: str):
    import torch

    if name == "default":
        from tempering.models.lora import load_for_training

        return load_for_training("smollm2-135m-instruct", None)
    from transformers import AutoConfig, AutoModelForCausalLM

    spec = dict(SHAPES["llama-1b"])
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(AutoConfig.for_model(spec.pop("model_type"), vocab_size=VOCAB, **spec))


def child(model_name: str, levers: str, out: str) -> None:
    import ctypes
    import random

    import torch

    from tempering.config import OptimSettings
    from tempering.data.batches import SFTBatches
    from tempering.data.render import IGNORE, RenderedExample
    from tempering.models.checkpointing import enable_checkpointing
    from tempering.objectives.sft import SFTObjective
    from tempering.train.optimizer import build_optimizer, state_bytes

    ckpt, bits = LEVERS[levers]
    length = LENGTH[model_name]
    model = build_model(model_name)
    model.requires_grad_(True)
    if levers in ("lora", "qlora"):
        from tempering.config import LoraSettings
        from tempering.models.lora import apply_lora

        spec = "smollm2-135m-instruct" if model_name == "default" else model_name
        model = apply_lora(model, LoraSettings(base="int8" if levers == "qlora" else "float"), spec)
    if ckpt:
        enable_checkpointing(model)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = build_optimizer(params, OptimSettings(state_bits=bits, lr=1e-5))
    for p in params:  # allocate the states now (and compile torchao's update): lr 0 on zero gradients
        p.grad = torch.zeros_like(p)
    for group in optimizer.param_groups:
        group["lr"] = torch.tensor(0.0) if bits == 8 else 0.0
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    for group in optimizer.param_groups:
        group["lr"] = torch.tensor(1e-5) if bits == 8 else 1e-5
    rng = random.Random(0)
    ids = [rng.randrange(3, model.config.vocab_size) for _ in range(length)]
    batch = SFTBatches(
        [RenderedExample(ids, [IGNORE] * (length // 2) + ids[length // 2 :])], 1, length, 0, False, seed=0
    )
    batch = batch.next_batch()
    objective = SFTObjective()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    before_kb = status_kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # the peak mark starts again from here
    t0 = time.perf_counter()
    loss, _ = objective.loss(model, batch)
    (loss / objective.units(batch)).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    dt = time.perf_counter() - t0
    n_params = sum(p.numel() for p in params)
    result = {
        "params": n_params,
        "sequence_tokens": length,
        "precision": "fp32",
        "torch_threads": torch.get_num_threads(),
        "loss": float(loss.detach()) / objective.units(batch),
        "step_s": dt,
        "tokens_per_s": length / dt,
        "rss_before_step_gb": before_kb / 1024**2,
        "peak_rss_step_gb": status_kb("VmHWM") / 1024**2,
        "param_bytes": n_params * 4,
        "model_state_bytes": sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()]),
        "grad_bytes": n_params * 4,
        "optimizer_state_bytes": state_bytes(optimizer),
    }
    result["step_peak_over_before_gb"] = result["peak_rss_step_gb"] - result["rss_before_step_gb"]
    Path(out).write_text(json.dumps(result))


def mem_available_gb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024**2
    return 0.0


def run_child(model_name: str, levers: str) -> dict:
    """One capped child; its result, or why it did not finish (with its peak RSS from wait4)."""
    cap = CAP_GB[model_name]
    free = mem_available_gb()
    if model_name == "1b" and free < cap + 0.5:
        return {
            "skipped": f"MemAvailable {free:.1f} GB < the child's cap {cap:.0f} GB + 0.5 (other work on the machine)"
        }
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [sys.executable, __file__, "--child", f"{model_name}:{levers}", "--out", out.name]
        print(f"running {model_name} {levers} (cap {cap:.0f} GB, MemAvailable {free:.1f} GB) ...", flush=True)
        limit = int(cap * GB)
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            cmd, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)), stderr=subprocess.PIPE
        )
        _, stderr = proc.communicate()
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            tail = stderr.decode(errors="replace").strip().splitlines()[-1:] or ["?"]
            return {"failed": f"exit {proc.returncode} under a {cap:.0f} GB cap after {wall:.0f} s: {tail[0][:300]}"}
        result = json.loads(Path(out.name).read_text())
    result["child_wall_s"] = wall
    result["cap_gb"] = cap
    return result


def summary(runs: dict) -> dict:
    out: dict = {}
    d = runs.get("default", {})
    checkpointing = RESULTS / "gradient_checkpointing.json"
    if checkpointing.exists():  # the switch's own bench: activations alone (LoRA: no gradients), 2,048 tokens
        ratio = json.loads(checkpointing.read_text())["activation_peak_ratio_on_vs_off"]
        out["activation_ratio_checkpointing"] = 1 / ratio
        out["activation_ratio_checkpointing_source"] = (
            "bench/results/gradient_checkpointing.json (bench/throughput/checkpointing.py): one LoRA SFT step of "
            "the default model on 2,048 tokens, peak RSS above load-only, off / on"
        )
    if all("peak_rss_step_gb" in d.get(k, {}) for k in ("none", "ckpt")):
        # full FT, 512 tokens: the step's peak above its start, less the gradients; it still holds the LM
        # head's logits (which checkpointing does not touch) and the AdamW step's temporaries
        act = {k: d[k]["step_peak_over_before_gb"] - d[k]["grad_bytes"] / GB for k in ("none", "ckpt")}
        out["full_ft_512_step_peak_less_grads_ratio_checkpointing"] = act["none"] / act["ckpt"]
        out["full_ft_512_step_peak_less_grads_gb"] = act
    for name, by_lever in runs.items():  # LoRA over the int8 base vs the float base
        if all("peak_rss_step_gb" in by_lever.get(k, {}) for k in ("lora", "qlora")):
            lora, qlora = by_lever["lora"], by_lever["qlora"]
            out[f"qlora_{name}"] = {
                "peak_rss_step_gb": {"float_base": lora["peak_rss_step_gb"], "int8_base": qlora["peak_rss_step_gb"]},
                "model_state_gb": {
                    "float_base": lora["model_state_bytes"] / GB,
                    "int8_base": qlora["model_state_bytes"] / GB,
                },
                "peak_ratio": lora["peak_rss_step_gb"] / qlora["peak_rss_step_gb"],
                "loss": {"float_base": lora["loss"], "int8_base": qlora["loss"]},
            }
    if all("optimizer_state_bytes" in d.get(k, {}) for k in ("none", "8bit")):
        out["optimizer_state_ratio_8bit"] = d["none"]["optimizer_state_bytes"] / d["8bit"]["optimizer_state_bytes"]
    one_b = runs.get("1b", {})
    both = one_b.get("both", {})
    out["full_ft_1b_peak_gb"] = both.get("peak_rss_step_gb")  # None: not measured (the reason is in runs.1b.both)
    n = both.get("params") or _one_b_params()
    out["plain_adam_1b_bytes_gb"] = {"params": 4 * n / GB, "grads": 4 * n / GB, "adam_states": 8 * n / GB}
    out["plain_adam_1b_bytes_gb"]["total_before_activations"] = 16 * n / GB
    if "optimizer_state_bytes" in d.get("both", {}):
        # bytes, not a measurement: the default model's 8-bit state bytes per parameter, and its runtime
        # overhead (RSS before the step less parameters and states) carried over unchanged
        per_param = d["both"]["optimizer_state_bytes"] / d["both"]["params"]
        overhead = (
            d["both"]["rss_before_step_gb"] - (d["both"]["param_bytes"] + d["both"]["optimizer_state_bytes"]) / GB
        )
        out["levers_1b_bytes_gb"] = {
            "params": 4 * n / GB,
            "grads": 4 * n / GB,
            "adam_states_8bit": per_param * n / GB,
            "runtime_overhead_from_default": overhead,
        }
        out["levers_1b_bytes_gb"]["total_before_activations"] = sum(out["levers_1b_bytes_gb"].values())
    return out


def _one_b_params() -> int:
    c = SHAPES["llama-1b"]
    h, kv = c["hidden_size"], c["num_key_value_heads"] * c["head_dim"]
    layer = 2 * h * h + 2 * h * kv + 3 * h * c["intermediate_size"] + 2 * h
    return c["num_hidden_layers"] * layer + VOCAB * h + h  # tied embeddings


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="default,1b")
    p.add_argument("--levers", default="none,ckpt,8bit,both,lora,qlora")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        model_name, levers = args.child.split(":")
        return child(model_name, levers, args.out)
    path = RESULTS / "memory.json"
    previous = json.loads(path.read_text()) if path.exists() else {}
    runs = previous.get("runs", {})
    loads = previous.get("load_average_per_child", {})
    for model_name in args.models.split(","):
        for levers in args.levers.split(","):
            runs.setdefault(model_name, {})[levers] = run_child(model_name, levers)
            loads[f"{model_name}:{levers}"] = os.getloadavg()
            print(f"  {model_name} {levers}: {json.dumps(runs[model_name][levers])[:400]}", flush=True)
    result = {
        "benchmark": "memory",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "cpu": cpu_name(),
        "note": "shared 2-core machine: other agents' work ran beside every child (load averages below); "
        "tokens/s are load-bound, memory figures are not",
        "load_average_per_child": loads,
        "one_b_shape": "llama-1b (bench/_shared/model_shapes.py)",
        "runs": runs,
        **summary(runs),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    print(f"{'model':<8} {'levers':<6} {'peak GB':>8} {'before GB':>9} {'states GB':>9} {'tokens/s':>9}")
    for model_name, by_lever in runs.items():
        for levers, r in by_lever.items():
            if "peak_rss_step_gb" in r:
                print(
                    f"{model_name:<8} {levers:<6} {r['peak_rss_step_gb']:>8.2f} {r['rss_before_step_gb']:>9.2f} "
                    f"{r['optimizer_state_bytes'] / GB:>9.2f} {r['tokens_per_s']:>9.1f}"
                )
            else:
                print(f"{model_name:<8} {levers:<6} {r.get('skipped') or r.get('failed')}")
    print({k: v for k, v in result.items() if k.endswith(("_checkpointing", "_8bit", "_peak_gb"))})


if __name__ == "__main__":
    main()
