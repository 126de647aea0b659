"""Task sources: turn outside benchmarks and generators into `Task`s (hidden material in the verifier spec).

Each source registers itself (`sources.registry.register_source`); importing the package imports
every module in it, so a new source is one new module here and no edit elsewhere (the built-ins:
builtin:arithmetic and vision: in `tasks`, `humaneval`, `longctx:`, `reasoning_gym:`, `safety:`,
`verifiers:`). None of them imports torch or a source's own package at import time.
"""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
