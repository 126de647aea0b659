"""What verifiers share across calls: today, the sandbox that code is judged in.

Passed in, never kept in a module global: the caller decides how long a sandbox
lives and how big it is (an RL loop keeps one for the whole run, `temper verify` one for
one call), and a remote sandbox can replace the local pool without touching a verifier.

    with VerifierContext(sandbox_size=8) as ctx:
        rewards = [score(task, text, ctx) for task, text in samples]
"""

from __future__ import annotations

import atexit
import threading
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from tempering.sandbox.base import Sandbox


class VerifierContextClosed(RuntimeError):
    """A closed context was asked for its sandbox."""


class VerifierContext:
    """The sandbox verifiers use, given or opened on first use; thread-safe.

    Args:
        sandbox: a sandbox the caller owns (it stays open when the context closes); None opens
            a local `SandboxPool` on first use, owned (and closed) by the context. Verifiers
            that run no code (numeric, exact, ...) never open one.
        sandbox_size: slots of the pool the context opens itself (concurrent code runs).
    """

    def __init__(self, sandbox: Sandbox | None = None, sandbox_size: int = 4):
        if sandbox_size < 1:
            raise ValueError(f"sandbox_size must be at least 1, got {sandbox_size}")
        self._given = sandbox
        self._size = sandbox_size
        self._owned: Sandbox | None = None
        self._closed = False
        self._lock = threading.Lock()
        self._shared: dict[str, Any] = {}
        self._shared_lock = threading.Lock()

    def sandbox(self) -> Sandbox:
        """The sandbox to run untrusted code in.

        Raises:
            SandboxUnavailable: no sandbox can run here (opening the local pool failed).
            VerifierContextClosed: the context was closed.
        """
        if self._given is not None:
            return self._given
        with self._lock:
            if self._closed:
                raise VerifierContextClosed("the verifier context is closed; open a new one")
            if self._owned is None:
                from tempering.sandbox import SandboxPool

                self._owned = SandboxPool(size=self._size)
                atexit.register(self._owned.close)  # a context left unclosed still frees its uids and mounts
            return self._owned

    def shared(self, key: str, factory: Callable[[], Any]) -> Any:
        """The object stored under `key`, made by `factory()` on first use (once, thread-safe).

        What a verifier loads once and reuses across calls (the `reward_model` verifier's
        model) lives here, for as long as the context: never in a module global.
        """
        with self._shared_lock:
            if self._closed:
                raise VerifierContextClosed("the verifier context is closed; open a new one")
            if key not in self._shared:
                self._shared[key] = factory()
            return self._shared[key]

    def close(self) -> None:
        """Close the pool the context opened (a given sandbox is the caller's to close). Idempotent."""
        with self._shared_lock:
            self._shared.clear()
        with self._lock:
            owned, self._owned, self._closed = self._owned, None, True
        if owned is not None:
            atexit.unregister(owned.close)
            owned.close()

    def __enter__(self) -> VerifierContext:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
