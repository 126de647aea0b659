"""`temper tinker serve` under a second key's load and under attack: what one key's long call
costs another key's short one, what the memory-bomb requests cost the server, how long a
SIGTERM mid-call takes to stop it.

    python bench/diagnostics/tinker_hardening.py --label after
    python bench/diagnostics/tinker_hardening.py --src /path/to/other/checkout/src --label before

The server runs in its own process (`python -m tempering.cli tinker serve`, 127.0.0.1, fp32,
`--src` first on its PYTHONPATH, so another checkout is measured by this same driver) on a tiny
random Llama (2 layers, hidden 32, vocabulary 512, saved with the default tokenizer; the
requests are token ids below 512), the size of the test's model, so a step is short.
With the official SDK, key a runs a forward_backward of 80 datums of 500 tokens alone (its
time), then queues it again; once the server has accepted it (its audit row), key b sends
8-token forwards one after another until a's call is done: b's latencies (first, max, median)
against b's idle latency, and a's time with b's calls served in between. Then, as raw
HTTP with key a, a zstd body declaring 1 GiB, a sparse loss input 50,000 pages long and a
LoRA of rank 400,000: each answer's status and the server's peak-RSS growth (VmHWM after the
request minus VmRSS before, the peak reset through /proc/PID/clear_refs). Last, a's long call
again and SIGTERM once it runs: seconds until the process exits (killed at 120).
Rows are kept per `--label` in bench/results/tinker_hardening.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS, ROOT, cpu_name  # noqa: E402
from _shared.serving import free_port  # noqa: E402

MB = 1 << 20


def tiny_model(out: Path) -> Path:
    """A 2-layer random Llama with a 512-token vocabulary, saved with the default tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from tempering.models.load import load_tokenizer

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=512,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    LlamaForCausalLM(config).save_pretrained(out)
    load_tokenizer("smollm2-135m-instruct").save_pretrained(out)
    return out


def rss_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(field)


def start_server(src: Path, state: Path, model: Path, port: int) -> subprocess.Popen:
    import httpx

    env = {**os.environ, "PYTHONPATH": str(src), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "tempering.cli", "tinker", "serve", "--port", str(port), "--state", str(state)]
    log = (state / "server.log").open("ab")
    proc = subprocess.Popen([*cmd, "--model", str(model), "--precision", "fp32"], env=env, stdout=log, stderr=log)
    deadline = time.time() + 300
    while time.time() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/v1/healthz", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.3)
    proc.kill()
    raise RuntimeError(f"server did not start: {(state / 'server.log').read_text()[-2000:]}")


def datum(tokens: list[int]):
    from tinker import types

    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * (len(tokens) - 1)},  # pyright: ignore[reportArgumentType]
    )


def long_call(seed: int = 0) -> list:
    import numpy as np

    rng = np.random.default_rng(seed)
    return [datum(rng.integers(100, 500, 501).tolist()) for _ in range(80)]  # 40,000 input tokens


def wait_accepted(store, key_id: str, after: int) -> None:
    while not any(
        r["endpoint"] == "/api/v1/forward_backward" and r["status"] == 200
        for r in store.audit_rows(key_id, after=after)
    ):
        time.sleep(0.05)


def last_audit(store, key_id: str) -> int:
    return max((r["id"] for r in store.audit_rows(key_id, limit=10**6)), default=0)


def fairness(url: str, keys: dict, store, model: Path) -> tuple[dict, object]:
    """b's 8-token forward latencies while a's 40,000-token forward_backward runs."""
    import tinker

    clients = {k: tinker.ServiceClient(base_url=url, api_key="tml-" + s) for k, s in keys.items()}
    a, b = (clients[k].create_lora_training_client(base_model=str(model), rank=8).result() for k in ("a", "b"))
    short = [datum(list(range(100, 109)))]
    idle = []
    for _ in range(3):
        start = time.monotonic()
        b.forward(short, "cross_entropy").result()
        idle.append(time.monotonic() - start)
    start = time.monotonic()
    a.forward_backward(long_call(), "cross_entropy").result()
    alone = time.monotonic() - start
    a_id = store.keys()[0].id
    after = last_audit(store, a_id)
    began = time.monotonic()
    pending = a.forward_backward(long_call(), "cross_entropy")
    done = threading.Event()
    threading.Thread(target=lambda: (pending.result(), done.set()), daemon=True).start()
    wait_accepted(store, a_id, after)
    busy = []
    while not done.is_set():
        start = time.monotonic()
        b.forward(short, "cross_entropy").result()
        busy.append(time.monotonic() - start)
    row = {
        "long_call_tokens": 80 * 500,
        "long_call_alone_s": round(alone, 2),
        "long_call_s": round(time.monotonic() - began, 2),
        "short_call_tokens": 8,
        "short_idle_s_median": round(statistics.median(idle), 3),
        "short_during_long_s_first": round(busy[0], 3) if busy else None,
        "short_during_long_s_max": round(max(busy), 3) if busy else None,
        "short_during_long_s_median": round(statistics.median(busy), 3) if busy else None,
        "short_calls_during_long": len(busy),
    }
    return row, a


