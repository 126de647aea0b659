"""`Engine` in a local process of its own: `EngineActor` (the run's `engine:`, batching or hf, on
its own copy of the model) in a spawned subprocess, called over a `multiprocessing` Pipe, so asynchronous RL
(`grpo.max_off_policy_steps` > 0) runs on one machine without Ray (`sampler:` in a GRPO config).

    engine = ProcessEngine("smollm2-135m-instruct", lora, "fp32", threads=1, engine=EngineSettings())
    engine.sync_weights(trainer_model)     # checked like the Ray replicas' sync: engine.last_sync
    groups = engine.generate(prompts, params)

The process loads the model as the trainer does (LoRA included, so the tensor names match) and
samples exactly as the same engine in process does on the same weights, seed and thread count. A weight sync sends only
the trainable tensors (torch's pickling shares them through shared memory) and checks the hash of
what the process then holds, as `EngineReplicas.sync_weights` does (`check_synced`; the whole state,
frozen base included, on the first sync).

Every call has a deadline (`call_timeout_s`; loading the model has `start_timeout_s`). A process
that dies (killed, out of memory) or does not answer in time (it is killed) is treated as a Ray
replica is: a fresh process on the same model spec and thread count is given the last synced
weights (their hash checked) and sent the same call again, with the same seed, so the batch is the
one an unfaulted run samples (`replaced` counts them, `hung` the hung ones). If the fresh process
fails too, within the deadline plus `grace_s`, the run stops with one line naming the engine
process, what it was doing and (the Trainer adds it) the step: `WorkerStuck`, or `WorkerDied`.
An exception inside the process comes back with the process's traceback (a bug keeps it).
"""

from __future__ import annotations

import threading
import time
import traceback
from typing import Any, Sequence

from tempering.config import EngineSettings, LoraSettings, SamplingParams
from tempering.deadlines import DEFAULT_GRACE_S, WorkerDied, WorkerStuck
from tempering.hashing import tensors_hash
from tempering.rollout.engine import Completion
from tempering.scale.engines import EngineActor, WeightSyncError, check_synced

FAULT_POINT = "engine_process"
"""The fault battery's point in this process's `generate` (tempering/faults.py)."""


class EngineProcessError(RuntimeError):
    """The engine process died (`exitcode`) or gave no answer within `timeout_s` (then it was killed)."""

    def __init__(self, message: str, waited_s: float, timeout_s: float, exitcode: int | None):
        super().__init__(message)
        self.waited_s, self.timeout_s, self.exitcode = waited_s, timeout_s, exitcode

    @property
    def hung(self) -> bool:
        return self.exitcode is None

    def how(self) -> str:
        if self.hung:
            return f"was killed after no answer within {self.timeout_s:g} s"
        return f"died (exit code {self.exitcode})"


