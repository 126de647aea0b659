"""Two batch-1 decode levers, a static KV cache and `torch.compile`, against plain `generate` (docs/inference.md).

Same model (the default, weights in --precision), one chat prompt, greedy, exactly
--new-tokens tokens (min = max), HF `generate` on every side, in this one process:

  * eager_dynamic_cache: plain `generate` (HF's dynamic cache; what BatchingEngine's slot
    cache is compared with in bench/throughput/inference.py);
  * static_cache: `cache_implementation="static"`, no compile;
  * static_cache_compiled: the same with `model.forward` wrapped in `torch.compile`
    (inductor, default mode); its first call includes the compile and is reported apart.

Each side: a first call (timed apart), then the best of --repeats timed calls. Greedy tokens
are compared with the eager side's.

    python bench/throughput/compile_decode.py [--precision bf16] [--new-tokens 48] [--repeats 2]

Writes bench/results/compile_decode_<precision>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS  # noqa: E402

MODEL = "smollm2-135m-instruct"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    p.add_argument("--new-tokens", type=int, default=48)
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args()

    import torch

    from tempering.models.load import load_model, load_tokenizer

    dtype = {"bf16": "bfloat16", "fp32": "float32"}[args.precision]
    model, tokenizer = load_model(MODEL, dtype=dtype), load_tokenizer(MODEL)
    model.eval()
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Explain why the sky is blue in two sentences."}],
        add_generation_prompt=True,
        return_tensors="pt",
    )
    ids = ids if torch.is_tensor(ids) else ids["input_ids"]
    n = args.new_tokens

    def side(**kw) -> tuple[dict, torch.Tensor]:
        def once() -> tuple[float, torch.Tensor]:
            t0 = time.perf_counter()
            with torch.no_grad():
                out = model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, **kw)
            return time.perf_counter() - t0, out

        first, out = once()
        best = min(once()[0] for _ in range(args.repeats))
        return {"first_call_s": first, "seconds": best, "tokens_per_s": n / best}, out

    load_before = os.getloadavg()
    runs = {}
    runs["eager_dynamic_cache"], ref = side()
    runs["static_cache"], out = side(cache_implementation="static", disable_compile=True)
    runs["static_cache"]["same_tokens_as_eager"] = bool(torch.equal(out, ref))
    eager_forward = model.forward
    model.forward = torch.compile(eager_forward)
    try:
        runs["static_cache_compiled"], out = side(cache_implementation="static", disable_compile=True)
    finally:
        model.forward = eager_forward
    runs["static_cache_compiled"]["same_tokens_as_eager"] = bool(torch.equal(out, ref))
    base = runs["eager_dynamic_cache"]["tokens_per_s"]
    result = {
        "benchmark": "compile_decode",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "model": MODEL,
        "precision": args.precision,
        "batch": 1,
        "new_tokens": n,
        "prompt_tokens": ids.shape[1],
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "machine_note": (
            "2 shared cores: this bench held /work/bench.lock at normal nice while other agents' "
            "work ran alongside at nice 19"
        ),
        "load_average_before_after": [load_before, os.getloadavg()],
        "speedup_vs_eager": {k: r["tokens_per_s"] / base for k, r in runs.items()},
        "runs": runs,
    }
    out_path = RESULTS / f"compile_decode_{args.precision}.json"
    out_path.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["speedup_vs_eager"]), "->", out_path)


if __name__ == "__main__":
    main()
