"""Peak memory (RSS) of `temper serve` on the default model under 32 concurrent streams.

    flock /work/bench.lock python bench/diagnostics/serve_memory.py --label after
    python bench/diagnostics/serve_memory.py --src /path/to/other/checkout/src --label before

The server runs in its own process (`python -m tempering.cli serve`, 127.0.0.1 only, default
model, precision auto, `--src` first on its PYTHONPATH, so another checkout can be measured
with this same driver). After it answers /health its RSS is read (the model loads on the first request); then
`--streams` clients at once each send `--rounds` streamed chat requests with the official
`openai` client (max_tokens `--max-tokens`, the server's default 256). The figure is the
server's VmHWM from /proc (peak resident set over its life), with VmRSS once the load is over.
Rows are kept per `--label` in bench/results/serve_memory.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS, ROOT, cpu_name  # noqa: E402
from _shared.serving import PROMPTS, free_port  # noqa: E402


def proc_status(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM of process `pid` in GiB (2^30 bytes)."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = round(int(value.split()[0]) / 1024**2, 3)
    return out


def start_server(src: Path, state: Path, port: int, log: Path, extra: list[str]) -> subprocess.Popen:
    import httpx

    env = {**os.environ, "PYTHONPATH": str(src), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "tempering.cli", "serve", "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(
        [*cmd, "--state", str(state), *extra], env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT
    )
    deadline = time.time() + 300
    while time.time() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.3)
    proc.kill()
    raise RuntimeError(f"server did not start: {log.read_text()[-2000:]}")


def drive(url: str, key: str, streams: int, rounds: int, max_tokens: int) -> dict:
    """`streams` threads at once, each `rounds` streamed requests; counts tokens and errors."""
    import openai

    client = openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=900)
    tally = {"requests": 0, "errors": 0, "chunks": 0}
    lock = threading.Lock()

    def one(i: int) -> None:
        for j in range(rounds):
            try:
                chunks = 0
                for chunk in client.chat.completions.create(
                    model="smollm2-135m-instruct",
                    messages=[{"role": "user", "content": PROMPTS[(i + j) % len(PROMPTS)]}],
                    max_tokens=max_tokens,
                    temperature=0.7,
                    seed=1000 * j + i,
                    stream=True,
                ):
                    chunks += bool(chunk.choices and chunk.choices[0].delta.content)
                ok = 0
            except openai.OpenAIError:
                chunks, ok = 0, 1
            with lock:
                tally["requests"] += 1
                tally["errors"] += ok
                tally["chunks"] += chunks

    threads = [threading.Thread(target=one, args=(i,)) for i in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--src", type=Path, default=ROOT / "src", help="source tree the server runs")
    parser.add_argument("--label", default="after", help="row name in the results file")
    parser.add_argument("--streams", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--serve-arg", action="append", default=[], help="extra `temper serve` argument")
    parser.add_argument("--out", type=Path, default=RESULTS / "serve_memory.json")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # a timeout still stops the server (finally)
    sys.path.insert(0, str(args.src))
    from tempering.serve.store import Store

    with tempfile.TemporaryDirectory() as tmp:
        state, port = Path(tmp) / "state", free_port()
        _, key = Store(state / "serve.sqlite").create_key("bench")
        began = time.time()
        proc = start_server(args.src, state, port, Path(tmp) / "server.log", args.serve_arg)
        try:
            idle = proc_status(proc.pid)
            tally = drive(f"http://127.0.0.1:{port}", key, args.streams, args.rounds, args.max_tokens)
            time.sleep(1.0)  # the engine retires its last sequences
            loaded = proc_status(proc.pid)
        finally:
            proc.terminate()
            proc.wait(30)
    row = {
        "src": str(args.src),
        "model": "smollm2-135m-instruct",
        "streams": args.streams,
        "rounds": args.rounds,
        "max_tokens": args.max_tokens,
        "serve_args": args.serve_arg,
        "rss_before_first_request_gb": idle["VmRSS"],
        "peak_rss_gb": loaded["VmHWM"],
        "rss_after_load_gb": loaded["VmRSS"],
        **tally,
        "total_s": round(time.time() - began, 1),
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
    }
    results = json.loads(args.out.read_text()) if args.out.is_file() else {"bench": "serve_memory"}
    results["unit"] = "GiB (2^30 bytes), /proc/PID/status kB / 1024^2"
    results[args.label] = row
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(row, indent=2))


if __name__ == "__main__":
    main()
