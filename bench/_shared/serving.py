"""What the serving benches share: the chat prompts they send, a free loopback port, and a
`temper tinker serve` subprocess with a fresh key."""

import socket
import subprocess
import sys
import time
from pathlib import Path

PROMPTS = [
    "Explain in two sentences why the sky is blue.",
    "Write a haiku about autumn.",
    "What is the capital of France, and why is it famous?",
    "Give three tips for learning to code.",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def temper(*args: str) -> list[str]:
    return [sys.executable, "-m", "tempering.cli", *args]


def start_tinker_server(state: Path, port: int, env: dict) -> tuple[subprocess.Popen, str]:
    """`temper tinker serve` on 127.0.0.1:port (niced, its log in `state/server.log`) and a fresh
    key for it, as `temper keys create` prints it (what TINKER_API_KEY takes)."""
    made = subprocess.run(
        temper("keys", "create", "bench", "--state", str(state)), env=env, check=True, capture_output=True
    )
    key = made.stdout.decode().strip().splitlines()[-1]
    log = (state / "server.log").open("ab")
    cmd = temper("tinker", "serve", "--port", str(port), "--state", str(state))
    proc = subprocess.Popen(["nice", "-n", "10", *cmd], env=env, stdout=log, stderr=log)
    import httpx

    deadline = time.time() + 180
    while time.time() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/v1/healthz", timeout=2).status_code == 200:
                return proc, key
        except httpx.HTTPError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError(f"the server did not start: see {state / 'server.log'}")
