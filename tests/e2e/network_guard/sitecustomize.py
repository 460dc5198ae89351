"""A network guard for tests/e2e/test_scaling.py, loaded by every Python process started with this
directory on PYTHONPATH (the CLI, and through it Ray's agents and workers).

An audit hook sees every socket ``connect``, ``sendto`` and ``bind`` the process makes, also those
that fail or last a moment (a probe of a cloud metadata address is a connect that times out
within a second: a look at the socket table would miss it). Each one whose address is not
loopback is written to the file $MCSA_TEST_NETWORK_LOG; a connect or send is also refused (as if
the network were unreachable), so that nothing leaves the machine even when a test fails. Every
process that loads the guard writes a line saying so, which shows which processes it covers.
"""

import errno
import ipaddress
import os
import socket
import sys

_LOG = os.environ["MCSA_TEST_NETWORK_LOG"]


def _write(line: str) -> None:
    with open(_LOG, "a") as log:
        log.write(line + "\n")


def _is_loopback(host) -> bool:
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:  # a host name ("" included: every interface), which would also need a DNS lookup
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def _guard(event: str, args: tuple) -> None:
    if event not in ("socket.connect", "socket.sendto", "socket.bind"):
        return
    sock, address = args[0], args[1]
    if sock.family in (socket.AF_INET, socket.AF_INET6) and not _is_loopback(address[0]):
        _write(f"{event} {address!r} pid={os.getpid()} {' '.join(sys.argv)[:200]}")
        if event != "socket.bind":
            raise OSError(errno.ENETUNREACH, f"{address!r} is refused by the test's network guard")


_write(f"guarded pid={os.getpid()} {' '.join(sys.argv)[:200]}")
sys.addaudithook(_guard)
