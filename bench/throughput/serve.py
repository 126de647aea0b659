"""Load test of `temper serve` on loopback: latency, tokens/s and errors at 1, 8 and 32 concurrent streams.

    flock /work/bench.lock timeout 600 python bench/throughput/serve.py     # -> bench/results/serve.json
    python bench/throughput/serve.py --quick                                 # 1 and 4 streams, no result file

The server runs the default model (smollm2-135m-instruct, precision auto) in its own process
(`python -m tempering.cli serve`, 127.0.0.1 only) with a fresh state directory and one key.
Each level starts `concurrency` client threads at once; each sends `requests_per_stream`
streamed chat requests one after the other (max_tokens 32, temperature 0.7, its own seed,
`include_usage`), so the count and the time are bounded. Per request: latency (send to
[DONE]), time to first content chunk, completion tokens; an error is any non-200 status, a
transport error or a stream without [DONE]. The server's engine batches concurrent requests
(continuous batching, `serve/backend.py: engine_for`); the answer is streamed once generated,
so time to first chunk is close to the latency. A previous result file written before
batching (one request at a time) is kept in the new one under `before_batching`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS, ROOT, cpu_name  # noqa: E402
from _shared.serving import PROMPTS, free_port  # noqa: E402

sys.path.insert(0, str(ROOT / "src"))

import httpx  # noqa: E402

LEVELS = (1, 8, 32)


def start_server(state: Path, port: int, log: Path) -> subprocess.Popen:
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tempering.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--state",
            str(state),
            "--max-tokens",
            "64",
        ],
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.time() + 180
    while time.time() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.3)
    proc.kill()
    raise RuntimeError(f"server did not start: {log.read_text()[-2000:]}")


def one_request(url: str, key: str, seed: int, max_tokens: int) -> dict:
    body = {
        "model": "smollm2-135m-instruct",
        "stream": True,
        "max_tokens": max_tokens,
        "temperature": 0.7,
        "seed": seed,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": PROMPTS[seed % len(PROMPTS)]}],
    }
    start, first, tokens, done = time.perf_counter(), None, 0, False
    try:
        with httpx.stream(
            "POST", url + "/v1/chat/completions", json=body, timeout=600, headers={"Authorization": f"Bearer {key}"}
        ) as r:
            if r.status_code != 200:
                return {"ok": False, "error": f"status {r.status_code}"}
            for line in r.iter_lines():
                if line == "data: [DONE]":
                    done = True
                elif line.startswith("data: "):
                    chunk = json.loads(line[6:])
                    if chunk.get("usage"):
                        tokens = chunk["usage"]["completion_tokens"]
                    if first is None and any(c["delta"].get("content") for c in chunk["choices"]):
                        first = time.perf_counter()
    except httpx.HTTPError as exc:
        return {"ok": False, "error": type(exc).__name__}
    end = time.perf_counter()
    if not done:
        return {"ok": False, "error": "stream ended without [DONE]"}
    return {"ok": True, "latency": end - start, "ttft": (first or end) - start, "tokens": tokens}


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return round(values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))], 3)


def run_level(url: str, key: str, concurrency: int, per_stream: int, max_tokens: int) -> dict:
    results: list[dict] = []
    lock = threading.Lock()

    def stream(i: int) -> None:
        for j in range(per_stream):
            r = one_request(url, key, 1000 * concurrency + per_stream * i + j, max_tokens)
            with lock:
                results.append(r)

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(concurrency)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    ok = [r for r in results if r["ok"]]
    lat, ttft = [r["latency"] for r in ok], [r["ttft"] for r in ok]
    tokens = sum(r["tokens"] for r in ok)
    return {
        "concurrency": concurrency,
        "requests": len(results),
        "errors": len(results) - len(ok),
        "error_rate": round((len(results) - len(ok)) / len(results), 4),
        "error_kinds": sorted({r["error"] for r in results if not r["ok"]}),
        "latency_p50_s": percentile(lat, 50),
        "latency_p99_s": percentile(lat, 99),
        "latency_mean_s": round(statistics.mean(lat), 3) if lat else None,
        "ttft_p50_s": percentile(ttft, 50),
        "ttft_p99_s": percentile(ttft, 99),
        "completion_tokens": tokens,
        "wall_s": round(wall, 2),
        "tokens_per_s": round(tokens / wall, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--out", type=Path, default=RESULTS / "serve.json")
    args = parser.parse_args()
    levels, per = ((1, 4), {1: 2, 4: 1}) if args.quick else (LEVELS, {1: 3, 8: 1, 32: 1})
    from tempering.models.precision import resolve_precision
    from tempering.serve.store import Store

    began = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        state, port = Path(tmp) / "state", free_port()
        _, key = Store(state / "serve.sqlite").create_key("bench")
        proc = start_server(state, port, Path(tmp) / "server.log")
        url = f"http://127.0.0.1:{port}"
        try:
            started_s = round(time.time() - began, 1)
            warm = one_request(url, key, 0, args.max_tokens)  # loads nothing new: the first request warms caches
            rows = [run_level(url, key, c, per[c], args.max_tokens) for c in levels]
        finally:
            proc.terminate()
            proc.wait(30)
    by_level = {r["concurrency"]: r for r in rows}
    result = {
        "bench": "serve",
        "model": "smollm2-135m-instruct",
        "precision": resolve_precision("auto"),
        "endpoint": "POST /v1/chat/completions, stream, include_usage; 127.0.0.1 only",
        "max_tokens": args.max_tokens,
        "temperature": 0.7,
        "requests_per_stream": per,
        "levels": rows,
        "errors_at_32": by_level[32]["errors"] if 32 in by_level else None,
        "warmup_request": warm,
        "server_start_s": started_s,
        "total_s": round(time.time() - began, 1),
        "batching": "continuous (BatchingEngine, 32 slots): concurrent requests decode in one running batch",
        "machine": {"cpu": cpu_name(), "cpu_count": os.cpu_count()},
        "note": "other agents' jobs ran at nice 19 alongside (2 shared cores); this bench at normal nice under the lock",
    }
    if args.out.is_file():
        old = json.loads(args.out.read_text())
        if str(old.get("batching", "")).startswith("none"):
            result["before_batching"] = {
                k: old.get(k) for k in ("levels", "errors_at_32", "total_s", "batching", "note")
            }
        elif "before_batching" in old:
            result["before_batching"] = old["before_batching"]
    print(json.dumps(result, indent=1))
    if not args.quick:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
