"""What verifiers share across calls: the sandbox that code is judged in, and the worker
processes that bounded verifiers (`math`) are scored in under a deadline.

Passed in, never kept in a module global: the caller decides how long a sandbox
lives and how big it is (an RL loop keeps one for the whole run, `temper verify` one for
one call), and a remote sandbox can replace the local pool without touching a verifier.

    with VerifierContext(sandbox_size=8) as ctx:
        rewards = [score(task, text, ctx) for task, text in samples]
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import sysconfig
import threading
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable

from tempering.verifiers.errors import VerifierContextClosed as VerifierContextClosed  # re-exported

if TYPE_CHECKING:
    from tempering.sandbox.base import Sandbox
    from tempering.verifiers.bounded import BoundedWorkers


class VerifierContext:
    """The sandbox verifiers use, given or opened on first use; thread-safe.

    Args:
        sandbox: a sandbox the caller owns (it stays open when the context closes); None opens
            a local `SandboxPool` on first use, owned (and closed) by the context. Verifiers
            that run no code (numeric, exact, ...) never open one. The pool the context opens
            also binds this interpreter's library folders read-only under `LIBRARY_ROOT`
            (`library_binds`), which the `reasoning_gym` verifier's scorer needs; code
            candidates can read those files too, as they can read /usr. A given
            sandbox without them fails reasoning-gym scoring with a VerifierError.
        sandbox_size: slots of the pool the context opens itself (concurrent code runs), and
            the number of bounded worker processes it starts at most (`workers()`).
    """

    def __init__(self, sandbox: Sandbox | None = None, sandbox_size: int = 4):
        if sandbox_size < 1:
            raise ValueError(f"sandbox_size must be at least 1, got {sandbox_size}")
        self._given = sandbox
        self._size = sandbox_size
        self._owned: Sandbox | None = None
        self._workers: BoundedWorkers | None = None
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
                from tempering.sandbox import BwrapBackend, SandboxPool
                from tempering.sandbox.backends import DEFAULT_TOOLCHAIN

                backend = BwrapBackend(toolchain=DEFAULT_TOOLCHAIN, libraries=library_binds())
                self._owned = SandboxPool(backend=backend, size=self._size)
                atexit.register(self._owned.close)  # a context left unclosed still frees its uids and mounts
            return self._owned

    def workers(self) -> BoundedWorkers:
        """The worker processes bounded verifiers are scored in (started on first use, owned).

        Raises:
            VerifierContextClosed: the context was closed.
        """
        with self._lock:
            if self._closed:
                raise VerifierContextClosed("the verifier context is closed; open a new one")
            if self._workers is None:
                from tempering.verifiers.bounded import BoundedWorkers

                self._workers = BoundedWorkers(size=self._size)
                atexit.register(self._workers.close)
            return self._workers

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
        """Close the pool and the workers the context opened (a given sandbox is the caller's to close). Idempotent."""
        with self._shared_lock:
            self._shared.clear()
        with self._lock:
            owned, self._owned, self._closed = self._owned, None, True
            workers, self._workers = self._workers, None
        if workers is not None:
            atexit.unregister(workers.close)
            workers.close()
        if owned is not None:
            atexit.unregister(owned.close)
            owned.close()

    def __enter__(self) -> VerifierContext:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


LIBRARY_ROOT = "/opt/tempering/lib"
"""Where the sandbox the context opens shows this interpreter's library folders (read-only)."""


@lru_cache(maxsize=1)
def library_binds() -> tuple[tuple[str, str], ...]:
    """(host folder, inside path) of each folder this interpreter imports third-party libraries from.

    reasoning-gym's folder is among them. Sandboxed scorers run the sandbox's own `python3`
    with `-I -S` and put the inside paths on `sys.path`; the judge refuses a python whose
    minor version differs from the host's (compiled libraries are built for it).
    """
    paths = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    spec = importlib.util.find_spec("reasoning_gym")
    if spec is not None and spec.submodule_search_locations:
        paths += [os.path.dirname(p) for p in spec.submodule_search_locations]
    folders = dict.fromkeys(os.path.realpath(p) for p in paths if os.path.isdir(p))
    return tuple((host, f"{LIBRARY_ROOT}/{i}") for i, host in enumerate(folders))
