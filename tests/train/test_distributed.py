"""`torchrun --nproc_per_node 2 temper sft` (gloo) trains like one process, and resumes exactly after a kill.

Tolerance (fp32): per-step losses of 1 and 2 processes agree within 1e-5 and final weights
within 1e-4 absolute. The only difference is the float summation order of the two ranks'
partial sums (~1e-7 relative on the gradients); AdamW divides each update by sqrt(v), which
turns that into up to ~1e-5 on weights whose gradient is near zero, against 3e-3 per step at
this learning rate (measured: losses 1e-6, weights 2.4e-5 after 16 steps). A resume on the same
world size is bit-identical.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from safetensors.torch import load_file
from typer.testing import CliRunner

from tempering.cli import app
from tempering.data.builtin import arithmetic_conversations
from tests.conftest import tiny_llama

TOL, WEIGHT_TOL = 1e-5, 1e-4
STEPS = 16
TORCHRUN = [
    sys.executable,
    "-m",
    "torch.distributed.run",
    "--standalone",
    "--nproc_per_node",
    "2",
    "-m",
    "tempering.cli",
    "sft",
]


@pytest.fixture()
def sft_setup(tmp_path, smol_tokenizer):
    model = tmp_path / "tiny"
    tiny_llama(vocab=len(smol_tokenizer), tie=True).save_pretrained(model)
    smol_tokenizer.save_pretrained(model)
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in arithmetic_conversations(64, 1)))
    cfg = {
        "model": str(model),
        "lora": None,
        "data": {"train": str(train), "max_length": 160},
        "train": {
            "steps": STEPS,
            "batch_size": 4,
            "grad_accum": 2,
            "precision": "fp32",
            "optim": {"lr": 3e-3, "warmup_steps": 2},
            "checkpoint": {"every": 4, "keep_last": 2},
        },
        "out": str(tmp_path / "runs"),
    }
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path, tmp_path / "runs"


def step_records(run_dir: Path) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines() if (run_dir / "metrics.jsonl").is_file() else []
    return [r for r in map(json.loads, lines) if "event" not in r]


def env() -> dict:
    src = str(Path(__file__).resolve().parents[2] / "src")
    return {
        **os.environ,
        "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "OMP_NUM_THREADS": "1",
        "OMP_WAIT_POLICY": "PASSIVE",
    }


def rank_pid(torchrun_pid: int, rank: int) -> int | None:
    """The pid of `rank` among torchrun's worker processes (read from /proc)."""
    children = Path(f"/proc/{torchrun_pid}/task/{torchrun_pid}/children").read_text().split()
    for pid in children:
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except FileNotFoundError:
            continue
        if f"RANK={rank}".encode() in environ:
            return int(pid)
    return None


