"""The verifiers' own exceptions (a leaf module: everything in `verifiers` may import it)."""

from __future__ import annotations


class VerifierError(RuntimeError):
    """The verifier could not judge (its sandbox failed, the task's own tests are broken).

    Never the model's fault: callers must skip the sample, not score it as a failure.
    """


class VerifierContextClosed(RuntimeError):
    """A closed context (or its closed workers) was asked for work."""
