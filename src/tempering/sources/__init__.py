"""Task sources: turn outside benchmarks and generators into `Task`s (hidden material in the verifier spec).

Each source registers itself (`sources.registry.register_source`); importing the package
registers the built-in ones.
"""

from tempering.sources import humaneval as _humaneval  # noqa: F401  (registers humaneval)
from tempering.sources import longctx as _longctx  # noqa: F401  (registers longctx:)
from tempering.sources import reasoning_gym as _reasoning_gym  # noqa: F401  (registers reasoning_gym:)
from tempering.sources import safety as _safety  # noqa: F401  (registers safety:)
from tempering.sources import tasks as _tasks  # noqa: F401  (registers builtin:arithmetic)
from tempering.sources import verifiers_envs as _verifiers_envs  # noqa: F401  (registers verifiers:)
