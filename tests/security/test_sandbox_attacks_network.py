"""Network attacks. Traffic only ever targets listeners this test opens on 127.0.0.1."""

import contextlib
import os
import socket


@contextlib.contextmanager
def tcp_listener():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    s.setblocking(False)
    try:
        yield s, s.getsockname()[1]
    finally:
        s.close()


def assert_nothing_accepted(listener):
    try:
        listener.accept()
    except BlockingIOError:
        return
    raise AssertionError("the host listener accepted a connection from the sandbox")


def test_python_connect_to_host_loopback_listener(pool):
    with tcp_listener() as (listener, port):
        r = pool.exec(
            code=f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=1)\n"
            f"    print('CONNECTED')\nexcept OSError as e:\n    print('blocked', e)\n"
        )
        assert r.status == "ok" and "blocked" in r.stdout and "CONNECTED" not in r.stdout
        assert_nothing_accepted(listener)


def test_bash_dev_tcp_to_host_loopback_listener(pool):
    with tcp_listener() as (listener, port):
        r = pool.exec(f"echo hello > /dev/tcp/127.0.0.1/{port} && echo CONNECTED")
        assert r.status == "nonzero_exit" and "CONNECTED" not in r.stdout
        assert_nothing_accepted(listener)


def test_udp_to_host_loopback_socket(pool):
    host = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    host.bind(("127.0.0.1", 0))
    host.setblocking(False)
    port = host.getsockname()[1]
    try:
        r = pool.exec(
            code=f"import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            f"for _ in range(20):\n    s.sendto(b'leak', ('127.0.0.1', {port}))\nprint('sent')\n"
        )
        assert r.status in ("ok", "nonzero_exit")
        try:
            data = host.recv(100)
        except BlockingIOError:
            data = None
        assert data is None, "a UDP datagram from the sandbox reached the host"
    finally:
        host.close()


def test_abstract_unix_socket_of_host(pool):
    name = f"\0tempering-test-{os.getpid()}"
    host = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    host.bind(name)
    host.listen(4)
    host.setblocking(False)
    try:
        r = pool.exec(
            code=f"import socket\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect({name!r})\n"
            f"    print('CONNECTED')\nexcept OSError as e:\n    print('blocked', e)\n"
        )
        assert r.status == "ok" and "blocked" in r.stdout
        assert_nothing_accepted(host)
    finally:
        host.close()


def test_no_interface_but_loopback(pool):
    r = pool.exec(
        code="import os\nnames = set(os.listdir('/sys/class/net')) if os.path.isdir('/sys/class/net') else set()\n"
        "names |= {l.split(':')[0].strip() for l in open('/proc/net/dev').read().splitlines()[2:]}\n"
        "print(sorted(names))\n"
    )
    assert r.status == "ok" and r.stdout.strip() == "['lo']"


def test_no_route_visible(pool):
    r = pool.exec(
        code="v4 = open('/proc/net/route').read().splitlines()[1:]\n"
        "v6 = [l.split()[-1] for l in open('/proc/net/ipv6_route').read().splitlines()]\n"
        "print(len(v4), sorted(set(v6) - {'lo'}))\n"
    )
    assert r.status == "ok" and r.stdout.strip() == "0 []"


def test_raw_socket_refused(pool):
    r = pool.exec(
        code="import socket\ntry:\n    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)\n"
        "    print('RAW OK')\nexcept PermissionError as e:\n    print('refused', e)\n"
    )
    assert r.status == "ok" and "refused" in r.stdout


def test_packet_socket_refused(pool):
    r = pool.exec(
        code="import socket\ntry:\n    socket.socket(socket.AF_PACKET, socket.SOCK_RAW)\n"
        "    print('PACKET OK')\nexcept OSError as e:\n    print('refused', e)\n"
    )  # EAFNOSUPPORT (seccomp)
    assert r.status == "ok" and "refused" in r.stdout
