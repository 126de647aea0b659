"""`Engine` over Ray actors: rollout engine replicas, each an `HFEngine` in its own process.

    engine = EngineReplicas("smollm2-135m-instruct", lora, "fp32", replicas=2)
    engine.sync_weights(trainer_model)     # timed and checksummed: engine.last_sync
    groups = engine.generate(prompts, params)

`generate` splits the prompts into one contiguous slice per replica; slice k samples with
seed `seed + k * SEED_STRIDE`, so with one replica the samples are exactly those of the
in-process engine for the same seed (with more, equally distributed but not the same).

`sync_weights` ships only the trainer's trainable tensors through the object store (a LoRA
adapter: ~9 MB for the default model, where the whole state is 630 MB); the frozen base is
loaded by each replica from the same model spec. Each replica loads the tensors and hashes
what it now holds under those names; on the first sync it also hashes its whole state, so a
replica whose base differs is caught once. A hash that differs from the trainer's is a
`WeightSyncError`, never a silent divergence. A vLLM engine fits the
same place (see docs/scale.md); this one runs wherever torch does.

A replica that dies (its process killed, its node lost: Ray's `RayActorError`) or hangs (no
answer within `deadline_s` of the call going out: it is killed first) is replaced by a fresh
actor on the same model spec, given the last synced weights (their hash checked; its frozen
base, loaded from the same spec, is not re-hashed) and sent its slice again with the same seed,
so the step gets the very completions it would have had: none lost, none drawn twice
(`replaced` counts them, `hung` the hung ones). One that dies again on the resend is raised as
Ray's error (its remote traceback included); one that gives no answer within `deadline_s +
grace_s` on the resend, a weight sync or a start is a `WorkerStuck` line. Either way the
trainer stops, and its checkpoint resumes the run exactly.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

from tempering import faults
from tempering.config import EngineSettings, LoraSettings, SamplingParams
from tempering.deadlines import DEFAULT_GRACE_S, WorkerStuck
from tempering.hashing import tensors_hash
from tempering.rollout.engine import Completion

SEED_STRIDE = 1_000_003


class WeightSyncError(RuntimeError):
    """A replica holds other weights than the trainer sent."""


class EngineActor:
    """One replica: the model loaded as the trainer loads it (LoRA included, so the trainer's
    tensor names match), sampled by the engine `build_engine` makes of `engine` (None: `HFEngine`;
    a `ProcessEngine` passes the run's `engine:`, hf or batching). `fault_point`: the fault point
    of its `generate` (`engine` on Ray, `engine_process` in a `ProcessEngine`)."""

    def __init__(
        self,
        model_spec: str,
        lora: LoraSettings | None,
        precision: str,
        fault_point: str = "engine",
        engine: EngineSettings | None = None,
    ):
        from tempering.models.load import load_tokenizer
        from tempering.models.lora import load_for_training
        from tempering.models.precision import default_device
        from tempering.rollout.select import build_engine

        # on the GPU Ray gave this actor (`engine_gpus` > 0); Ray hides every GPU from one given none
        model = load_for_training(model_spec, lora).to(default_device())
        settings = EngineSettings(kind="hf") if engine is None else engine
        self.engine: Any = build_engine(settings, model, load_tokenizer(model_spec), precision)
        self.fault_point = fault_point  # the fault battery's name for this kind of worker (tempering/faults.py)

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[Completion]]:
        faults.point(self.fault_point)
        return self.engine.generate(prompts, params)

    def load_weights(self, state: dict[str, Any], whole: bool) -> tuple[str, str | None]:
        """Load `state` (a subset of the model's tensors); the hash of what is now loaded
        under those names, and with `whole` the hash of the whole state dict."""
        import torch

        own = dict(self.engine.model.state_dict())
        unknown = sorted(set(state) - set(own))
        if unknown:
            raise WeightSyncError(f"replica has no tensors named {unknown[:3]}")
        with torch.no_grad():
            for name, tensor in state.items():
                own[name].copy_(tensor)
        return tensors_hash((n, own[n]) for n in state), tensors_hash(own.items()) if whole else None

    def identity(self) -> str:
        return self.engine.identity


class EngineReplicas:
    """`Engine` over `replicas` Ray actors (Ray must be initialised: scale.runtime.ray_session).

    `deadline_s`: how long one replica may take for its slice (or a weight load) before it is
    declared hung and replaced; `grace_s`: what a replacement, a sync or a start may take beyond
    that before the run stops (`WorkerStuck`)."""

    def __init__(
        self,
        model_spec: str,
        lora: LoraSettings | None,
        precision: str,
        replicas: int = 1,
        gpus: float = 0.0,
        cpus: float = 1.0,
        deadline_s: float = 600.0,
        grace_s: float = DEFAULT_GRACE_S,
    ):
        import ray

        from tempering.models.load import load_tokenizer

        self.precision = precision
        self.tokenizer = load_tokenizer(model_spec)
        actor = ray.remote(num_cpus=cpus, num_gpus=gpus)(EngineActor)
        self._new_actor = lambda: actor.remote(model_spec, lora, precision)
        self.actors = [self._new_actor() for _ in range(replicas)]
        self.last_sync: dict[str, float] = {}
        self.replaced = self.hung = 0
        self.deadline_s, self.grace_s = deadline_s, grace_s
        self._synced_once = False
        self._synced: tuple[Any, str] | None = None  # the last sync: (object ref, tensors hash)

    @property
    def identity(self) -> str:

        return self._get(self.actors[0].identity.remote(), "engine replica 0", "starting (its identity)")

    def chat_prompt(self, messages: list[dict[str, Any]]) -> list[int]:
        from tempering.rollout.engine import chat_prompt_ids

        return chat_prompt_ids(self.tokenizer, messages)

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Completion]]:
        n = len(self.actors)
        per = -(-len(prompts) // n)
        calls = []
        for k in range(n):
            part = [list(p) for p in prompts[k * per : (k + 1) * per]]
            if part:
                ref = self.actors[k].generate.remote(part, self._params(params, k))
                calls.append((k * per, ref, time.monotonic()))
        out: list[list[Completion]] = []
        for start, ref, sent in calls:
            for group in self._collect(ref, sent, start // per, prompts[start : start + per], params):
                for c in group:
                    c.prompt_index += start
                out.append(group)
        return out

    @staticmethod
    def _params(params: SamplingParams, k: int) -> SamplingParams:
        """Replica k's sampling settings: its own seed stream."""
        return params.model_copy(update={"seed": None if params.seed is None else params.seed + k * SEED_STRIDE})

    def sync_weights(self, weights: Any) -> None:
        """Send the trainer's weights (a model or a state dict) to every replica and check them.

        Raises:
            WeightSyncError: a replica's hash of the loaded tensors differs from the trainer's.
        """
        import ray

        t0 = time.perf_counter()
        whole = None
        if hasattr(weights, "named_parameters"):
            state = {n: p for n, p in weights.named_parameters() if p.requires_grad}
            whole = None if self._synced_once else tensors_hash(weights.state_dict().items())
        else:
            state = dict(weights)
        state = {n: t.detach().to("cpu").contiguous() for n, t in state.items()}
        expected = tensors_hash(state.items())
        ref = ray.put(state)
        loads = [a.load_weights.remote(ref, whole is not None) for a in self.actors]
        got = self._get(loads, f"engine replicas 0-{len(self.actors) - 1}", "loading the synced weights")
        check_synced(got, expected, whole)
        self._synced_once = True
        # kept for a replacement replica (pins one copy of the trainable tensors in the object store)
        self._synced = (ref, expected)
        self.last_sync = {
            "sync_s": time.perf_counter() - t0,
            "sync_mb": sum(t.numel() * t.element_size() for t in state.values()) / 2**20,
        }

    def _collect(self, ref: Any, sent: float, k: int, part: Sequence[Sequence[int]], params: SamplingParams) -> Any:
        """Replica k's completions; a dead or hung replica is replaced and its slice sent again (same seed)."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        try:
            return ray.get(ref, timeout=max(0.0, sent + self.deadline_s - time.monotonic()))
        except GetTimeoutError:
            ray.kill(self.actors[k])  # pyright: ignore[reportArgumentType]  # see close()
            self.hung += 1
        except RayActorError:
            pass
        self.actors[k] = self._new_actor()
        self.replaced += 1
        who = f"engine replica {k} (a replacement)"
        if self._synced is not None:  # its base is the model spec's, as at start; the trained tensors are sent
            state, expected = self._synced
            got = self._get(self.actors[k].load_weights.remote(state, False), who, "starting and loading the weights")
            check_synced([got], expected, None)
        resend = self.actors[k].generate.remote([list(p) for p in part], self._params(params, k))
        return self._get(resend, who, f"sampling the {len(part)} prompts of the replica it replaced")

    def _get(self, refs: Any, who: str, doing: str) -> Any:
        """`ray.get` within the deadline and grace; past it `WorkerStuck`. Ray's errors pass as
        they are (a `RayTaskError` carries the remote traceback)."""
        import ray
        from ray.exceptions import GetTimeoutError

        bound, t0 = self.deadline_s + self.grace_s, time.monotonic()
        try:
            return ray.get(refs, timeout=bound)
        except GetTimeoutError:
            raise WorkerStuck(who, doing, time.monotonic() - t0, bound) from None

    def close(self) -> None:
        import ray

        for a in self.actors:
            ray.kill(a)  # pyright: ignore[reportArgumentType]  # ray types .remote() actors as ActorProxy, kill() as taking ActorHandle


def check_synced(got: list[tuple[str, str | None]], expected: str, whole: str | None) -> None:
    """Raises WeightSyncError naming the replicas whose loaded tensors (or whole state) differ."""
    bad = [k for k, (h, w) in enumerate(got) if h != expected or w != whole]
    if bad:
        raise WeightSyncError(
            f"engine replicas {bad} hold other weights after the sync "
            f"(sha256 {got[bad[0]][0][:12]}... != sent {expected[:12]}..."
            + (", or its frozen base differs" if whole else "")
            + ")"
        )
