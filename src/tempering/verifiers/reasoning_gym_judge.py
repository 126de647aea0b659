"""Runs inside the sandbox: one answer scored by a reasoning-gym dataset's own `score_answer`.

    python3 -I -S reasoning_gym_judge.py payload.json

Standard library only at import; reasoning-gym comes from `payload["paths"]` (read-only
binds of the host's library folders). Several datasets `eval` the answer or give it to
`sympy.parse_expr`, so the answer may run code here: that is why this runs in the sandbox,
in a fresh process per answer (nothing it changes outlives the call).

A tripwire (an audit hook, which Python cannot remove once added) ends the process with
`TRIPWIRE_EXIT` as soon as the answer's code starts a program, opens a socket, loads a C
library or writes to the file system (`open` for writing, mkdir, symlink, rename, remove,
chmod, ...): no scorer needs those, so the host scores it 0 with `cheat:code_execution`.
The answer runs in the hook's own process, so the hook keeps its state out of its reach:
  * no module global or builtin is read when it runs: every value and function it uses is
    bound in a closure at install time (`install_tripwire`), so rebinding `TRIPWIRE_EVENTS`,
    `builtins.isinstance` or anything else here changes nothing;
  * the closure is reached only through the interpreter's object lists: `gc.get_objects`,
    `get_referrers` and `get_referents` trip it, and so does replacing the code or defaults
    of any function (`object.__setattr__` on a function);
  * `_posixsubprocess.fork_exec` starts a program without an audit event: importing that
    module trips, and where it is already loaded, every reference to `fork_exec` in a loaded
    module (`subprocess._fork_exec`) is replaced by a stub that trips.
This is detection, not containment: the sandbox contains whatever runs. What stays out of
sight: code that stays inside Python can still pick its own score for this one call (it runs
in the scorer's process), and `os.mkfifo` / `os.mknod` raise no audit event; none of it
reaches the host or any other call.

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
        # writes that are not `open`
        "os.mkdir",
        "os.symlink",
        "os.link",
        "os.rename",
        "os.remove",
        "os.rmdir",
        "os.truncate",
        "os.chmod",
        "os.chown",
        "os.chflags",
        "os.utime",
        "os.setxattr",
        "os.removexattr",
        "shutil.rmtree",
        "sqlite3.connect",
        # the way to the hook's closure
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
    }
)
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
WRITE_MODES = frozenset("wax+")
UNAUDITED_SPAWN = "_posixsubprocess"
"""Its `fork_exec` starts a program with no audit event (subprocess.Popen raises one before calling it)."""


def install_tripwire():
    """Disarm `fork_exec` and add the audit hook (see the module docstring); once, before the answer runs."""
    _stub_fork_exec(_exits(os._exit, TRIPWIRE_EXIT))
    sys.addaudithook(
        _tripwire(
            TRIPWIRE_EVENTS, WRITE_FLAGS, WRITE_MODES, UNAUDITED_SPAWN, os._exit, TRIPWIRE_EXIT, types.FunctionType
        )
    )


def _exits(exit_now, status):
    """A stand-in for `fork_exec` that ends the process (its own closure: nothing shared with the hook)."""

    def fork_exec(*args, **kwargs):
        exit_now(status)

    return fork_exec


def _stub_fork_exec(stub):
    """Replace every reference to the loaded `fork_exec` in a loaded module's namespace by `stub`."""
    fork_exec = getattr(sys.modules.get(UNAUDITED_SPAWN), "fork_exec", None)
    if fork_exec is None:
        return
    for module in list(sys.modules.values()):
        space = getattr(module, "__dict__", None)
        if type(space) is dict:
            for name in [n for n, value in space.items() if value is fork_exec]:
                space[name] = stub


def _tripwire(events, write_flags, write_modes, spawn_module, exit_now, status, function):
    """The audit hook. It reads only its closure, never a global or a builtin, and compares
    through the types' own slots (`str.__eq__`), so nothing the answer rebinds or subclasses
    changes what it sees."""
    kind, text, integer, same_text = type, str, int, str.__eq__

    def tripwire(event, args):
        if event in events:
            exit_now(status)
        elif same_text(event, "open"):
            mode, flags = (args[1], args[2]) if args.__len__() >= 3 else (None, 0)
            if kind(mode) is text and not write_modes.isdisjoint(mode):
                exit_now(status)
            if kind(flags) is integer and flags & write_flags:
                exit_now(status)
        elif same_text(event, "import"):
            name = args[0]
            if kind(name) is not text or same_text(name, spawn_module):  # a str subclass could lie in ==
                exit_now(status)
        elif same_text(event, "object.__setattr__"):
            if args and kind(args[0]) is function:
                exit_now(status)

    return tripwire


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
    install_tripwire()  # from here on, the answer may be running
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
