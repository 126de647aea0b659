"""A torchrun rank whose peer hangs or dies stops with one line, not gloo's text or a 30-minute
wait: `train/distributed.py`'s collectives under `train.collective_timeout_s`."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import pytest

from tempering.deadlines import WorkerDied, WorkerStuck


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, port: int, out: str, peer: str) -> None:
    """Rank 0 sums a figure over the ranks; rank 1 `peer`s first: hangs (never joins), or dies."""
    import torch

    from tempering.train import distributed

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2")
    torch.set_num_threads(1)
    distributed.init(timeout_s=3.0)
    if rank == 1:
        if peer == "dies":
            os._exit(9)
        time.sleep(300)  # a hang: the test kills this process
    try:
        distributed.sum_over_ranks([1.0])
        result = {"raised": None}
    except WorkerStuck as exc:  # WorkerDied is one
        result = {"raised": type(exc).__name__, "line": str(exc)}
    Path(out, "rank0.json").write_text(json.dumps(result))


def _run(tmp_path: Path, peer: str) -> dict:
    import torch.multiprocessing as mp

    ctx = mp.start_processes(
        _rank, args=(_free_port(), str(tmp_path), peer), nprocs=2, join=False, start_method="spawn"
    )
    first, deadline = ctx.processes[0], time.monotonic() + 90
    try:
        while first.is_alive() and time.monotonic() < deadline:
            first.join(1)
        assert not first.is_alive(), "rank 0 still waited on its peer after 90 s"
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
            p.join(10)
    return json.loads((tmp_path / "rank0.json").read_text())


def test_a_peer_that_never_joins_the_collective_stops_the_rank_with_one_line_at_the_timeout(tmp_path):
    result = _run(tmp_path, "hangs")
    assert result["raised"] == WorkerStuck.__name__, result
    assert result["line"].startswith(
        "torchrun peer rank stuck: summing step figures (rank 0 of 2): no answer after 3 s"
    )
    assert "\n" not in result["line"]


def test_a_peer_that_dies_stops_the_rank_with_one_line(tmp_path):
    result = _run(tmp_path, "dies")
    assert result["raised"] == WorkerDied.__name__, result
    assert result["line"].startswith("torchrun peer rank ") and "summing step figures (rank 0 of 2)" in result["line"]
    assert "\n" not in result["line"]


def test_the_collective_timeout_is_an_error_in_one_process(tmp_path):
    """Without torchrun there are no peers: setting the timeout would do nothing."""
    from tempering.errors import UserError
    from tests.train.test_trainer import make_trainer

    with pytest.raises(UserError, match=r"train.collective_timeout_s does nothing in one process"):
        make_trainer(tmp_path / "run", collective_timeout_s=30)
    make_trainer(tmp_path / "default")  # the default is no error
