"""Training settings shared by every objective: LoRA, data, optimizer, guard, checkpoints."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tempering.config.base import Paths, Strict, Threads

TrackerName = Literal["tensorboard", "mlflow", "trackio", "wandb"]
"""The experiment trackers `loggers` may name (tracking/trackers.py)."""


class LoraSettings(Strict):
    r: int = Field(default=16, ge=1)
    """LoRA rank."""
    alpha: int = Field(default=32, ge=1)
    """LoRA scaling numerator (scale = alpha / r)."""
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    """Dropout on the LoRA input."""
    target_modules: list[str] | str = "all-linear"
    """Module names to adapt, or "all-linear"."""
    experts: bool = False
    """MoE models: adapt the experts' stacked weight tensors too (PEFT `target_parameters`, one
    adapter per tensor, shared by the experts); an error on a dense model."""
    last_layers: int | None = Field(default=None, ge=1)
    """Adapt only the last N decoder layers (None: all). Backward then stops at the lowest
    adapted layer, which makes RL steps much cheaper."""
    base: Literal["float", "int8"] = "float"
    """The frozen base's Linear layers: as loaded, or `int8` (QLoRA-style: int8 weights with one
    scale per output channel, a quarter of fp32's bytes; the adapters train in float over them)."""


class ReplaySettings(Strict):
    path_fields = ("data",)

    data: Paths
    """General-data files mixed into the stage as a forgetting guard."""
    ratio: float = Field(default=0.1, gt=0.0, lt=1.0)
    """Share of the training examples drawn from `data` (0.1 = 10%)."""


class DataSettings(Strict):
    path_fields = ("train", "eval")

    train: Paths
    """Training files (JSONL, JSON or Parquet rows: `messages`, prompt/completion, ShareGPT, Alpaca;
    with `format: text`, `{"text": ...}` rows)."""
    format: Literal["chat", "text"] = "chat"
    """`chat`: conversations, loss on assistant turns. `text`: plain `{"text": ...}` rows for
    continued pre-training, loss on every token, long documents split at `max_length`."""
    eval: Paths = []
    """Held-out files whose loss is reported before and after training."""
    max_length: int = Field(default=1024, ge=8)
    """Longest rendered conversation in tokens; longer rows are quarantined, never cut."""
    packing: bool = True
    """Pack a batch's conversations into as few rows as fit (no attention across them)."""
    tool_call_style: Literal["auto", "template", "tempering"] = "auto"
    """How tool calls are written: detected from the template ("auto"), or forced."""
    replay: ReplaySettings | None = None
    """Optional replay of general data mixed into this stage."""


class OptimSettings(Strict):
    name: Literal["adamw", "sgd"] = "adamw"
    """`adamw`, or `sgd` (no momentum: it keeps no state per parameter)."""
    state_bits: Literal[32, 8] = 32
    """Bits per value of AdamW's two moment states: 32, or 8 (torchao's `AdamW8bit`: blockwise
    int8 codes, ~4x smaller states; extra `tempering[memory]`; docs/memory.md)."""
    lr: float = Field(default=2e-5, gt=0)
    """Peak learning rate."""
    weight_decay: float = Field(default=0.0, ge=0)
    """AdamW decoupled weight decay."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW betas."""
    warmup_steps: int = Field(default=0, ge=0)
    """Linear warmup from 0 to `lr` over this many optimizer steps."""
    schedule: Literal["cosine", "linear", "constant"] = "cosine"
    """Decay after warmup, down to `lr * min_lr_ratio` at the last step."""
    min_lr_ratio: float = Field(default=0.0, ge=0, le=1)
    """Final learning rate as a fraction of `lr`."""
    max_grad_norm: float | None = Field(default=1.0, gt=0)
    """Clip the global gradient norm to this (None: no clipping, norm still checked)."""

    @model_validator(mode="after")
    def _states(self) -> OptimSettings:
        if self.state_bits != 32 and self.name == "sgd":
            raise ValueError("train.optim.state_bits: 8 quantises optimizer states, and sgd keeps none; use adamw")
        return self


