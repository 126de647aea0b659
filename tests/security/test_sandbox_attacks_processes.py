"""Process attacks: daemons, setsid, SIGTERM-ignoring, signals to the parent, ptrace,
nested user namespaces, privilege changes and huge argv/env."""

import os

from tempering.sandbox.pool import ARG_MAX_BYTES

SHORT = {"wall_s": 2.0, "cpu_s": 1.0}


def test_double_fork_daemon(pool):
    code = (
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        "        os.close(1); os.close(2)\n        time.sleep(60)\n    os._exit(0)\nprint('parent done')\n"
    )
    r = pool.exec(code=code)
    assert r.status == "ok" and "parent done" in r.stdout  # host_guard: no process left


def test_setsid_nohup_ignoring_sigterm(pool):
    r = pool.exec("setsid nohup bash -c 'trap \"\" TERM HUP; sleep 60' >/dev/null 2>&1 & echo started")
    assert r.status == "ok" and "started" in r.stdout


def test_main_ignores_sigterm(pool):
    r = pool.exec(
        code="import signal, time\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGXCPU):\n"
        "    signal.signal(s, signal.SIG_IGN)\nwhile True:\n    time.sleep(0.01)\n",
        limits=pool.limits.replace(**SHORT),
    )
    assert r.status == "timeout"


def test_daemon_holding_output_pipe(pool):
    r = pool.exec("sleep 60 & echo main-done", limits=pool.limits.replace(wall_s=20.0))
    assert r.status == "ok" and "main-done" in r.stdout  # not a timeout: we stop at main exit


def test_signal_parent_and_everyone(pool):
    host_pid = os.getpid()
    r = pool.exec(
        code=f"import os, signal\nfor pid in (os.getppid(), 1, {host_pid}, {os.getppid()}):\n"
        "    try:\n        os.kill(pid, signal.SIGKILL)\n    except OSError as e:\n        print('refused', pid, e.errno)\n"
        "print('survived')\nos.kill(-1, signal.SIGKILL)\n"
    )
    assert r.status != "sandbox_error" and "survived" in r.stdout
    os.kill(host_pid, 0)  # we are alive, and so is our parent
    os.kill(os.getppid(), 0)


def test_ptrace_host_and_init(pool):
    host_pid = os.getpid()
    code = (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        f"rc = libc.ptrace(16, {host_pid}, 0, 0)\nprint('host', rc, ctypes.get_errno())\n"
        "print(open('/proc/1/status').read().split('CapEff:')[1].split()[0])\n"
    )
    r = pool.exec(code=code)
    assert r.status == "ok"
    host_line, caps = r.stdout.splitlines()
    assert host_line.split()[1] == "-1"  # attaching to a host pid fails (not visible)
    assert int(caps, 16) == 0  # the sandbox's own init, ptraceable or not, holds no capability


def test_nested_user_namespace(pool):
    code = (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "for flag in (0x10000000, 0x10000000 | 0x20000):\n"
        "    print(libc.unshare(flag), ctypes.get_errno())\n"
    )
    r = pool.exec(code=code)
    assert r.status == "ok" and all(line.split()[0] == "-1" for line in r.stdout.splitlines())
    r = pool.exec("unshare -Ur id && echo NESTED; echo done")
    assert "NESTED" not in r.stdout


def test_become_root_refused(pool):
    r = pool.exec(
        code="import os\nfor f in (lambda: os.setuid(0), lambda: os.setgid(0), lambda: os.chroot('/tmp')):\n"
        "    try:\n        f(); print('ESCALATED')\n    except OSError:\n        pass\n"
        "print(os.getuid(), os.geteuid())\n"
    )
    assert r.status == "ok" and "ESCALATED" not in r.stdout and not r.stdout.startswith("0 ")


def test_huge_argv_inside(pool):
    r = pool.exec(
        code="import os\ntry:\n    os.execv('/bin/true', ['true', 'x' * (4 * 1024 * 1024)])\n"
        "except OSError as e:\n    print('refused', e.errno)\n"
    )
    assert r.status == "ok" and "refused 7" in r.stdout  # E2BIG


def test_huge_env_inside(pool):
    r = pool.exec(
        code="import os\ntry:\n    os.execve('/bin/true', ['true'], {'A': 'y' * (4 * 1024 * 1024)})\n"
        "except OSError as e:\n    print('refused', e.errno)\n"
    )
    assert r.status == "ok" and "refused 7" in r.stdout


def test_huge_argv_from_caller(pool):
    r = pool.exec(["echo", "z" * (ARG_MAX_BYTES + 1)])
    assert r.status == "nonzero_exit" and r.exit_code == 126 and "too long" in r.stderr


def test_huge_env_from_caller(pool):
    r = pool.exec(["true"], env={"BIG": "z" * (ARG_MAX_BYTES + 1)})
    assert r.status == "nonzero_exit" and r.exit_code == 126
