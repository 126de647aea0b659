"""Ctrl-C on a `temper` command: the next step is named, the exit status is 130, and the process
does not wait for worker threads (a rollout sampling ahead) to finish their work first."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

# A command whose main thread waits on a worker thread's long job, as a rollout that samples ahead does.
SLEEPY = textwrap.dedent(
    """
    import threading
    from concurrent.futures import ThreadPoolExecutor
    from tempering.cli import app

    release = threading.Event()

    @app.command("sleepy")
    def sleepy() -> None:
        future = ThreadPoolExecutor(1).submit(release.wait)  # never set: only an exit that skips the join ends it
        print("started", flush=True)
        future.result()

    app()
    """
)


def as_from_a_terminal() -> None:
    """The child starts as a shell in a terminal starts it: SIGINT at its default and not blocked
    (a child inherits both from this process, whatever a library loaded here did to them)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("where", ["before", "after"])
def test_ctrl_c_names_the_resume_and_exits_130_without_joining_workers(tmp_path, where):
    script = tmp_path / "sleepy.py"
    script.write_text(SLEEPY)
    args = ["-v", "sleepy"] if where == "before" else ["sleepy", "--verbose"]  # --verbose anywhere
    proc = subprocess.Popen(
        [sys.executable, str(script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ,
        preexec_fn=as_from_a_terminal,
    )
    assert proc.stdout.readline().strip() == "started"
    proc.send_signal(signal.SIGINT)
    try:
        rc = proc.wait(timeout=60)  # the worker's job never ends: a join would hang here until killed
    except subprocess.TimeoutExpired:
        status = [ln for ln in open(f"/proc/{proc.pid}/status") if ln.startswith("Sig")]
        proc.kill()
        raise AssertionError(f"no exit 60 s after SIGINT; the child's signal state: {''.join(status)}") from None
    err = proc.stderr.read()
    assert rc == 130 and "interrupted; rerun the same command to resume" in err, err
    assert "Traceback" not in err


def test_verbose_after_the_subcommand_keeps_library_messages(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from tempering.cli import app

    for name in ("TRANSFORMERS_VERBOSITY", "HF_HUB_DISABLE_PROGRESS_BARS"):
        monkeypatch.delenv(name, raising=False)
    res = CliRunner().invoke(app, ["eval", "show", str(tmp_path), "--verbose"])
    assert res.exit_code == 2 and "samples.jsonl: not found" in res.stderr  # the command ran, the flag was taken
    assert "TRANSFORMERS_VERBOSITY" not in os.environ  # verbose: libraries left to speak
    CliRunner().invoke(app, ["eval", "show", str(tmp_path)])
    assert os.environ["TRANSFORMERS_VERBOSITY"] == "error"
