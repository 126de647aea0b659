"""Runs inside the sandbox: one answer scored by a reasoning-gym dataset's own `score_answer`.

    python3 -I -S reasoning_gym_judge.py payload.json

Standard library only at import; reasoning-gym comes from `payload["paths"]` (read-only
binds of the host's library folders). Several datasets `eval` the answer or give it to
`sympy.parse_expr`, so the answer may run code here: that is why this runs in the sandbox,
in a fresh process per answer (nothing it changes outlives the call).

A tripwire (an audit hook, which Python cannot remove once added) ends the process with
`TRIPWIRE_EXIT` as soon as the answer's code starts a program, opens a socket, loads a C
library or opens a file for writing: no scorer needs those, so the host scores it 0 with
`cheat:code_execution`. Code that stays inside Python can still pick its own score for this
one call (it runs in the scorer's process); it cannot reach the host or any other call.

Prints `MAGIC {"stage": "ready"}` once the dataset is built (before the answer is touched),
then `MAGIC {"score": x}` or `MAGIC {"error": "..."}`; exit 0.
"""

import importlib
import json
import os
import sys
import types

MAGIC = "TEMPERING-REASONING-GYM"
TRIPWIRE_EXIT = 86
TRIPWIRE_EVENTS = frozenset(
    {
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "os.forkpty",
        "os.kill",
        "os.killpg",
        "subprocess.Popen",
        "pty.spawn",
        "socket.__new__",
        "socket.connect",
        "socket.bind",
        "ctypes.dlopen",
        "ctypes.dlsym",
        "ctypes.cdata",
    }
)
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def tripwire(event, args, _exit=os._exit):
    if event in TRIPWIRE_EVENTS or (event == "open" and writes(args)):
        _exit(TRIPWIRE_EXIT)


def writes(args):
    mode, flags = (args[1], args[2]) if len(args) >= 3 else (None, 0)
    if isinstance(mode, str):
        return any(c in mode for c in "wax+")
    return isinstance(flags, int) and bool(flags & WRITE_FLAGS)


def import_dataset_module(paths, module):
    """Import only the module that defines the dataset (the whole package takes seconds).

    Its parent packages are stood in for by empty packages, so their `__init__` (which
    imports every generator) does not run; a module that needs one falls back to the full import.
    """
    sys.path[:0] = paths
    parts = module.split(".")
    root = next((os.path.join(p, parts[0]) for p in paths if os.path.isdir(os.path.join(p, parts[0]))), None)
    if root is not None:
        for i in range(1, len(parts)):
            name = ".".join(parts[:i])
            package = types.ModuleType(name)
            package.__path__ = [os.path.join(root, *parts[1:i])]
            sys.modules[name] = package
        try:
            importlib.import_module(module)
            return
        except ImportError:
            for name in [n for n in sys.modules if n == parts[0] or n.startswith(parts[0] + ".")]:
                del sys.modules[name]
    importlib.import_module(parts[0])


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        payload = json.load(f)
    if list(sys.version_info[:2]) != payload["python"]:  # compiled libraries are built for the host's version
        sys.exit(
            f"the sandbox's python {sys.version_info[0]}.{sys.version_info[1]} is not the host's {payload['python']}"
        )
    import_dataset_module(payload["paths"], payload["module"])
    from reasoning_gym.factory import create_dataset

    dataset = create_dataset(payload["dataset"], seed=payload["seed"], size=payload["size"], **payload["config"])
    report({"stage": "ready"})  # the host tells a failed load (its problem) from what the answer did
    sys.addaudithook(tripwire)  # from here on, the answer may be running
    try:
        doc = {"score": float(dataset.score_answer(payload["answer"], payload["entry"]))}
    except Exception as exc:  # the dataset's own scorer failed: reported, the host decides
        doc = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    report(doc)


def report(doc):
    sys.stdout.write(f"{MAGIC} {json.dumps(doc)}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