def bombs(url: str, secret: str, pid: int, model: Path, model_id: str) -> dict:
    """Status and peak-RSS growth (MB) of the three memory-bomb requests."""
    import httpx
    import numpy as np
    import zstandard
    from tinker.proto import tinker_public_pb2 as pb

    headers = {"X-API-Key": "tml-" + secret}
    session = httpx.post(
        f"{url}/api/v1/create_session",
        json={"tags": [], "user_metadata": {}, "sdk_version": "0.38"},
        headers=headers,
        timeout=60,
    ).json()["session_id"]
    chunks, zero, bomb = zstandard.ZstdCompressor(level=1).compressobj(size=1 << 30), bytes(MB), bytearray()
    for _ in range(1024):
        bomb += chunks.compress(zero)
    bomb += chunks.flush()
    msg = pb.ForwardBackwardRequest(model_id=model_id, loss_fn="cross_entropy", seq_id=1)
    d = msg.data.add()
    d.model_input.add().encoded_text.tokens = np.arange(100, 112, dtype=np.int32).tobytes()
    d.loss_fn_inputs["target_tokens"].CopyFrom(
        pb.Tensor(dense=np.arange(101, 113, dtype=np.int64).tobytes(), dtype=pb.DTYPE_INT64, shape=[12])
    )
    weights = d.loss_fn_inputs["weights"]
    weights.dtype, weights.shape[:] = pb.DTYPE_FLOAT32, [50_000 * 1024]
    weights.sparse_csr.values = np.ones(50_000, np.float32).tobytes()
    weights.sparse_csr.crow_indices = np.array([0, 50_000], np.int64).tobytes()
    weights.sparse_csr.col_indices = (np.arange(50_000, dtype=np.int64) * 1024).tobytes()
    attacks = {
        "zstd_declaring_1GiB": ("forward_backward", {"content": bytes(bomb), "headers": {"Content-Encoding": "zstd"}}),
        "sparse_50000_pages": ("forward_backward", {"content": msg.SerializeToString()}),
        "lora_rank_400000": (
            "create_model",
            {
                "json": {
                    "session_id": session,
                    "model_seq_id": 99,
                    "base_model": str(model),
                    "lora_config": {"rank": 400_000},
                }
            },
        ),
    }
    out = {}
    for name, (route, kw) in attacks.items():
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        before = rss_mb(pid, "VmRSS")
        h = {**headers, **kw.pop("headers", {})}
        r = httpx.post(f"{url}/api/v1/{route}", headers=h, timeout=600, **kw)
        status = r.status_code
        if status == 200 and "request_id" in r.json():  # accepted: its work runs, then it is measured
            while True:
                res = httpx.post(
                    f"{url}/api/v1/retrieve_future",
                    json={"request_id": r.json()["request_id"]},
                    headers=headers,
                    timeout=120,
                )
                body = res.json() if res.headers.get("content-type", "").startswith("application/json") else {}
                if body.get("type") != "try_again":
                    break
            status = f"200 accepted, then {'failed' if 'error' in body else 'done'}"
        out[name] = {"status": status, "peak_rss_growth_mb": round(rss_mb(pid, "VmHWM") - before)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--src", type=Path, default=ROOT / "src", help="source tree the server runs")
    parser.add_argument("--label", default="after", help="row name in the results file")
    parser.add_argument("--out", type=Path, default=RESULTS / "tinker_hardening.json")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # a timeout still stops the server (finally)
    sys.path.insert(0, str(args.src))
    os.environ.setdefault("TINKER_TELEMETRY", "0")
    from tempering.serve.store import Store

    with tempfile.TemporaryDirectory() as tmp:
        model = tiny_model(Path(tmp) / "tiny")
        state, port = Path(tmp) / "state", free_port()
        state.mkdir()
        store = Store(state / "serve.sqlite")
        keys = {k: store.create_key(k)[1] for k in ("a", "b")}
        url = f"http://127.0.0.1:{port}"
        began = time.time()
        proc = start_server(args.src, state, model, port)
        try:
            fair, a = fairness(url, keys, store, model)
            memory = bombs(url, keys["a"], proc.pid, model, a.model_id)  # type: ignore[attr-defined]
            after = last_audit(store, store.keys()[0].id)
            a.forward_backward(long_call(1), "cross_entropy")  # type: ignore[attr-defined]
            wait_accepted(store, store.keys()[0].id, after)
            time.sleep(1.0)
            stop = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.kill()
            sigterm_s = round(time.monotonic() - stop, 2)
        finally:
            if proc.poll() is None:
                proc.kill()
    row = {
        "src": str(args.src),
        "model": "random Llama: 2 layers, hidden 32, vocabulary 512; LoRA rank 8, fp32",
        "fairness": fair,
        "memory_bombs": memory,
        "sigterm_mid_call_exit_s": sigterm_s,
        "total_s": round(time.time() - began, 1),
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
    }
    results: dict = json.loads(args.out.read_text()) if args.out.is_file() else {"bench": "tinker_hardening"}
    results["unit"] = "seconds (wall clock), MB (2^20 bytes of peak RSS growth, /proc/PID/status)"
    results[args.label] = row
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(row, indent=2))


if __name__ == "__main__":
    main()
