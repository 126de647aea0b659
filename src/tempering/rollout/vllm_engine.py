"""`VLLMEngine`: the `Engine` protocol over vLLM, for GPU hosts (rollouts and serving).

    engine = VLLMEngine(model_dir, tokenizer, "bf16", VLLMSettings())   # refuses without vLLM or a GPU
    engine.sync_weights(trainer_model)      # timed + checksummed; engine.syncs holds the records
    groups = engine.generate(prompts, SamplingParams(n=8, max_new_tokens=256, seed=0))

vLLM is an optional extra (`pip install 'tempering[vllm]'`, GPU hosts only: its wheels pull a
CUDA build of torch); `make` never installs it. Where it or a GPU is absent, building this
engine raises `EngineUnavailable` with the reason and the way out.

Weight sync (the trainer and vLLM share one GPU, vLLM in this process, as TRL's colocate
mode): the trainer's weights are taken under their HF names (LoRA adapters merged into the
base weights, PEFT prefixes dropped: `vllm_named_weights`) and handed to the model's
`load_weights`. Each push is a `SyncRecord`: seconds to load, seconds to checksum, tensors,
bytes, the sha256 of what was sent (it becomes the engine's `identity`), and, with
`verify_sync`, the largest difference between vLLM's and the trainer's log-probs on a probe
sequence (a sync that silently left weights behind fails loudly instead of training on a
stale policy). The bookkeeping is `WeightSync`, tested here on CPU with a torch model as the
receiver; the vLLM calls are tested on a GPU host.

Log-probs are vLLM's "processed_logprobs" (after temperature), the distribution the trainer
recomputes; with top_p < 1 vLLM's also include top-p renormalisation (ours do not), which the
engine-vs-trainer mismatch metric then shows.
"""

from __future__ import annotations

import importlib.util
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from tempering.config import SamplingParams, VLLMSettings
from tempering.errors import UserError
from tempering.hashing import sha256_file, tensors_hash
from tempering.rollout.batching import prompt_seed
from tempering.rollout.engine import Completion, chat_prompt_ids, merged_lora, refuse_grammar

__all__ = [
    "EngineUnavailable",
    "SyncRecord",
    "VLLMEngine",
    "WeightSync",
    "WeightSyncError",
    "completions_from_vllm",
    "vllm_named_weights",
    "vllm_sampling_kwargs",
    "vllm_unavailable",
]


class EngineUnavailable(UserError):
    """The configured engine cannot run on this host (the message says why and what to do)."""


class WeightSyncError(RuntimeError):
    """A weight push did not reach the engine intact."""


def vllm_unavailable() -> str | None:
    """Why vLLM cannot run here, or None when it can."""
    if importlib.util.find_spec("vllm") is None:
        return (
            "engine kind 'vllm' needs vLLM, which is not installed: on a CUDA GPU host run "
            "pip install 'tempering[vllm]' (it pulls a CUDA build of torch); elsewhere use engine.kind: batching"
        )
    if not torch.cuda.is_available():  # cuda-path: vllm
        return (
            "engine kind 'vllm' needs a CUDA GPU and torch sees none (torch.cuda.is_available() is False); "
            "use engine.kind: batching on this host"
        )
    return None


@dataclass
class SyncRecord:
    """One weight push into an engine."""

    index: int
    tensors: int
    bytes: int
    checksum: str
    """sha256 over (name, dtype, shape, bytes) of what was sent (`hashing.tensors_hash`)."""
    load_s: float
    checksum_s: float
    probe_max_abs_diff: float | None = None
    """Largest |engine - trainer| log-prob on the probe sequence (None: not verified)."""


class WeightSync:
    """Pushes named weights through `load`, times and checksums each push, and, given a
    `probe` (returns the largest engine-vs-trainer log-prob difference), verifies it."""

    def __init__(
        self,
        load: Callable[[list[tuple[str, torch.Tensor]]], None],
        probe: Callable[[], float] | None = None,
        tolerance: float = 1e-2,
    ):
        self.load, self.probe, self.tolerance = load, probe, tolerance
        self.records: list[SyncRecord] = []

    def push(self, named: dict[str, torch.Tensor]) -> SyncRecord:
        """Send `named` (name -> tensor); returns the record.

        Raises:
            WeightSyncError: nothing to send, or the probe disagrees beyond the tolerance.
        """
        if not named:
            raise WeightSyncError("weight sync got no tensors to send")
        t0 = time.perf_counter()
        checksum = tensors_hash(named.items())
        t1 = time.perf_counter()
        self.load(list(named.items()))
        t2 = time.perf_counter()
        record = SyncRecord(
            len(self.records),
            len(named),
            sum(t.numel() * t.element_size() for t in named.values()),
            checksum,
            load_s=t2 - t1,
            checksum_s=t1 - t0,
        )
        if self.probe is not None:
            record.probe_max_abs_diff = diff = float(self.probe())
            if not diff <= self.tolerance:
                raise WeightSyncError(
                    f"weight sync {record.index} (sha256 {checksum[:12]}) did not take: the engine's "
                    f"log-probs differ from the trainer's by {diff:.3g} > {self.tolerance}"
                )
        self.records.append(record)
        return record


