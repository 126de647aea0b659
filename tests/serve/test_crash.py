"""`kill -9` in the middle of 32 concurrent streams loses no audit row of a completed
request, no accepted feedback and no accepted vote; no request is audited twice and the store
passes SQLite's integrity check. (A stream cut by the kill has no row: its request never
finished, and its client saw the connection drop.)"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time

import httpx

from tempering.runs.registry import Registry
from tempering.runs.releases import Releases
from tempering.serve.store import Store
from tests.serve.conftest import free_port

STREAMS = 32


def start_server(state, registry, port):
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tempering.cli",
            "serve",
            "--port",
            str(port),
            "--state",
            str(state),
            "--registry",
            str(registry),
            "--log-text",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(state.parent / f"server{port}.log", "ab"),
    )
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError((state.parent / f"server{port}.log").read_text()[-2000:])


def test_kill_9_loses_nothing_accepted(tiny_models, tmp_path):
    registry = tmp_path / "registry.sqlite"
    releases = Releases(Registry(registry))
    for model, alias in zip(tiny_models, ("production", "candidate")):  # the arena pairs live releases
        releases.promote(model, gate={"passed": True, "rules": []}, alias=alias)
    state = tmp_path / "state"
    created = subprocess.run(
        [sys.executable, "-m", "tempering.cli", "keys", "create", "crash", "--state", str(state)],
        capture_output=True,
        text=True,
        check=True,
    )
    key = created.stdout.strip().splitlines()[-1]  # the key is the last line printed
    port = free_port()
    proc = start_server(state, registry, port)
    url, headers = f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {key}"}
    completed, feedback, votes, lock = [], [], [], threading.Lock()
    in_flight: set[int] = set()  # streams that got their first chunk

    def stream(i: int) -> None:
        body = {
            "model": "production",
            "stream": True,
            "temperature": 1.5,
            "seed": i,
            "max_tokens": 60,
            "messages": [{"role": "user", "content": f"request {i}"}],
        }
        try:
            with httpx.stream("POST", url + "/v1/chat/completions", json=body, headers=headers, timeout=120) as r:
                rid, done = None, False
                for line in r.iter_lines():
                    if line.startswith("data: {"):
                        rid = json.loads(line[6:])["id"]
                        in_flight.add(i)
                    done = done or line == "data: [DONE]"
            if not done:
                return
            with lock:
                completed.append(rid)
            f = httpx.post(
                url + "/v1/feedback",
                headers=headers,
                timeout=30,
                json={"response_id": rid, "kind": "thumbs_down", "comment": f"bad {i}"},
            )
            if f.status_code == 200:
                with lock:
                    feedback.append(f.json()["id"])
        except httpx.HTTPError:
            pass  # the server died under this request

    def arena() -> None:
        try:
            for n in range(6):
                b = httpx.post(
                    url + "/arena/battles", headers=headers, timeout=120, json={"prompt": f"prompt {n}"}
                ).json()
                v = httpx.post(
                    url + f"/arena/battles/{b['id']}/votes", headers=headers, timeout=60, json={"choice": "a"}
                )
                if v.status_code == 200:
                    with lock:
                        votes.append((b["id"], "crash"))  # the annotator is the key
        except (httpx.HTTPError, KeyError, json.JSONDecodeError):
            pass  # the server died under this request

    voter = threading.Thread(target=arena)  # votes go on while the streams run
    voter.start()
    deadline = time.time() + 120
    while len(votes) < 2 and time.time() < deadline:
        time.sleep(0.01)
    threads = [threading.Thread(target=stream, args=(i,)) for i in range(STREAMS)]
    for t in threads[:8]:  # 8 complete first; the rest are killed mid-flight (one batch would end together)
        t.start()
    while len(completed) < 8 and time.time() < deadline:
        time.sleep(0.01)
    for t in threads[8:]:
        t.start()
    while not in_flight & set(range(8, STREAMS)) and time.time() < deadline:
        time.sleep(0.002)
    os.kill(proc.pid, signal.SIGKILL)  # mid-flight: streams still running
    proc.wait()
    for t in threads + [voter]:
        t.join(60)
    assert 8 <= len(completed) < STREAMS and votes, (len(completed), len(votes))

    store = Store(state / "serve.sqlite")  # what a restarted server opens
    rows = store.audit_rows(None, limit=10_000)
    audited = {r["response_id"] for r in rows if r["status"] == 200}
    assert set(completed) <= audited
    written = [r["response_id"] for r in rows if r["response_id"]]
    assert len(written) == len(set(written))  # one row per request: none written twice
    with sqlite3.connect(state / "serve.sqlite") as db:  # the kill left no torn page behind
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert set(feedback) <= {f["id"] for f in store.feedback(None)}
    assert set(votes) <= {(v["battle_id"], v["annotator"]) for v in store.votes()}
    restarted = start_server(state, registry, port)  # and the server comes back on the same state
    try:
        rows = httpx.get(url + "/v1/audit?limit=1000", headers=headers).json()["data"]
        assert set(completed) <= {r["response_id"] for r in rows}
    finally:
        restarted.terminate()
        restarted.wait(30)
