"""Reading host files, writing outside scratch, symlink escapes, /dev, host /proc and env,
and smuggling mount options through NUL bytes in env or argv."""

import os

import pytest


def _try_read(path):
    return (
        f"import sys\ntry:\n    print(open({path!r}, 'rb').read(64))\n    print('READ')\n"
        f"except OSError as e:\n    print('blocked', type(e).__name__)\n"
    )


def test_read_work_repo(pool):
    r = pool.exec(code=_try_read("/work/main/pyproject.toml"))
    assert r.status == "ok" and "blocked" in r.stdout


def test_list_root_home(pool):
    r = pool.exec("ls -la /root; ls /home; echo done")
    assert "done" in r.stdout and "No such file" in r.stderr


def test_read_etc_shadow(pool):
    r = pool.exec(code=_try_read("/etc/shadow"))
    assert r.status == "ok" and "blocked" in r.stdout


def test_read_world_readable_host_secret(pool, canary_dir):
    r = pool.exec(code=_try_read(os.path.join(canary_dir, "secret.txt")))
    assert r.status == "ok" and "blocked" in r.stdout and "CANARY" not in r.stdout


def test_host_proc_not_visible(pool):
    r = pool.exec(
        code="import os\npids = [p for p in os.listdir('/proc') if p.isdigit()]\n"
        "cmds = [open(f'/proc/{p}/cmdline','rb').read() for p in pids]\n"
        "print(len(pids), any(b'pytest' in c for c in cmds), os.path.exists('/proc/%d' % " + str(os.getpid()) + "))\n"
    )
    assert r.status == "ok"
    count, sees_pytest, _ = r.stdout.split()
    assert int(count) <= 3 and sees_pytest == "False"


def test_host_environment_not_visible(pool, monkeypatch):
    monkeypatch.setenv("TEMPERING_CANARY_TOKEN", "sk-canary-123")
    r = pool.exec("env; cat /proc/1/environ /proc/self/environ | tr '\\0' '\\n'")
    assert r.status == "ok" and "sk-canary" not in r.stdout and "TEMPERING_CANARY" not in r.stdout


def test_write_into_world_writable_host_dir(pool, canary_dir):
    path = os.path.join(canary_dir, "planted")
    pool.exec(f"mkdir -p {canary_dir}; echo pwned > {path} && echo WROTE")
    assert not os.path.exists(path)


def test_write_root_and_usr(pool):
    r = pool.exec(
        "for p in /evil /usr/evil /usr/bin/evil /etc/evil /proc/sys/kernel/hostname; do "
        "echo x > $p 2>/dev/null && echo WROTE $p; done; echo done"
    )
    assert "WROTE" not in r.stdout and "done" in r.stdout
    assert not os.path.exists("/evil") and not os.path.exists("/usr/bin/evil")


def test_remount_root_rw_refused(pool):
    r = pool.exec("mount -o remount,rw / && echo REMOUNTED; mount -t tmpfs none /mnt && echo MOUNTED; echo done")
    assert "REMOUNTED" not in r.stdout and "MOUNTED" not in r.stdout


def test_collect_does_not_follow_symlink_to_host(pool, canary_dir):
    secret = os.path.join(canary_dir, "secret.txt")
    r = pool.exec(
        f"ln -s {secret} out.txt; ln -s /etc/shadow shadow; ln -s {canary_dir} d",
        collect=["out.txt", "shadow", "d/secret.txt"],
    )
    assert r.status == "ok" and r.files == {}


def test_collect_skips_fifo(pool):
    r = pool.exec("mkfifo out.txt", collect=["out.txt"])
    assert r.status == "ok" and r.files == {}


def test_session_write_does_not_follow_planted_symlink(pool, canary_dir):
    target = os.path.join(canary_dir, "planted-by-session")
    with pool.session() as s:
        assert s.exec(f"ln -s {target} notes.txt; mkdir sub; ln -s {canary_dir} sub/d").ok
        s.write_files({"notes.txt": "host writes here"})
        with pytest.raises(ValueError, match="sub/d/x.txt"):
            s.write_files({"sub/d/x.txt": "through a linked dir"})
        r = s.exec("cat notes.txt; ls -la sub")
        assert "host writes here" in r.stdout
    assert not os.path.exists(target) and not os.path.exists(os.path.join(canary_dir, "x.txt"))


def test_dev_is_minimal(pool):
    r = pool.exec(
        code="import os\nprint(sorted(os.listdir('/dev')))\n"
        "for d in ('/dev/mem', '/dev/kmsg', '/dev/vda', '/dev/sda', '/dev/port'):\n"
        "    try:\n        open(d, 'rb').read(1); print('OPENED', d)\n    except OSError:\n        pass\n"
    )
    assert r.status == "ok" and "OPENED" not in r.stdout
    allowed = {
        "core",
        "fd",
        "full",
        "null",
        "ptmx",
        "pts",
        "random",
        "shm",
        "stderr",
        "stdin",
        "stdout",
        "tty",
        "urandom",
        "zero",
        "console",
        "mqueue",
    }
    assert set(eval(r.stdout.splitlines()[0])) <= allowed


def test_mknod_refused(pool):
    r = pool.exec("mknod /tmp/sda b 8 0 && echo MADE; mknod /work/mem c 1 1 && echo MADE; echo done")
    assert "MADE" not in r.stdout


# bwrap reads its options NUL-separated from a memfd: a NUL inside an env value or an argument
# would end it and start options of the caller's choosing, here the host / bound at /host.
INJECT = "x\0--bind\0/\0/host"


@pytest.mark.parametrize(
    "how",
    [
        {"env": {"GREETING": INJECT}},
        {"env": {"GREETING\0--bind\0/\0/host\0X": "1"}},
        {"env": {"A=B": "1"}},
        {"command": ["bash", "-c", "ls /host; echo probed", INJECT]},
    ],
    ids=["env-value", "env-name", "env-name-with-equals", "argv"],
)
def test_nul_and_equals_cannot_smuggle_bwrap_options(pool, canary_dir, how):
    call = {"command": f"ls /host{canary_dir} && echo probe > /host{canary_dir}/written; echo probed", **how}
    with pytest.raises(ValueError, match="without NUL"):
        pool.exec(**call)
    with pool.session() as s:
        with pytest.raises(ValueError, match="without NUL"):
            s.exec(**call)
        assert s.list_files() == []  # refused before anything was written or started
    assert not os.path.exists(os.path.join(canary_dir, "written"))
