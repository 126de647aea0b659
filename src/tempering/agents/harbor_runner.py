"""Harbor's verifier run, inside the sandbox: the only code of `harbor_judge.py` that runs there.

Standard library only, no tempering imports: the host passes this file's text to
`python3 -I -S -B -c` with a JSON payload on stdin (`nonce`, `files` of the task's tests/
folder, `script`, `env`, `timeout_s`). It

  * makes /tmp/harbor/{tests,logs/verifier,home} and fails if /tmp/harbor already exists:
    /tmp is a tmpfs of this run alone, so nothing the agent wrote in its own calls is there,
    and no reward file exists before the tests run;
  * writes the tests there (never into /work), the script executable;
  * runs the script from /work (Harbor runs it from the working directory) with a fresh
    environment, its output to logs/verifier/test-stdout.txt;
  * prints one line, tagged with the nonce: the exit status, the raw text of reward.json and
    reward.txt (None where absent) and the tail of the log. The host parses the reward.

Imported on the host it only defines functions.
"""

import json
import os
import stat
import subprocess
import sys

ROOT = "/tmp/harbor"
MAX_REWARD_BYTES = 65536
LOG_TAIL_BYTES = 2000
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def read_small(path):
    """The text of a regular file (at most MAX_REWARD_BYTES), None when there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        return f.read(MAX_REWARD_BYTES).decode("utf-8", "replace")


def log_tail(path):
    try:
        with open(path, "rb") as f:
            f.seek(max(os.fstat(f.fileno()).st_size - LOG_TAIL_BYTES, 0))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def run(payload):
    os.mkdir(ROOT)  # FileExistsError if anything was there: then no report, no reward
    tests, logs = ROOT + "/tests", ROOT + "/logs/verifier"
    for d in (tests, logs, ROOT + "/logs/agent", ROOT + "/logs/artifacts", ROOT + "/home"):
        os.makedirs(d)
    for rel, text in payload["files"].items():
        path = os.path.join(tests, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o755 if rel == payload["script"] else 0o644)
    env = {"PATH": PATH, "HOME": ROOT + "/home", "LANG": "C.UTF-8", "TMPDIR": "/tmp", **payload["env"]}
    log = logs + "/test-stdout.txt"
    with open(log, "wb") as out:
        try:  # through bash, as a shell would: a script without a shebang runs as a bash script
            code = subprocess.run(
                ["bash", "-c", '"$0"', os.path.join(tests, payload["script"])],
                cwd="/work",
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                timeout=payload["timeout_s"],
            ).returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
    return {
        "exit": code,
        "reward_json": read_small(logs + "/reward.json"),
        "reward_txt": read_small(logs + "/reward.txt"),
        "log": log_tail(log),
    }


def main():
    payload = json.loads(sys.stdin.buffer.read())
    report = run(payload)
    sys.stdout.write(payload["nonce"] + " " + json.dumps(report) + "\n")


if __name__ == "__main__":
    main()