class GuardSettings(Strict):
    enabled: bool = True
    """Skip non-finite and spiking steps; roll back after repeated bad steps."""
    spike_factor: float = Field(default=5.0, gt=1)
    """A loss above spike_factor x the running mean of good losses is a spike."""
    min_history: int = Field(default=5, ge=1)
    """Good steps needed before spike detection starts."""
    max_bad_in_row: int = Field(default=3, ge=1)
    """This many skipped steps in a row roll back to the last good checkpoint."""
    rollback_lr_factor: float = Field(default=0.5, gt=0, le=1)
    """The learning rate is multiplied by this at each rollback."""
    max_rollbacks: int = Field(default=3, ge=0)
    """After this many rollbacks the run stops with an error (it is diverging)."""


class CheckpointSettings(Strict):
    every: int = Field(default=50, ge=1)
    """Save every this many optimizer steps (and at the end)."""
    keep_last: int = Field(default=2, ge=1)
    """Keep only the newest K checkpoints."""


class EarlyStoppingSettings(Strict):
    metric: str
    """The held-out metric watched (`eval_loss`; GRPO and agent RL: `heldout/<suite>/<metric>`,
    e.g. `heldout/tasks/accuracy`); a name with `loss` in it is minimised, any other maximised."""
    patience: int = Field(default=3, ge=1)
    """Stop after this many evaluations in a row without an improvement."""
    min_delta: float = Field(default=0.0, ge=0)
    """An improvement smaller than this does not count."""


class MoESettings(Strict):
    aux_loss: float = Field(default=0.0, ge=0)
    """Weight of the load-balancing loss (Switch: E x sum_e share_e x mean_prob_e, 1 when balanced),
    mean over layers, added to the objective's loss (transformers' `router_aux_loss_coef` is 0.001)."""
    z_loss: float = Field(default=0.0, ge=0)
    """Weight of the router z-loss (mean logsumexp(router logits)^2, ST-MoE), mean over layers."""
    router_replay: bool = False
    """GRPO: the rollout records each token's experts and the trainer's forward pass uses them
    (weights from the current router), so the policy ratio is computed on the sampled routing."""


CONTEXT_PARALLEL_REFUSALS = {
    "fsdp": "train.context_parallel with train.fsdp is not supported yet (both would split over the same "
    "processes: parameters and sequences are not sharded together); drop one of them",
    "compile": "train.context_parallel with train.compile is not supported yet (each attention layer "
    "runs a collective, which the compiled layers do not trace); drop one of them",
    "packing": "train.context_parallel splits each padded row over the processes; packed rows "
    "(several conversations with restarting positions) are not split yet: set data.packing: false",
}
"""Why a key refuses `train.context_parallel` > 1 at config load (one line each)."""


