"""Scale-out on Ray: rollout engine replicas and reward workers as actors (docs/scale.md).

Everything here sits behind the protocols the in-process code already uses: `EngineReplicas`
is an `Engine` (rollout/engine.py) and `RayRewardWorkers` is `RewardWorkers`
(rollout/rollout.py), so GRPO's batch source and the rollout path do not change. Training
itself scales with torchrun (train/distributed.py), not Ray.
"""
