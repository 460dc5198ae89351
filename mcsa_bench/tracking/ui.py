"""`mcsa-bench ui`: MLflow's tracking UI for a local store, on 127.0.0.1, without the server's chatter."""

from __future__ import annotations

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


def serve(uri: str, port: int) -> int:
    """Run ``mlflow server`` for ``uri`` on 127.0.0.1:``port`` until Ctrl-C; one worker, quiet logs."""
    _check_port_free(port)
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    command = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri, "--host", "127.0.0.1",
               "--port", str(port), "--workers", "1", "--uvicorn-opts", "--log-level warning"]
    start = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    threading.Thread(target=_forward_problems, args=(process.stdout,), daemon=True).start()
    try:
        if _wait_until_healthy(port, process):
            print(f"MLflow UI for {uri} on http://127.0.0.1:{port} (ready in {time.monotonic() - start:.1f} s; "
                  "Ctrl-C to stop)", flush=True)
        return process.wait()
    except KeyboardInterrupt:
        process.terminate()
        process.wait(timeout=30)
        return 0


def _check_port_free(port: int) -> None:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            raise ConfigurationError(f"port {port} on 127.0.0.1 is in use; choose another with --port N") from None


def _wait_until_healthy(port: int, process: subprocess.Popen) -> bool:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return True
        except OSError:
            time.sleep(0.2)
    return False


def _forward_problems(stream) -> None:
    for line in stream:
        if not line.strip() or any(marker in line for marker in _CHATTER):
            continue
        sys.stderr.write(line)