def serve(
    conn: Any, model_spec: str, lora: LoraSettings | None, precision: str, engine: EngineSettings, threads: Any
) -> None:
    """The engine process's loop: load an `EngineActor`, answer with the torch threads it uses,
    then answer (method, args) calls until None or EOF."""
    from tempering.models.threads import set_threads

    try:
        used = set_threads(threads)
        actor = EngineActor(model_spec, lora, precision, fault_point=FAULT_POINT, engine=engine)
    except BaseException as exc:  # reported to the parent, which raises it
        conn.send(("error", type(exc).__name__, str(exc), traceback.format_exc()))
        return
    conn.send(("ok", used))
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
    """`Engine` over one `EngineActor` in a spawned process (see the module docstring).

    `engine`: the engine it samples with (hf or batching; None: hf); `call_timeout_s`: a call's deadline; `start_timeout_s`: loading the model's; `grace_s`: what a
    replacement's start, weight load and resent call may take beyond those before the run stops."""

    def __init__(
        self,
        model_spec: str,
        lora: LoraSettings | None,
        precision: str,
        threads: Any = "auto",
        call_timeout_s: float = 600.0,
        start_timeout_s: float = 300.0,
        grace_s: float = DEFAULT_GRACE_S,
        engine: EngineSettings | None = None,
    ):
        from tempering.models.load import load_tokenizer

        self.precision, self.tokenizer = precision, load_tokenizer(model_spec)
        self.call_timeout_s, self.start_timeout_s, self.grace_s = call_timeout_s, start_timeout_s, grace_s
        self._spec = (model_spec, lora, precision, EngineSettings(kind="hf") if engine is None else engine)
        self.last_sync: dict[str, float] = {}
        self.replaced = self.hung = 0
        self._synced_once = False
        self._synced: tuple[dict[str, Any], str] | None = None  # the last sync: (tensors, their hash)
        self._identity: str | None = None
        self._lock = threading.Lock()  # one call on the pipe at a time (the sampler thread, a held-out eval)
        try:
            # a replacement uses the thread count this one chose: the same reductions, the same samples
            self._threads = self._start(threads, start_timeout_s)
        except EngineProcessError as exc:
            raise _stop("engine process", "starting (loading the model)", exc) from None

    @property
    def identity(self) -> str:
        if self._identity is None:
            self._identity = str(self._call("identity", (), "reporting its identity"))
        return self._identity

    def chat_prompt(self, messages: list[dict[str, Any]]) -> list[int]:
        from tempering.rollout.engine import chat_prompt_ids

        return chat_prompt_ids(self.tokenizer, messages)

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Completion]]:
        return self._call("generate", ([list(p) for p in prompts], params), f"sampling {len(prompts)} prompts")

    def sync_weights(self, weights: Any) -> None:
        """Send the trainer's weights (a model: its trainable tensors; or a state dict, which must not
        change afterwards, as the orchestrator's snapshots do not) and check them.

        Raises:
            WeightSyncError: the process's hash of the loaded tensors differs from the trainer's.
        """
        t0 = time.perf_counter()
        whole = None
        if hasattr(weights, "named_parameters"):
            # copied (a LoRA adapter: MBs; full fine-tuning: the trainable weights once more): the
            # trainer updates its tensors in place, and a replacement process must get these
            state = {n: p.detach().to("cpu", copy=True) for n, p in weights.named_parameters() if p.requires_grad}
            whole = None if self._synced_once else tensors_hash(weights.state_dict().items())
        else:
            state = {n: t.detach().to("cpu").contiguous() for n, t in dict(weights).items()}
        expected = tensors_hash(state.items())
        got = self._call("load_weights", (state, whole is not None), "loading the synced weights")
        check_synced([got], expected, whole)
        self._synced_once = True
        self._synced = (state, expected)
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

    def _start(self, threads: Any, timeout_s: float) -> int | None:
        """Spawn the process and wait for it to load the model; the torch threads it uses."""
        import torch.multiprocessing as mp

        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self.process = ctx.Process(target=serve, args=(child, *self._spec, threads), name="rollout-engine", daemon=True)
        self.process.start()
        child.close()
        return self._answer("start (loading the model)", timeout_s)

    def _call(self, method: str, args: tuple, doing: str) -> Any:
        """`method(*args)` in the process; once it dies or hangs, a fresh process and the call again."""
        with self._lock:
            try:
                return self._ask(method, args, self.call_timeout_s)
            except EngineProcessError as first:
                self.replaced, self.hung = self.replaced + 1, self.hung + first.hung
                return self._replace_and_resend(method, args, doing, first)

    def _replace_and_resend(self, method: str, args: tuple, doing: str, first: EngineProcessError) -> Any:
        """A fresh process, the last synced weights (hash-checked; its frozen base is the model spec's,
        as at start), then the same call; a second failure stops the run."""
        who, why = "engine process (a replacement)", f"the first {first.how()}"
        if self.process.is_alive():  # its pipe broke under a live process: end it before its successor starts
            self.process.kill()
            self.process.join(10)
        self._conn.close()
        try:
            phase = f"starting (loading the model) to resend {doing}: {why}"
            self._start(self._threads, self.start_timeout_s + self.grace_s)
            if self._synced is not None and method != "load_weights":
                phase = f"loading the synced weights to resend {doing}: {why}"
                state, expected = self._synced
                check_synced(
                    [self._ask("load_weights", (state, False), self.call_timeout_s + self.grace_s)], expected, None
                )
            phase = f"{doing} (resent: {why})"
            return self._ask(method, args, self.call_timeout_s + self.grace_s)
        except EngineProcessError as exc:
            raise _stop(who, phase, exc) from None

    def _ask(self, method: str, args: tuple, timeout_s: float) -> Any:
        try:
            self._conn.send((method, args))
        except (BrokenPipeError, OSError):
            raise self._dead(method, time.monotonic(), timeout_s) from None
        return self._answer(method, timeout_s)

    def _answer(self, doing: str, timeout_s: float) -> Any:
        """The process's answer to `doing`, within `timeout_s` (killed past it)."""
        t0 = time.monotonic()
        if not self._conn.poll(timeout_s):
            if not self.process.is_alive():
                raise self._dead(doing, t0, timeout_s)
            self.process.kill()
            self.process.join(10)
            raise EngineProcessError(
                f"rollout engine process (pid {self.process.pid}) did not answer {doing} within {timeout_s:g} s; "
                "it was killed",
                time.monotonic() - t0,
                timeout_s,
                None,
            )
        try:
            reply = self._conn.recv()
        except (EOFError, OSError):
            raise self._dead(doing, t0, timeout_s) from None
        if reply[0] == "ok":
            return reply[1]
        _, kind, message, trace = reply
        if kind == WeightSyncError.__name__:
            raise WeightSyncError(message)
        raise RuntimeError(f"rollout engine process, during {doing}: {kind}: {message}\n{trace}")

    def _dead(self, doing: str, t0: float, timeout_s: float) -> EngineProcessError:
        self.process.join(5)
        code = self.process.exitcode
        return EngineProcessError(
            f"rollout engine process (pid {self.process.pid}) died during {doing} (exit code {code})",
            time.monotonic() - t0,
            timeout_s,
            -1 if code is None else code,
        )


def _stop(who: str, doing: str, exc: EngineProcessError) -> WorkerStuck:
    """The one line that stops the run: no answer within the bound, or a death."""
    if exc.hung:
        return WorkerStuck(who, doing, exc.waited_s, exc.timeout_s)
    return WorkerDied(who, doing, f"it {exc.how()}")
