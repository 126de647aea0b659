"""Typed configuration for every entry point, by domain. No torch import here.

Every model rejects unknown keys (a typo is an error, not a silently ignored setting) and
documents each field where it is defined. `from tempering.config import X` works for every
config name; new code may import from the domain module.
"""

from tempering.config.base import DEFAULT_MODEL, ConfigError, Options, Paths, RunSettings, Strict, WithOptions
from tempering.config.data import (
    DecontamSettings,
    DedupSettings,
    FeedbackConfig,
    MixConfig,
    MixReplaySettings,
    MixSourceSettings,
    StratifyConfig,
    SynthConfig,
)
from tempering.config.distill import DistillConfig, DistillLoss, StudentSettings
from tempering.config.domains import DomainSettings, HealthSettings, MixtureSettings
from tempering.config.eval import EvalConfig
from tempering.config.grpo import (
    MISMATCH_METRICS,
    GRPOConfig,
    GRPOPolicySettings,
    GRPOSettings,
    HeldoutSettings,
    OffPolicySettings,
    RewardPart,
)
from tempering.config.loading import declared_paths, load_config, resolve_paths, set_dotted
from tempering.config.longctx import LongctxDataConfig, LongctxSettings, RopeScaling, RopeScalingSetting
from tempering.config.merge import MergeConfig
from tempering.config.pipeline import (
    BestOfNStageConfig,
    DecontamStageConfig,
    DedupStageConfig,
    ExportStageConfig,
    GateStageConfig,
    PipelineConfig,
    RebalanceSettings,
    ReleaseStageConfig,
    TrackReplaySettings,
    TrackSettings,
)
from tempering.config.preference import (
    BARE_NUMBER_PATTERN,
    BestOfNSettings,
    DPOConfig,
    PairSampling,
    PairsConfig,
    PreferenceDataSettings,
    PreferenceSettings,
    RMConfig,
    RMDataSettings,
    RMSettings,
)
from tempering.config.sampling import (
    ChatConfig,
    DraftSettings,
    EngineSettings,
    HFEngineSettings,
    SamplingParams,
    SamplingSettings,
    ScaleSettings,
    VLLMSettings,
)
from tempering.config.sft import SFTConfig
from tempering.config.tasks import SOURCE_NAME, TaskSourceSettings
from tempering.config.train import (
    ChatTemplateSetting,
    CheckpointSettings,
    DataSettings,
    GuardSettings,
    LoraSettings,
    MoESettings,
    OptimSettings,
    ReplaySettings,
    TrainSettings,
)
from tempering.config.vision import VisionSFTConfig

__all__ = [
    "Options",
    "WithOptions",
    "RunSettings",
    "DEFAULT_MODEL",
    "Paths",
    "Strict",
    "ConfigError",
    "resolve_paths",
    "declared_paths",
    "set_dotted",
    "load_config",
    "ChatTemplateSetting",
    "LoraSettings",
    "ReplaySettings",
    "DataSettings",
    "OptimSettings",
    "MoESettings",
    "GuardSettings",
    "CheckpointSettings",
    "TrainSettings",
    "SamplingSettings",
    "SamplingParams",
    "VLLMSettings",
    "EngineSettings",
    "DraftSettings",
    "HFEngineSettings",
    "ChatConfig",
    "ScaleSettings",
    "SFTConfig",
    "VisionSFTConfig",
    "TaskSourceSettings",
    "DomainSettings",
    "MixtureSettings",
    "HealthSettings",
    "SOURCE_NAME",
    "RewardPart",
    "GRPOPolicySettings",
    "MISMATCH_METRICS",
    "GRPOSettings",
    "HeldoutSettings",
    "OffPolicySettings",
    "GRPOConfig",
    "EvalConfig",
    "DedupSettings",
    "DecontamSettings",
    "MixSourceSettings",
    "MixReplaySettings",
    "MixConfig",
    "StratifyConfig",
    "FeedbackConfig",
    "SynthConfig",
    "PreferenceDataSettings",
    "PreferenceSettings",
    "DPOConfig",
    "BARE_NUMBER_PATTERN",
    "PairSampling",
    "PairsConfig",
    "RMDataSettings",
    "RMSettings",
    "BestOfNSettings",
    "RMConfig",
    "DedupStageConfig",
    "BestOfNStageConfig",
    "DecontamStageConfig",
    "GateStageConfig",
    "ReleaseStageConfig",
    "ExportStageConfig",
    "PipelineConfig",
    "RebalanceSettings",
    "TrackReplaySettings",
    "TrackSettings",
    "MergeConfig",
    "StudentSettings",
    "DistillLoss",
    "DistillConfig",
    "RopeScaling",
    "RopeScalingSetting",
    "LongctxSettings",
    "LongctxDataConfig",
]