def vllm_named_weights(model: Any) -> dict[str, torch.Tensor]:
    """The trainer's weights under the plain HF names vLLM loads: LoRA adapters merged into
    copies of the base weights (the trainer's own weights are left exactly as they were)."""
    if not hasattr(model, "merge_adapter"):
        return {name: t.detach() for name, t in model.state_dict().items()}
    out = {}
    with merged_lora(model):
        for name, t in model.state_dict().items():
            if "lora_" in name or "modules_to_save" in name:
                continue
            name = name.removeprefix("base_model.model.").replace(".base_layer.", ".")
            out[name] = t.detach().clone()
    return out


def vllm_sampling_kwargs(params: SamplingParams, seed: int | None) -> dict[str, Any]:
    """vLLM `SamplingParams` keyword arguments for one prompt of an `Engine.generate` call."""
    return {
        "n": params.n,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "max_tokens": params.max_new_tokens,
        "stop": list(params.stop) or None,
        "stop_token_ids": list(params.stop_token_ids) or None,
        "seed": seed,
        "logprobs": 0,
        "skip_special_tokens": False,
    }


def completions_from_vllm(outputs: Sequence[Any]) -> list[list[Completion]]:
    """vLLM `RequestOutput`s (one per prompt, in order) as `Completion` groups."""
    groups = []
    for i, request in enumerate(outputs):
        group = []
        for out in request.outputs:
            token_ids = list(out.token_ids)
            logprobs = [float(step[tok].logprob) for step, tok in zip(out.logprobs or [], token_ids)]
            if len(logprobs) != len(token_ids):
                raise ValueError(f"vLLM returned {len(logprobs)} log-probs for {len(token_ids)} tokens")
            reason = "length" if out.finish_reason == "length" else "stop"
            group.append(Completion(i, token_ids, logprobs, out.text, reason))
        groups.append(group)
    return groups


class VLLMEngine:
    """`Engine` over a vLLM `LLM` in this process (GPU hosts)."""

    def __init__(self, model_dir: str, tokenizer: Any, precision: str, settings: VLLMSettings, probe_model: Any = None):
        reason = vllm_unavailable()
        if reason:
            raise EngineUnavailable(reason)
        # cuda-path: vllm
        from vllm import LLM  # pyright: ignore[reportMissingImports]  # GPU hosts only (the vllm extra)

        self.tokenizer, self.precision, self.settings = tokenizer, precision, settings
        self.llm = LLM(
            model=model_dir,
            dtype={"bf16": "bfloat16", "fp32": "float32"}[precision],
            gpu_memory_utilization=settings.gpu_memory_utilization,
            max_model_len=settings.max_model_len,
            enable_prefix_caching=settings.enable_prefix_caching,
            logprobs_mode="processed_logprobs",
            distributed_executor_backend="external_launcher",
            seed=0,
        )
        self._identity = "vllm:" + sha256_file(model_dir)
        self._probe_model = probe_model
        self.sync = WeightSync(self._load, self._probe if settings.verify_sync and probe_model is not None else None)

    @property
    def identity(self) -> str:
        return self._identity

    @property
    def syncs(self) -> list[SyncRecord]:
        return self.sync.records

    def chat_prompt(self, messages: list[dict[str, Any]]) -> list[int]:
        return chat_prompt_ids(self.tokenizer, messages)

    def sync_weights(self, weights: Any) -> None:
        """Push the trainer's weights (a model or a name -> tensor dict) into vLLM."""
        named = vllm_named_weights(weights) if hasattr(weights, "state_dict") else dict(weights)
        record = self.sync.push(named)
        self._identity = f"vllm-sync:{record.checksum}"

    def _load(self, items: list[tuple[str, torch.Tensor]]) -> None:
        # the colocated driver worker holds the model in this process (TRL's colocate path)
        self.llm.llm_engine.model_executor.driver_worker.model_runner.model.load_weights(items)
        self.llm.reset_prefix_cache()

    def _probe(self) -> float:
        """Largest |vLLM - trainer| log-prob of a fixed 16-token probe's own tokens."""
        from tempering.models.logprobs import token_logprobs

        ids = list(range(100, 116))
        out = self.llm.generate(
            [{"prompt_token_ids": ids}], self._vllm_params(max_tokens=1, prompt_logprobs=0), use_tqdm=False
        )[0]
        engine = torch.tensor([step[tok].logprob for step, tok in zip(out.prompt_logprobs[1:], ids[1:])])
        x = torch.tensor([ids], device=next(self._probe_model.parameters()).device)
        with torch.no_grad():
            trainer, _ = token_logprobs(self._probe_model, x, torch.ones_like(x), torch.ones_like(x))
        return float((engine - trainer[0, 1:].float().cpu()).abs().max())

    def _vllm_params(self, **kwargs: Any) -> Any:
        # cuda-path: vllm
        from vllm import SamplingParams as VSamplingParams  # pyright: ignore[reportMissingImports]  # the vllm extra

        return VSamplingParams(**kwargs)

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Completion]]:
        refuse_grammar(self, params)
        requests = [{"prompt_token_ids": list(p)} for p in prompts]
        sampling = [
            self._vllm_params(**vllm_sampling_kwargs(params, prompt_seed(params.seed, i))) for i in range(len(prompts))
        ]
        return completions_from_vllm(self.llm.generate(requests, sampling, use_tqdm=False))