class TrainSettings(Strict):
    steps: int | None = Field(default=None, ge=1)
    """Optimizer steps to run (exactly one of `steps` and `epochs`)."""
    epochs: float | None = Field(default=None, gt=0)
    """Passes over the training examples instead of `steps`: steps = ceil(epochs x examples /
    (batch_size x grad_accum)), `batch_size` being the global micro-batch under torchrun too;
    logged at the start (SFT, DPO, RM, distill)."""
    resume_from: str | None = None
    """A checkpoint dir (`runs/NAME/checkpoints/step-00000040`) to resume from: weights, optimizer,
    data position and RNG. Set by `--resume-from`; a run dir with checkpoints of its own may only
    rewind to one of them."""
    eval_every: int | None = Field(default=None, ge=1)
    """Measure the held-out set every this many steps (SFT/DPO/RM/distill: `data.eval`, as `eval_loss`
    and `eval_<key>`; GRPO: the `heldout` tasks, as `heldout/tasks/<metric>`, default 10 there;
    agent RL: each eval suite, as `heldout/<suite>/<metric>`): `eval` events of the run's event
    stream (metrics.jsonl and every tracker)."""
    keep_best: str | None = None
    """A metric of the `eval_every` measure (`eval_loss`, `heldout/tasks/accuracy`, ...): the best
    model by it is saved as `best/` in the run dir (model spec `runs/NAME@best`)."""
    early_stopping: EarlyStoppingSettings | None = None
    """Stop when the `eval_every` measure stops improving (with a checkpoint; the run counts as finished)."""
    batch_size: int = Field(default=8, ge=1)
    """Conversations per micro-batch (packing changes their layout, not their number)."""
    grad_accum: int = Field(default=1, ge=1)
    """Micro-batches per optimizer step; the loss is normalised over all of them."""
    precision: Literal["auto", "bf16", "fp32"] = "auto"
    """bf16 autocast or plain fp32; "auto" = bf16 where the hardware runs it natively (GPU, AMX CPU)."""
    seed: int = 0
    """Seeds data order, initialisation of adapters and sampling."""
    threads: Threads = "auto"
    """torch intra-op threads: "auto" (the cores free now: usable cores minus the load average), a count, or null (torch's default)."""
    compile: bool = False
    """torch.compile each decoder layer (dynamic shapes): ~1 min once, then faster steps."""
    gradient_checkpointing: bool = False
    """Recompute each decoder layer's activations in the backward pass instead of keeping them
    (transformers' own, non-reentrant): less memory at long context for ~1/3 more compute."""
    fsdp: bool = False
    """Shard parameters, gradients and optimizer state over the torchrun processes (FSDP2,
    `fully_shard` per decoder layer); full-parameter training only (docs/scale.md)."""
    context_parallel: int = Field(default=1, ge=1)
    """Split each sequence over this many torchrun processes (context parallelism, SFT only):
    each holds 1/N of every row's tokens and attends over the gathered keys and values, for
    about 1/N of the activation memory; the world size must equal it, and `data.packing`, `fsdp`
    and `compile` must be off (docs/scale.md)."""
    collective_timeout_s: float = Field(default=600.0, gt=0)
    """Under torchrun: seconds a rank waits in a collective (a gradient all-reduce, a barrier) for
    its peers; past it the run stops with one line naming the collective, the rank and the step
    (a hung peer), as it does at once when a peer's connection closes (a dead one). Unused by one
    process: it has no peers."""
    moe: MoESettings | None = None
    """Mixture-of-experts models: balance terms and router replay (docs/moe.md); an error on a dense model."""
    max_minutes: float | None = Field(default=None, gt=0)
    """Stop early (with a checkpoint) once training has run this long in this process."""
    log_every: int = Field(default=1, ge=1)
    """Write metrics every this many steps."""
    loggers: list[TrackerName] = []
    """Experiment trackers that mirror every metrics.jsonl record, the config and the lineage
    (`tensorboard`, `mlflow`, `trackio`, `wandb` offline; extra `tempering[trackers]`; docs/integrations.md)."""
    optim: OptimSettings = OptimSettings()
    """Optimizer (AdamW) and learning-rate schedule."""
    guard: GuardSettings = GuardSettings()
    """Anomaly guard: skip non-finite or spiking steps, roll back on repeated ones."""
    checkpoint: CheckpointSettings = CheckpointSettings()
    """How often checkpoints are written and how many are kept."""

    @model_validator(mode="after")
    def _one_length(self) -> TrainSettings:
        if (self.steps is None) == (self.epochs is None):
            raise ValueError("set exactly one of train.steps and train.epochs")
        if self.moe is not None and self.moe.router_replay and self.gradient_checkpointing:
            raise ValueError(
                "train.moe.router_replay replays the grouped prompt-then-completion passes, which "
                "train.gradient_checkpointing replaces by whole rows; turn one of them off"
            )
        if self.context_parallel > 1:
            for key in ("fsdp", "compile"):
                if getattr(self, key):
                    raise ValueError(CONTEXT_PARALLEL_REFUSALS[key])
        needs_eval = [k for k in ("keep_best", "early_stopping") if getattr(self, k) is not None]
        if needs_eval and self.eval_every is None:
            raise ValueError(f"train.{needs_eval[0]} needs train.eval_every (how often the held-out set is measured)")
        return self

    @property
    def total_steps(self) -> int:
        """`steps`, once set (a recipe turns `epochs` into steps before training)."""
        if self.steps is None:
            raise ValueError("train.epochs has not been turned into steps yet")
        return self.steps


class ChatTemplateSetting(Strict):
    """The `chat_template` key of the training configs that render chats (SFT, DPO, GRPO)."""

    path_fields = ("chat_template",)

    chat_template: str | None = None
    """Replaces the model's chat template: a Jinja file, or the template inline (it holds `{`);
    recorded with the run's inputs and saved with the trained model."""

    @classmethod
    def names_no_file(cls, field: str, value: str) -> bool:
        return "{" in value  # an inline template, not a path
