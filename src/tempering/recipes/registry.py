"""The objective registry: one `Registration` per training objective makes it a `temper` command
(`cli/train.py` generates the command from it) and a pipeline stage kind (`pipeline/stages.py`
reads the same row), with no further edit.

A new objective is: its loss in `objectives/` (or its own package), its config (a `Strict` model
with `model`, `train`, `out`, `name`), and one `register(Registration(...))` whose `run` is a
`TrainingRecipe` sequence (`recipes.recipe.run_training`). Out-of-tree packages register on
import, and are imported by `load_plugins` (run before the command line and the stage table
are built) when named by an entry point of group `tempering.objectives` or in the
`TEMPERING_PLUGINS` variable (comma-separated module names); `tests/fixtures/kto_toy` is such a
package, three files in all.

`run` is imported lazily (`module:function`) so that building the command line stays cheap.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from tempering.errors import UserError


@dataclass(frozen=True)
class Flag:
    """A command-line option that sets one config key (`--loss` sets `dpo.loss`)."""

    name: str
    key: str
    help: str
    type: type = str


@dataclass(frozen=True)
class Registration:
    """One training objective: what its command and its pipeline stage are built from."""

    name: str
    """The `temper` command and the pipeline stage kind."""
    config: type | str
    """Its config class (the command's YAML file and the stage's keys validate against it), or its
    `module:Class` path where importing it is heavy (imported when the command runs)."""
    run: str | Callable[..., dict[str, Any]]
    """`run(cfg, force=False) -> summary`, or its `module:function` path (imported when called)."""
    help: str
    """The command's one-line help."""
    example: str
    """A shipped example config, named in the command's help."""
    inputs: tuple[str, ...] = ()
    """Dotted config keys of the files the stage reads (see `pipeline.stages.StageKind`)."""
    models: tuple[str, ...] = ("model",)
    """Dotted config keys naming models the stage reads; the first is the `--model` flag."""
    outputs: tuple[str, ...] = ("final",)
    """What later pipeline stages may refer to as `${stage.output}`."""
    flags: tuple[Flag, ...] = ()
    """Options beyond the shared ones (--set, --model, --steps, --out, --name, --full, --force)."""
    dry_run: str | None = None
    """`module:function(cfg, console)` behind `--dry-run` (None: the command has no --dry-run)."""
    set_example: str = "train.steps=20"
    """The `--set` example in the command's help."""
    full_flag: bool = True
    """The command has `--full` (all parameters, `lora: null`): the config has a `lora` key."""

    def runner(self) -> Callable[..., dict[str, Any]]:
        return resolve(self.run)

    def config_class(self) -> type:
        return self.config if isinstance(self.config, type) else resolve(self.config)


def resolve(target: str | Callable[..., Any]) -> Any:
    """A callable, or the one a `module:function` path names."""
    if not isinstance(target, str):
        return target
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


OBJECTIVES: dict[str, Registration] = {}
"""Every registered training objective by name (the builtins below, then plug-ins on import)."""


def register(entry: Registration) -> Registration:
    """Add an objective; its name becomes a `temper` command and a pipeline stage kind.

    Raises:
        ValueError: the name is already registered to a different objective.
    """
    known = OBJECTIVES.get(entry.name)
    if known is not None and known != entry:
        raise UserError(f"objective {entry.name!r} is already registered (to {known.run})")
    OBJECTIVES[entry.name] = entry
    return entry


PLUGINS_ENV = "TEMPERING_PLUGINS"


def load_plugins() -> dict[str, Registration]:
    """Import every plug-in module (entry points `tempering.objectives`, then `$TEMPERING_PLUGINS`);
    each registers its objectives on import. Returns the registry. A module that does not import
    is an error, not a skipped plug-in."""
    import os
    from importlib.metadata import entry_points

    for ep in entry_points(group="tempering.objectives"):
        ep.load()
    for module in filter(None, (m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(","))):
        importlib.import_module(module)
    return OBJECTIVES


def _builtins() -> None:
    from tempering.config import DPOConfig, GRPOConfig, RMConfig, SFTConfig
    from tempering.config.distill import DistillConfig

    for entry in (
        Registration(
            "sft",
            SFTConfig,
            "tempering.recipes.sft:run_sft",
            "Supervised fine-tuning on conversations (assistant-only loss).",
            "examples/sft_demo.yaml",
            inputs=("data.train", "data.eval", "data.replay.data", "chat_template"),
            dry_run="tempering.recipes.sft_dry_run:dry_run_sft",
        ),
        Registration(
            "vision_sft",
            "tempering.config.vision:VisionSFTConfig",
            "tempering.recipes.vision:run_vision_sft",
            "Vision-language SFT on conversations with images: one stage (projector, or LoRA) of the two-stage recipe.",
            "examples/vision_projector.yaml",
            inputs=("data.train", "data.eval", "data.replay.data"),
            set_example="parts=[vision,projector]",
        ),
        Registration(
            "grpo",
            GRPOConfig,
            "tempering.recipes.grpo:run_grpo",
            "RL with verifiable rewards (GRPO family): sample, verify, update.",
            "examples/grpo_arith.yaml",
            inputs=(
                "tasks.source",
                "heldout.tasks.source",
                "domains.*.tasks.source",
                "domains.*.heldout.source",
                "chat_template",
            ),
            set_example="grpo.group_size=4",
        ),
        Registration(
            "agent",
            "tempering.agents.config:AgentConfig",  # imports the rollout engine: not at start-up
            "tempering.recipes.agent:run_agent",
            "Agent training in tool environments: expert SFT, then trajectory-level GRPO (docs/agents.md).",
            "examples/agent/agent_arith.yaml",
            outputs=("final", "trajectories", "recovered"),
            set_example="rl.group_size=4",
        ),
        Registration(
            "dpo",
            DPOConfig,
            "tempering.recipes.dpo:run_dpo",
            "Preference optimisation on prompt/chosen/rejected pairs; the run summary JSON is the last line.",
            "examples/dpo.yaml",
            inputs=("data.train", "data.eval", "chat_template"),
            flags=(
                Flag(
                    "loss",
                    "dpo.loss",
                    "a registered preference loss: dpo | ipo | simpo | kto | orpo (overrides dpo.loss).",
                ),
            ),
            set_example="dpo.loss=ipo",
        ),
        Registration(
            "rm",
            RMConfig,
            "tempering.recipes.rm:run_rm",
            "Reward model (Bradley-Terry) on preference pairs; held-out pairwise accuracy with a CI.",
            "examples/rm.yaml",
            inputs=("data.train", "data.eval", "best_of_n.tasks.source"),
            models=("model", "best_of_n.policy"),
            set_example="rm.margin=0.5",
        ),
        Registration(
            "distill",
            DistillConfig,
            "tempering.recipes.distill:run_distill",
            "Distil a teacher into a smaller student (forward KL + sequence-level CE, or on-policy reverse KL "
            "with --on-policy), e.g. a speculative draft.",
            "examples/distill_draft.yaml",
            inputs=("data.train", "data.eval", "data.replay.data", "rollout.tasks.source"),
            models=("teacher", "student.model"),
            flags=(
                Flag(
                    "on_policy", "on_policy", "On-policy: the student samples, the teacher scores (reverse KL).", bool
                ),
            ),
            set_example="loss.temperature=2",
            full_flag=False,
        ),
    ):
        register(entry)


_builtins()
