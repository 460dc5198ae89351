"""`mcsa-bench ui` and `mcsa-bench server`: MLflow's server for a store, without its chatter (the UI of a local
store on 127.0.0.1; the shared server of mcsa_bench.tracking.server)."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request

from mcsa_bench.api import ConfigurationError

#: seconds to wait for the server's health check
STARTUP_TIMEOUT = 180.0
#: server output that is progress chatter, not news for the user
_CHATTER = ("INFO", "Registry store URI not provided", "[MLflow] Security middleware")


def serve(uri: str, port: int, host: str = "127.0.0.1", options: tuple[str, ...] = ("--workers", "1"),
          env: dict[str, str] | None = None, what: str = "MLflow UI", shown: str | None = None, page: str = "") -> int:
    """Run ``mlflow server`` for ``uri`` on ``host``:``port`` until Ctrl-C, quiet logs; ``options`` and
    ``env`` go to the server, ``shown`` is the URI printed (the password hidden), ``page`` the address below
    the server's root printed once it answers (the runs table of ``mcsa-bench ui``)."""
    check_port_free(host, port)
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", **(env or {})}
    command = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri, "--host", host,
               "--port", str(port), *options, "--uvicorn-opts", "--log-level warning"]
    start = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    threading.Thread(target=_forward_problems, args=(process.stdout,), daemon=True).start()
    try:
        if _wait_until_healthy(host, port, process):
            print(f"{what} for {shown or uri} on http://{url_host(host, reach=False)}:{port} "
                  f"(ready in {time.monotonic() - start:.1f} s; "
                  "Ctrl-C to stop)", flush=True)
            if page:
                print(f"The runs: http://{host}:{port}{page}", flush=True)
        return process.wait()
    except KeyboardInterrupt:
        process.terminate()
        process.wait(timeout=30)
        return 0


def check_port_free(host: str, port: int) -> None:
    """The address is this machine's and the port free on it, else one line saying which is not."""
    try:
        family, kind, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (OSError, UnicodeError) as error:
        raise ConfigurationError(f"cannot listen on {host}: not an address, nor a name this machine resolves "
                                 f"({error})") from None
    with socket.socket(family, kind) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds: a port left in
        try:                                                         # TIME_WAIT by a restart is free to it
            sock.bind(address)
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise ConfigurationError(f"port {port} on {host} is in use; choose another with --port N") from None
            if error.errno == errno.EADDRNOTAVAIL:
                raise ConfigurationError(f"{host} is not an address of this machine (no interface has it); "
                                         "--host takes one of its own addresses, or 0.0.0.0 for all") from None
            raise ConfigurationError(f"cannot listen on {host} port {port}: {error.strerror}") from None


def url_host(host: str, reach: bool = True) -> str:
    """``host`` as a URL writes it: an IPv6 address in brackets; to ``reach`` it from here, a wildcard address
    (every interface) as 127.0.0.1."""
    if reach and host in ("0.0.0.0", "::"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


def _wait_until_healthy(host: str, port: int, process: subprocess.Popen) -> bool:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with urllib.request.urlopen(f"http://{url_host(host)}:{port}/health", timeout=2):
                return True
        except OSError:
            time.sleep(0.2)
    return False


def _forward_problems(stream) -> None:
    for line in stream:
        if not line.strip() or any(marker in line for marker in _CHATTER):
            continue
        sys.stderr.write(line)
