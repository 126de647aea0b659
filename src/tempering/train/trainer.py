"""The one training loop. Every objective (SFT, DPO, RM, GRPO) runs in it.

It owns what must be written once: precision (bf16 autocast where native, see models/precision.py), accumulation
with one normaliser per optimizer step, clipping, the LR schedule, the anomaly guard
(skip / rollback), atomic checkpoints with exact resume, and per-step metrics.

Objectives plug in through `Objective`: `units(batch)` is the batch's share of the
normaliser (target tokens for SFT, pairs for DPO) and `loss(model, batch)` returns the
*summed* loss, which the trainer divides by the units of the whole optimizer step.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

import torch

from tempering.batches import Batch, check_batch_ids, embedding_rows, to_device
from tempering.config import TrainSettings
from tempering.deadlines import WorkerStuck
from tempering.errors import UserError
from tempering.models.allocator import map_large_blocks
from tempering.models.checkpointing import enable_checkpointing
from tempering.models.cpu_features import refusal
from tempering.models.precision import auto_reason, autocast, resolve_precision
from tempering.models.routing import is_moe
from tempering.models.threads import set_threads
from tempering.tracking.context import RunContext
from tempering.train import distributed, fsdp
from tempering.train.checkpoint import (
    CheckpointError,
    list_checkpoints,
    load_checkpoint,
    remove_partial,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from tempering.train.consumed import ConsumedLog
from tempering.train.guard import AnomalyGuard
from tempering.train.metrics import console, quiet_console
from tempering.train.moe import MoEWatch, check_moe_settings, tap_for
from tempering.train.optimizer import build_optimizer, set_lr
from tempering.train.progress import TrainProgress
from tempering.train.schedule import lr_at

# A batch is a typed one (`tempering.batches`: GRPO) or, for the sources not yet typed, a dict of tensors.
AnyBatch = Batch | dict[str, Any]


class Objective(Protocol):
    """Each objective reads its own batch type (`GRPOObjective`: `GRPOBatch`), hence `Any` here."""

    name: str

    def units(self, batch: Any) -> float: ...

    def loss(self, model: Any, batch: Any) -> tuple[torch.Tensor, Mapping[str, float | torch.Tensor]]: ...

    """(summed loss, stats); a stat may stay a 0-dim tensor on the model's device (read once per step)."""


class BatchSource(Protocol):
    def next_batch(self) -> Any: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...

    # optional: def stats(self) -> dict[str, float]  (merged into each step record)
    # optional: def consumed(self) -> list  (ids drawn since the last call: the run's consumed.jsonl)
    # optional: def on_weights(self, version: int, step: int) -> None  (the weights are now `version`)


class TrainingDiverged(RuntimeError):
    """Rollbacks did not stop the anomalies."""


@dataclass
class TrainResult:
    steps: int
    losses: list[float]
    counts: dict[str, int]
    run_dir: Path
    real_tokens: int = 0
    seconds: float = 0.0
    resumed_from: int | None = None
    history: list[dict] = field(default_factory=list)
    loss_first: float | None = None
    """The loss of the run's first step, kept across resumes (`losses` holds this attempt's)."""
    stopped_early: str | None = None


@torch.no_grad()
def evaluate(model: Any, objective: Objective, batches: list[Any], precision: str = "auto") -> float:
    """Mean loss per unit over fixed batches (no update)."""
    precision = resolve_precision(precision)
    was_training = model.training
    model.eval()
    total, units = 0.0, 0
    device = next(model.parameters()).device
    for batch in batches:
        with autocast(precision, device):
            loss_sum, _ = objective.loss(model, _to(batch, device))
        total += float(loss_sum)
        units += objective.units(batch)
    model.train(was_training)
    return total / max(units, 1)


def compile_layers(model: Any) -> None:
    """Compile each decoder layer in place (parameter names unchanged, so checkpoints match).

    Per layer rather than the whole model: one graph serves all layers of a kind, and
    packed batches of changing shape stay on one dynamic-shape graph.
    """
    layers = getattr(model.get_decoder(), "layers", None)
    for module in layers if layers is not None else [model.get_decoder()]:
        module.compile(dynamic=True)