def run_killing_rank1(cfg: Path, run_dir: Path, after_step: int) -> tuple[int, str]:
    """Start 2 processes, SIGKILL rank 1 once `after_step` is logged; returns torchrun's exit code."""
    proc = subprocess.Popen(
        TORCHRUN + [str(cfg), "--name", run_dir.name],
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if any(r["step"] >= after_step for r in step_records(run_dir)):
            os.kill(rank_pid(proc.pid, 1), signal.SIGKILL)
            break
        time.sleep(0.01)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


def test_two_processes_match_one_and_resume_exactly_after_a_kill(sft_setup):
    cfg, runs = sft_setup
    one = CliRunner().invoke(app, ["sft", str(cfg), "--name", "one"])
    assert one.exit_code == 0, one.output

    code, err = run_killing_rank1(cfg, runs / "two", after_step=6)
    assert code != 0, "rank 1 was killed, so torchrun must fail"
    assert not (runs / "two" / "final").exists()
    first = {r["step"]: r["loss"] for r in step_records(runs / "two")}

    # one process may not resume a run that two processes started
    refused = CliRunner().invoke(app, ["sft", str(cfg), "--name", "two"])
    assert refused.exit_code == 2 and "written by 2 process(es)" in refused.output, refused.output

    again = subprocess.run(TORCHRUN + [str(cfg), "--name", "two"], env=env(), capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-3000:]
    summary = json.loads(again.stdout[again.stdout.index("{") :])  # rank 0 alone prints the summary
    resumed = summary["resumed_from"]
    assert resumed is not None and resumed % 4 == 0 and resumed < max(first)
    records = step_records(runs / "two")
    redone = [r for r in records[len(first) :] if r["step"] in first]
    assert redone, "the resumed run recomputes the steps after its checkpoint"
    assert all(r["loss"] == first[r["step"]] for r in redone)  # exact: bit-identical

    # 1 vs 2 processes: the same global batches, losses and weights within TOL
    losses = {r["step"]: r["loss"] for r in step_records(runs / "one")}
    two = {r["step"]: r["loss"] for r in records}
    assert sorted(two) == sorted(losses) == list(range(1, STEPS + 1))
    # rank 0 records every rank's share of each step, and the resume cut the killed steps' lines
    drawn = [(runs / name / "consumed.jsonl").read_text().splitlines() for name in ("one", "two")]
    assert drawn[0] == drawn[1] and len(drawn[0]) == STEPS
    assert max(abs(two[s] - losses[s]) for s in losses) < TOL
    assert losses[STEPS] < losses[1] - 0.5  # it learned something, so the comparison means something
    w1 = load_file(runs / "one" / "final" / "model.safetensors")
    w2 = load_file(runs / "two" / "final" / "model.safetensors")
    assert w1.keys() == w2.keys()
    assert max(float((w1[k] - w2[k]).abs().max()) for k in w1) < WEIGHT_TOL
    w0 = load_file(cfg.parent / "tiny" / "model.safetensors")
    assert max(float((w1[k] - w0[k]).abs().max()) for k in w1) > 100 * WEIGHT_TOL  # the weights did move


def test_ranks_split_each_global_micro_batch_and_keep_one_cursor():
    from tempering.data.batches import SFTBatches
    from tests.conftest import random_examples

    examples = random_examples(10, seed=3)
    one = SFTBatches(examples, 4, 128, 0, False, seed=1)
    ranks = [SFTBatches(examples, 4, 128, 0, False, seed=1, shard=(r, 2)) for r in range(2)]
    for _ in range(3):  # crosses an epoch boundary (10 examples, 4 per micro-batch)
        whole = one.next_batch()
        parts = [b.next_batch() for b in ranks]
        # rank r holds conversations r and r+2 of the global micro-batch
        assert [p["n_real_tokens"] for p in parts] == [int(whole["attention_mask"][[r, r + 2]].sum()) for r in range(2)]
        assert all(b.state_dict() == one.state_dict() for b in ranks)
    with pytest.raises(ValueError, match="batch_size 3 is the global batch and must be a multiple of the 2"):
        SFTBatches(examples, 3, 128, 0, False, seed=1, shard=(0, 2))


def test_resume_on_another_world_size_is_refused():
    from tempering.train.distributed import World, WorldSizeChanged, check_world_size

    check_world_size(2, World(1, 2))
    with pytest.raises(
        WorldSizeChanged,
        match=r"written by 2 process\(es\) and this resume runs 1; "
        r"resume with `--nproc_per_node 2`",
    ):
        check_world_size(2, World(0, 1))


def test_dpo_on_two_processes_matches_one(tmp_path, smol_tokenizer):
    """`torchrun --nproc_per_node 2 temper dpo`: the same losses and weights as one process."""
    model = tmp_path / "tiny"
    tiny_llama(vocab=len(smol_tokenizer), tie=True).save_pretrained(model)
    smol_tokenizer.save_pretrained(model)
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(
        "".join(
            json.dumps({"prompt": f"What is {a} + {a + 3}?", "chosen": str(2 * a + 3), "rejected": str(2 * a + 4)})
            + "\n"
            for a in range(24)
        )
    )
    cfg = {
        "model": str(model),
        "lora": None,
        "data": {"train": str(pairs), "max_length": 64},
        "dpo": {"beta": 0.1, "sft_weight": 0.0, "reference": "cache"},
        "train": {
            "steps": 6,
            "batch_size": 4,
            "precision": "fp32",
            "optim": {"lr": 3e-3, "schedule": "constant"},
            "checkpoint": {"every": 3},
        },
        "out": str(tmp_path / "runs"),
    }
    path = tmp_path / "dpo.yaml"
    path.write_text(yaml.safe_dump(cfg))
    one = CliRunner().invoke(app, ["dpo", str(path), "--name", "one"])
    assert one.exit_code == 0, one.output
    two = subprocess.run(TORCHRUN[:-1] + ["dpo", str(path), "--name", "two"], env=env(), capture_output=True, text=True)
    assert two.returncode == 0, two.stderr[-3000:]
    losses = {r["step"]: r["loss"] for r in step_records(tmp_path / "runs" / "one")}
    pair = {r["step"]: r["loss"] for r in step_records(tmp_path / "runs" / "two")}
    assert sorted(pair) == sorted(losses) == list(range(1, 7))
    assert max(abs(pair[s] - losses[s]) for s in losses) < TOL
    assert losses[6] < losses[1]  # it learned, so the comparison means something
    w1 = load_file(tmp_path / "runs" / "one" / "final" / "model.safetensors")
    w2 = load_file(tmp_path / "runs" / "two" / "final" / "model.safetensors")
    assert max(float((w1[k] - w2[k]).abs().max()) for k in w1) < WEIGHT_TOL


def test_pair_batches_split_each_global_micro_batch():
    from tempering.data.pair_batches import PairBatches
    from tempering.data.pair_render import RenderedPair

    pairs = [RenderedPair([1, 2], [3 + i], [1], [4], [1], 1.0) for i in range(6)]
    one = PairBatches(pairs, 4, seed=2)
    ranks = [PairBatches(pairs, 4, seed=2, shard=(r, 2)) for r in range(2)]
    for _ in range(3):
        whole = one.next_batch()["index"].tolist()
        assert [b.next_batch()["index"].tolist() for b in ranks] == [whole[0::2], whole[1::2]]
        assert all(b.state_dict() == one.state_dict() for b in ranks)
    with pytest.raises(ValueError, match="batch_size 3 is the global batch and must be a multiple of the 2"):
        PairBatches(pairs, 3, seed=2, shard=(0, 2))
