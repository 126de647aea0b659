"""Parsing Python source from any thread.

CPython 3.11's AST builder keeps its recursion depth per interpreter, not per thread: two threads
parsing at once can fail with "SystemError: AST constructor recursion depth mismatch" (seen with
reward workers in threads). Every `ast.parse` in Tempering goes through this module, which takes
one process-wide lock (a parse is short, and nothing else runs under the lock).
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse_module(source: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse(source, filename)` under the lock; raises what `ast.parse` raises."""
    with _LOCK:
        return ast.parse(source, filename)


def parse_expression(source: str) -> ast.Expression:
    """`ast.parse(source, mode="eval")` under the lock; raises what `ast.parse` raises."""
    with _LOCK:
        return ast.parse(source, mode="eval")
