"""`Engine` in a local process of its own: `EngineActor` (an HFEngine on its own copy of the model)
in a spawned subprocess, called over a `multiprocessing` Pipe, so asynchronous RL
(`grpo.max_off_policy_steps` > 0) runs on one machine without Ray (`sampler:` in a GRPO config).

    engine = ProcessEngine("smollm2-135m-instruct", lora, "fp32", threads=1)
    engine.sync_weights(trainer_model)     # checked like the Ray replicas' sync: engine.last_sync
    groups = engine.generate(prompts, params)

The process loads the model as the trainer does (LoRA included, so the tensor names match) and
samples exactly as the in-process `HFEngine` on the same weights and seed. A weight sync sends only
the trainable tensors (torch's pickling shares them through shared memory) and checks the hash of
what the process then holds, as `EngineReplicas.sync_weights` does (`check_synced`; the whole state,
frozen base included, on the first sync).

Every call has a deadline (`call_timeout_s`; loading the model has `start_timeout_s`): a process
that does not answer in time is killed, and one that died is reported: both as `EngineProcessError`,
one line naming the engine process, its pid and the call it was making. An exception inside the
process comes back with the process's traceback (a bug keeps it).
"""

from __future__ import annotations

import threading
import time
import traceback
from typing import Any, Sequence

from tempering.config import LoraSettings, SamplingParams
from tempering.hashing import tensors_hash
from tempering.rollout.engine import Completion
from tempering.scale.engines import EngineActor, WeightSyncError, check_synced


class EngineProcessError(RuntimeError):
    """The engine process died or did not answer within its deadline."""


def serve(conn: Any, model_spec: str, lora: LoraSettings | None, precision: str, threads: Any) -> None:
    """The engine process's loop: load an `EngineActor`, then answer (method, args) calls until None or EOF."""
    from tempering.models.threads import set_threads

    try:
        set_threads(threads)
        actor = EngineActor(model_spec, lora, precision)
    except BaseException as exc:  # reported to the parent, which raises it
        conn.send(("error", type(exc).__name__, str(exc), traceback.format_exc()))
        return
    conn.send(("ok", None))
    while True:
        try:
            call = conn.recv()
        except EOFError:  # the parent went away
            return
        if call is None:
            return
        method, args = call
        try:
            conn.send(("ok", getattr(actor, method)(*args)))
        except Exception as exc:
            conn.send(("error", type(exc).__name__, str(exc), traceback.format_exc()))


class ProcessEngine:
    """`Engine` over one `EngineActor` in a spawned process (see the module docstring)."""

    def __init__(
        self,
        model_spec: str,
        lora: LoraSettings | None,
        precision: str,
        threads: Any = "auto",
        call_timeout_s: float = 600.0,
        start_timeout_s: float = 300.0,
    ):
        import torch.multiprocessing as mp

        from tempering.models.load import load_tokenizer

        self.precision, self.call_timeout_s = precision, call_timeout_s
        self.tokenizer = load_tokenizer(model_spec)
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self.process = ctx.Process(
            target=serve, args=(child, model_spec, lora, precision, threads), name="rollout-engine", daemon=True
        )
        self.process.start()
        child.close()
        self.last_sync: dict[str, float] = {}
        self._synced_once = False
        self._identity: str | None = None
        self._lock = threading.Lock()  # one call on the pipe at a time (the sampler thread, a held-out eval)
        self._answer("start (loading the model)", start_timeout_s)

    @property
    def identity(self) -> str:
        if self._identity is None:
            self._identity = str(self._call("identity"))
        return self._identity

    def chat_prompt(self, messages: list[dict[str, Any]]) -> list[int]:
        from tempering.rollout.engine import chat_prompt_ids

        return chat_prompt_ids(self.tokenizer, messages)

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Completion]]:
        return self._call("generate", [list(p) for p in prompts], params)

    def sync_weights(self, weights: Any) -> None:
        """Send the trainer's weights (a model: its trainable tensors; or a state dict) and check them.

        Raises:
            WeightSyncError: the process's hash of the loaded tensors differs from the trainer's.
        """
        t0 = time.perf_counter()
        whole = None
        if hasattr(weights, "named_parameters"):
            state = {n: p for n, p in weights.named_parameters() if p.requires_grad}
            whole = None if self._synced_once else tensors_hash(weights.state_dict().items())
        else:
            state = dict(weights)
        state = {n: t.detach().to("cpu").contiguous() for n, t in state.items()}
        expected = tensors_hash(state.items())
        got = self._call("load_weights", state, whole is not None)
        check_synced([got], expected, whole)
        self._synced_once = True
        self.last_sync = {
            "sync_s": time.perf_counter() - t0,
            "sync_mb": sum(t.numel() * t.element_size() for t in state.values()) / 2**20,
        }

    def close(self) -> None:
        """Stop the process (asked first, killed if it does not stop within 10 s)."""
        if self.process.is_alive():
            try:
                self._conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            self.process.join(10)
            if self.process.is_alive():
                self.process.kill()
                self.process.join(10)
        self._conn.close()

    def _call(self, method: str, *args: Any) -> Any:
        with self._lock:
            try:
                self._conn.send((method, args))
            except (BrokenPipeError, OSError):
                raise self._dead(method) from None
            return self._answer(method, self.call_timeout_s)

    def _answer(self, doing: str, timeout_s: float) -> Any:
        """The process's answer to `doing`, within `timeout_s` (killed past it)."""
        if not self._conn.poll(timeout_s):
            if not self.process.is_alive():
                raise self._dead(doing)
            self.process.kill()
            self.process.join(10)
            raise EngineProcessError(
                f"rollout engine process (pid {self.process.pid}) did not answer {doing} within {timeout_s:g} s "
                "(sampler.call_timeout_s / start_timeout_s); it was killed"
            )
        try:
            reply = self._conn.recv()
        except (EOFError, OSError):
            raise self._dead(doing) from None
        if reply[0] == "ok":
            return reply[1]
        _, kind, message, trace = reply
        if kind == WeightSyncError.__name__:
            raise WeightSyncError(message)
        raise RuntimeError(f"rollout engine process, during {doing}: {kind}: {message}\n{trace}")

    def _dead(self, doing: str) -> EngineProcessError:
        self.process.join(5)
        return EngineProcessError(
            f"rollout engine process (pid {self.process.pid}) died during {doing} (exit code {self.process.exitcode})"
        )