def _checkpoint_dir(spec: str) -> Path:
    """The checkpoint dir `--resume-from` names (a path, or `runs/NAME@step-40`)."""
    from tempering.models.checkpoints import checkpoint_path, is_checkpoint

    path = checkpoint_path(spec)
    if path is None or not is_checkpoint(path):
        raise CheckpointError(f"--resume-from {spec}: not a checkpoint dir (expected runs/NAME/checkpoints/step-N)")
    return path


def _to(batch: AnyBatch, device: torch.device) -> AnyBatch:
    if not isinstance(batch, dict):
        return batch.to(device)
    return {k: to_device(v, device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def _read_step(losses: list[torch.Tensor], stats_of: dict[str, list[float | torch.Tensor]]) -> tuple[float, dict]:
    """(the micro-batches' summed loss, each stat's mean over them) with every tensor among them
    read to the host in one copy."""
    keys = sorted(stats_of)
    flat = [v for k in keys for v in stats_of[k]]
    tensors = [torch.stack([x.double() for x in losses]).sum()]
    tensors += [v.detach().double().reshape(()) for v in flat if isinstance(v, torch.Tensor)]
    read = iter(torch.stack(tensors).tolist())
    loss = next(read)
    values = iter([next(read) if isinstance(v, torch.Tensor) else float(v) for v in flat])
    return loss, {k: sum(next(values) for _ in stats_of[k]) / len(stats_of[k]) for k in keys}


def _real_tokens(batch: AnyBatch) -> int:
    """Non-pad tokens of a micro-batch (throughput); 0 where a dict batch does not count them."""
    return int(batch.get("n_real_tokens", 0)) if isinstance(batch, dict) else batch.n_real_tokens


class Trainer:
    """Runs `settings.steps` optimizer steps of `objective` over `batches` into `run_dir`.

    Resumes from the newest checkpoint in `run_dir/checkpoints` when one exists.
    `callbacks` are called as cb(step, record) after every applied step. Every record and event
    goes through `run` (`tracking.context.RunContext`: metrics.jsonl on rank 0 and the trackers);
    without one, the Trainer opens its own on `run_dir` (trackers `settings.loggers`, given
    `config` and `lineage`) and closes it when `fit` ends.
    """

    def __init__(
        self,
        model: Any,
        objective: Objective,
        batches: BatchSource,
        settings: TrainSettings,
        run_dir: Path,
        callbacks: Sequence[Callable[[int, dict], None]] = (),
        config: dict[str, Any] | None = None,
        lineage: dict[str, str] | None = None,
        run: RunContext | None = None,
    ):
        from accelerate import Accelerator

        # Under torchrun: data-parallel over the process group (train/distributed.py).
        self.world = distributed.init(settings.collective_timeout_s)
        if "collective_timeout_s" in settings.model_fields_set and not distributed.grouped():
            raise UserError("train.collective_timeout_s does nothing in one process (no torchrun): it has no peers")
        if getattr(batches, "shard", (0, 1)) != (self.world.rank, self.world.size):
            raise UserError(
                f"{objective.name}: its batches are not sharded over the {self.world.size} processes "
                "of this torchrun; only SFT and DPO train data-parallel so far, run this with one process"
            )
        # Precision is ours (explicit autocast below); accelerate places the model. It is not
        # wrapped in DDP: gradients are summed across ranks after the backward passes.
        self.accelerator = Accelerator(cpu=not torch.cuda.is_available())  # cuda-path: trainer-cuda
        self.console = console if self.world.main else quiet_console
        set_threads(settings.threads, log=lambda line: self.console.print(f"[dim]{line}[/dim]"))
        self.settings, self.objective, self.batches = settings, objective, batches
        self.run_dir = Path(run_dir)
        self.ckpt_dir = self.run_dir / "checkpoints"
        self.callbacks = list(callbacks)
        check_moe_settings(model, settings.moe)
        self.model = self._place(model, settings)
        self.vocab = embedding_rows(model)  # token ids are checked against it before each micro-batch moves
        self.moe = MoEWatch(self.model, settings.moe) if is_moe(self.model) else None
        self.named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        if not self.named:
            raise UserError("model has no trainable parameters")
        opt = build_optimizer([p for _, p in self.named], settings.optim)
        self.optimizer = self.accelerator.prepare_optimizer(opt)
        self.guard = AnomalyGuard(settings.guard)
        self.owns_run = run is None
        self.run = run or RunContext.open(self.run_dir, self.world.rank, settings.loggers, config, lineage)
        self.consumed = ConsumedLog(self.run_dir / "consumed.jsonl" if self.world.main else None)
        self.step, self.lr_scale, self.real_tokens = 0, 1.0, 0
        self.weights_version = 0  # +1 per weight change (an applied step, a rollback); see `tempering.versions`
        self.loss_first: float | None = None  # the run's first step's loss, saved in each checkpoint
        self.stop_reason: str | None = None
        self.precision = resolve_precision(settings.precision)
        procs = f" x {self.world.size} processes" if self.world.size > 1 else ""
        self.console.print(
            f"[dim]{objective.name}: precision {self.precision}{auto_reason(settings.precision)} "
            f"on {self.accelerator.device}{procs}[/dim]"
        )

    def _place(self, model: Any, settings: TrainSettings) -> Any:
        """The model on its device with the memory levers the settings ask for (docs/training.md)."""
        if settings.fsdp and self.world.size == 1:
            raise UserError(
                "train.fsdp shards over torchrun processes and this is one process; run under "
                "`torchrun --nproc_per_node N` (N >= 2) or set train.fsdp: false"
            )
        if settings.gradient_checkpointing:
            enable_checkpointing(model)
            map_large_blocks()  # freed activations go back to the OS (models/allocator.py)
        if settings.compile:
            # cuda-path: compile-cuda (on a GPU the layers compile for CUDA, no host compiler probe)
            reason = refusal("inductor_cpp") if self.accelerator.device == torch.device("cpu") else None
            if reason is None:
                compile_layers(model)
            else:  # a host without a compiler still trains: eagerly, said once
                self.console.print(f"[yellow]train.compile: layers run eagerly ({reason})[/yellow]")
        model = model.to(self.accelerator.device)
        if settings.fsdp:
            fsdp.shard_model(model)
        return model

    def final_state_dict(self) -> dict[str, torch.Tensor] | None:
        """What `save_pretrained` should write: None (the model's own state) unless parameters are
        sharded, then the full tensors, gathered to rank 0 (every rank must call this)."""
        if not self.settings.fsdp:
            return None
        return fsdp.full_state_dict(self.model, self.world.main)

    # -- checkpoints -------------------------------------------------------------------
    def _state(self) -> dict:
        return {
            "step": self.step,
            "lr_scale": self.lr_scale,
            "data": self.batches.state_dict(),
            "guard": self.guard.state_dict(),
            "real_tokens": self.real_tokens,
            "world_size": self.world.size,
            "consumed_steps": self.consumed.count,  # lines of consumed.jsonl this checkpoint covers
            "loss_first": self.loss_first,
            "weights_version": self.weights_version,
        }

    def save(self) -> Path:
        """Rank 0 writes the checkpoint (with every rank's RNG state); all ranks wait for it."""
        rngs = distributed.gather(rng_state())
        path = self.ckpt_dir / f"step-{self.step:08d}"
        if self.settings.fsdp:  # every rank gathers its shards; rank 0 writes full tensors
            weights = fsdp.full_weights(self.named, self.world.main)
            optimizer = fsdp.full_optimizer_state(self.optimizer, self.world.main)
        else:
            weights, optimizer = {n: p for n, p in self.named}, self.optimizer.state_dict()
        if rngs is not None:  # rank 0: the gathered states (self.world.main)
            self.consumed.sync()
            path = save_checkpoint(
                self.ckpt_dir,
                self.step,
                weights,
                optimizer,
                self._state(),
                self.settings.checkpoint.keep_last,
                rng={"ranks": rngs} if len(rngs) > 1 else rngs[0],
            )
        distributed.barrier()
        return path

    def _restore(self, path: Path, full: bool) -> dict:
        ckpt = load_checkpoint(path)
        distributed.check_world_size(ckpt["state"].get("world_size", 1), self.world)
        if self.settings.fsdp:  # each rank keeps its shard of the full tensors
            fsdp.load_full_weights(self.named, ckpt["weights"])
            fsdp.load_full_optimizer_state(self.optimizer, ckpt["optimizer"], [p for _, p in self.named])
        else:
            with torch.no_grad():
                for n, p in self.named:
                    p.copy_(ckpt["weights"][n])
            self.optimizer.load_state_dict(ckpt["optimizer"])
        state = ckpt["state"]
        self.step, self.lr_scale = state["step"], state["lr_scale"]
        if full:  # resume: everything as it was; rollback keeps moving forward through data
            rng = ckpt["rng"]
            set_rng_state(rng["ranks"][self.world.rank] if "ranks" in rng else rng)
            self.batches.load_state_dict(state["data"])
            self.guard.load_state_dict(state["guard"])
            self.real_tokens = state["real_tokens"]
            self.loss_first = state.get("loss_first")
            self._weights_changed(state.get("weights_version", state["step"]))  # older checkpoints: one per step
        return state

    def _weights_changed(self, version: int | None = None) -> None:
        """The weights are a new version (next, or `version` on resume); a batch source that stamps
        its samples with it hears so (its optional `on_weights`)."""
        self.weights_version = self.weights_version + 1 if version is None else version
        if (tell := getattr(self.batches, "on_weights", None)) is not None:
            tell(self.weights_version, self.step)

    def _at_boundary(self) -> bool:
        """Whether the batch source resumes exactly from here (a GRPO source is not in the middle of
        serving one rollout batch several times); a due checkpoint waits for it."""
        return getattr(self.batches, "at_boundary", True)

    def _rollback(self) -> None:
        if self.guard.counts["rollbacks"] >= self.settings.guard.max_rollbacks:
            raise TrainingDiverged(
                f"step {self.step}: {self.settings.guard.max_bad_in_row} bad steps in a row after "
                f"{self.guard.counts['rollbacks']} rollbacks; stopping (see {self.run.metrics_path})"
            )
        path = list_checkpoints(self.ckpt_dir)[-1]
        scale = self.lr_scale * self.settings.guard.rollback_lr_factor
        state = self._restore(path, full=False)
        self._weights_changed()  # older weights, yet a new version: samples are never stamped twice alike
        self.lr_scale = scale
        self.guard.record_rollback(state["guard"]["recent"])
        self.run.event("rollback", to=path.name, step=self.step, lr_scale=scale)
        self.save()  # so a resume after this point keeps the lowered LR and the rollback count

    # -- one optimizer step ------------------------------------------------------------
    def _forward_backward(self, micro: list[dict]) -> tuple[float, dict]:
        """Summed losses / units of the whole step (over all ranks); gradients summed over ranks.

        The micro-batches' losses and stats stay on the device until the step's one host read
        (a GPU sync per step, not several per micro-batch); a non-finite loss then skips the step
        on every rank (its gradients are not applied)."""
        device = self.accelerator.device
        total_units = distributed.sum_over_ranks([sum(self.objective.units(b) for b in micro)])[0]
        losses: list[torch.Tensor] = []
        stats_of: dict[str, list[float | torch.Tensor]] = {}
        for k, batch in enumerate(micro):
            # the last guard before the device: token ids inside the embedding (batches.check_token_ids)
            check_batch_ids(batch, self.vocab, f"training step {self.step + 1}, micro-batch {k}")
            batch = _to(batch, device)
            with tap_for(self.moe, batch) as tap:  # MoE: router hooks through the backward pass
                with autocast(self.precision, device):
                    loss_sum, stats = self.objective.loss(self.model, batch)
                for key, value in stats.items():
                    stats_of.setdefault(key, []).append(value)
                loss = loss_sum / max(total_units, 1)
                # the balance term once per step: gradients are summed over micro-batches and ranks
                balance = self.moe.term(tap) / (len(micro) * self.world.size) if self.moe is not None else 0.0
                self.accelerator.backward(loss + balance)
            losses.append(loss.detach())
        loss_value, extra = _read_step(losses, stats_of)
        if distributed.any_rank(not math.isfinite(loss_value)):  # every rank skips the step, or none
            return float("nan"), extra
        if not self.settings.fsdp:  # FSDP's reduce-scatter has summed them already
            distributed.all_reduce_grads(p for _, p in self.named)
        keys = sorted(extra)
        summed = distributed.sum_over_ranks([loss_value] + [extra[k] for k in keys])
        return summed[0], {k: v / self.world.size for k, v in zip(keys, summed[1:])}

    def _grad_norm(self) -> float:
        clip = self.settings.optim.max_grad_norm
        params = [p for _, p in self.named]
        if self.settings.fsdp:  # over sharded gradients: torch reduces the norm over ranks
            norm = torch.nn.utils.clip_grad_norm_(params, clip if clip else float("inf"))
            return float(fsdp.full_tensor(norm))
        norm = self.accelerator.clip_grad_norm_(params, clip if clip else float("inf"))
        if norm is None:  # accelerate returns None only under DeepSpeed, which this Trainer does not use
            raise RuntimeError("the gradient norm is unknown (accelerate clipped without returning it)")
        return float(norm)

    def train_step(self) -> dict | None:
        """One optimizer step; returns its record, or None when the guard skipped it."""
        t0 = time.perf_counter()
        try:
            micro = [self.batches.next_batch() for _ in range(self.settings.grad_accum)]
        except WorkerStuck as exc:  # a worker's one line names the step it held up
            exc.at_step(self.step + 1)
            raise
        real = int(distributed.sum_over_ranks([sum(_real_tokens(b) for b in micro)])[0])
        loss, extra = self._forward_backward(micro)
        grad_norm = self._grad_norm() if math.isfinite(loss) else None
        bad = self.guard.check(loss, grad_norm, spikes=getattr(self.objective, "loss_spikes", True))
        drawn = getattr(self.batches, "consumed", None)  # optional on a BatchSource
        self.consumed.append(self.step + 1, drawn() if drawn is not None else [], bad)
        if not self.settings.guard.enabled and (grad_norm is None or not math.isfinite(grad_norm)):
            raise TrainingDiverged(f"step {self.step}: non-finite loss or gradient with the guard disabled")
        if bad:
            if self.moe is not None:
                self.moe.stats()  # the skipped step's router statistics are dropped with it
            self.optimizer.zero_grad(set_to_none=True)
            self.run.event("skip", reason=bad, step=self.step, loss=loss, grad_norm=grad_norm)
            if self.guard.record_bad(bad):
                self._rollback()
            return None
        lr = lr_at(self.step, self.settings.total_steps, self.settings.optim, self.lr_scale)
        set_lr(self.optimizer, lr)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.guard.record_good(loss)
        self.step += 1
        self._weights_changed()
        self.real_tokens += real
        dt = time.perf_counter() - t0
        stats = getattr(self.batches, "stats", None)  # optional on a BatchSource
        source_stats = stats() if stats is not None else {}
        moe_stats = self.moe.stats() if self.moe is not None else {}
        return {
            "step": self.step,
            "loss": loss,
            "lr": lr,
            "grad_norm": grad_norm,
            "real_tokens": real,
            "tokens_per_s": real / dt,
            "step_s": dt,
            **extra,
            **source_stats,
            **moe_stats,
        }

    # -- the loop ----------------------------------------------------------------------
    def fit(self) -> TrainResult:
        """Train to `settings.steps`, resuming from the newest checkpoint if there is one."""
        resumed = None
        for stale in remove_partial(self.ckpt_dir) if self.world.main else []:
            self.run.event("removed_partial_checkpoint", path=stale.name)
        distributed.barrier()
        start = self._resume_point()
        if start is not None:
            state = self._restore(start, full=True)
            resumed = state["step"]
            self.run.event("resume", step=resumed, checkpoint=str(start))
            elsewhere = start.resolve().parent != self.ckpt_dir.resolve()
            if elsewhere:  # another run's checkpoint: its record of consumed data up to there is ours too
                self.consumed.adopt(start.parent.parent / "consumed.jsonl", state.get("consumed_steps"))
            # steps consumed after that checkpoint are done again: their lines go
            if dropped := self.consumed.start(state.get("consumed_steps")):
                self.run.event("consumed_cut", steps=dropped, checkpoint=start.name)
            if elsewhere:
                self.save()  # another run's checkpoint: this run's own copy is the rollback target
        else:
            self.consumed.start(0)
            self.save()  # step 0: the rollback target before the first periodic checkpoint
        self.model.train()
        try:
            return self._loop(resumed)
        finally:
            if self.owns_run:
                self.run.close()
            self.consumed.close()

    def _resume_point(self) -> Path | None:
        """The checkpoint to resume from: `train.resume_from` when given, else the run's newest.

        The run's own checkpoints win over a `resume_from` elsewhere (a killed run resumes where it
        was); `resume_from` inside this run rewinds to it, and the newer checkpoints are set aside
        as `rewound-step-*`, so pruning and rollbacks never mix two timelines.
        """
        existing = list_checkpoints(self.ckpt_dir)
        given = _checkpoint_dir(self.settings.resume_from) if self.settings.resume_from else None
        if given is None or (existing and given.resolve().parent != self.ckpt_dir.resolve()):
            if given is not None:
                self.run.event("resume_from_ignored", checkpoint=str(given), newest=existing[-1].name)
                self.console.print(
                    f"[yellow]this run has checkpoints of its own: resuming from {existing[-1].name}, "
                    f"not {given} (pick a new --name to start from it)[/yellow]"
                )
            return existing[-1] if existing else None
        if self.world.main:
            for newer in (p for p in existing if p.name > given.name):
                newer.rename(newer.with_name("rewound-" + newer.name))
        distributed.barrier()
        return given

    def request_stop(self, reason: str) -> None:
        """Stop after the current step, with a checkpoint (a callback's early stop)."""
        self.stop_reason = reason

    def _loop(self, resumed: int | None) -> TrainResult:
        losses, history, t_start = [], [], time.perf_counter()
        every, due = self.settings.checkpoint.every, False
        with TrainProgress(self.objective.name, self.settings.total_steps, self.step, self.console) as progress:
            limit = self.settings.max_minutes * 60 if self.settings.max_minutes else None
            while self.step < self.settings.total_steps:
                # rank 0's clock decides, so every rank stops at the same step
                # and only where a resume is exact (a GRPO batch served twice: after its second update)
                if (
                    limit is not None
                    and self._at_boundary()
                    and distributed.broadcast(time.perf_counter() - t_start > limit)
                ):
                    self.run.event("time_limit", step=self.step, minutes=self.settings.max_minutes)
                    self.console.print(
                        f"[yellow]time limit of {self.settings.max_minutes} min reached at "
                        f"step {self.step}; saving and stopping[/yellow]"
                    )
                    self.save()
                    break
                record = self.train_step()
                if record is None:
                    continue
                record["skipped_total"] = self.guard.counts["skipped"]
                losses.append(record["loss"])
                if self.loss_first is None:
                    self.loss_first = record["loss"]
                history.append(record)
                if self.step % self.settings.log_every == 0:
                    self.run.log(record)
                progress(self.step, record)
                due = due or self.step % every == 0
                if self.step == self.settings.total_steps or (due and self._at_boundary()):
                    self.save()
                    due = False
                for cb in self.callbacks:
                    cb(self.step, record)
                if self.stop_reason is not None:
                    self.run.event("stop", step=self.step, reason=self.stop_reason)
                    self.console.print(f"[yellow]stopping at step {self.step}: {self.stop_reason}[/yellow]")
                    if self.step != self.settings.total_steps:
                        self.save()
                    break
        counts = {k: int(v) for k, v in self.guard.counts.items()}
        return TrainResult(
            self.step,
            losses,
            counts,
            self.run_dir,
            self.real_tokens,
            time.perf_counter() - t_start,
            resumed,
            history,
            self.loss_first,
            self.stop_reason,
        )
