"""`mcsa-bench server`: a shared MLflow tracking server for a team or a cluster (docs/scaling.md §10).

MLflow's server on a database store (PostgreSQL for a cluster), its artifacts in a directory it serves,
bound to 127.0.0.1 unless ``--host`` says otherwise. A server reachable from other machines requires
authentication (MLflow's basic-auth app): its admin password comes from MLFLOW_AUTH_ADMIN_PASSWORD
or is generated into a file only the user can read; without either, or with a password that is
short or one of MLflow's former defaults, the command refuses to start. Every mistake is one line
naming it, before anything starts.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import secrets
from pathlib import Path

from mcsa_bench.api import ConfigurationError

#: the env variable MLflow's auth app reads the admin's password from, on first start
PASSWORD_ENV = "MLFLOW_AUTH_ADMIN_PASSWORD"
#: the env variable of the auth app's key for CSRF protection
SECRET_KEY_ENV = "MLFLOW_FLASK_SERVER_SECRET_KEY"
MIN_PASSWORD_LENGTH = 12
#: passwords that must never guard a server: MLflow's default admin password before 3.x, and such
KNOWN_PASSWORDS = {"password", "password1234", "admin", "mlflow", "changeme"}
ADMIN = "admin"


def parser() -> argparse.ArgumentParser:
    class Parser(argparse.ArgumentParser):
        def error(self, message: str):
            raise ConfigurationError(f"server: {message} (see mcsa-bench server --help)")

    p = Parser(prog="mcsa-bench server", description=__doc__.split("\n\n")[1].replace("\n", " "),
               epilog="example: mcsa-bench server tracking.uri=postgresql://mlflow@dbhost/mlflow "
                      "--artifacts-destination /shared/mlartifacts --host 0.0.0.0 --generate-password")
    p.add_argument("overrides", nargs="*", metavar="tracking.uri=URI",
                   help="the database store the server keeps its runs in (default: sqlite:///outputs/mlflow.db)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine "
                   "only); any other requires authentication")
    p.add_argument("--port", type=int, default=5000)
    p.add_argument("--workers", type=int, default=4, help="server processes (default 4)")
    p.add_argument("--artifacts-destination", metavar="DIR|URI", default=None,
                   help="where the server keeps the runs' artifacts (default: outputs/mlartifacts)")
    p.add_argument("--auth", action="store_true", help="require authentication on 127.0.0.1 too")
    p.add_argument("--auth-db", metavar="URI", help="the auth app's users and permissions "
                   "(default: sqlite:///<artifacts' parent>/basic_auth.db)")
    p.add_argument("--generate-password", action="store_true", help=f"without {PASSWORD_ENV}: generate the "
                   "admin's password into a file only you can read, beside the auth database")
    p.add_argument("--allowed-hosts", metavar="HOST[,HOST]", help="Host headers the server accepts, when it "
                   "is reached by a name (MLflow's security middleware; e.g. mlflow.cluster.local:5000)")
    return p


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_password(password: str) -> None:
    if len(password) < MIN_PASSWORD_LENGTH or password.lower() in KNOWN_PASSWORDS:
        raise ConfigurationError(f"{PASSWORD_ENV} must be at least {MIN_PASSWORD_LENGTH} characters and not a "
                                 "default password; or unset it and pass --generate-password")


def admin_password(generate: bool, directory: Path) -> tuple[str, str]:
    """The admin's password and where it came from: MLFLOW_AUTH_ADMIN_PASSWORD, else (with ``generate``)
    a new one written to ``directory/admin_password`` (mode 0600), else an error."""
    given = os.environ.get(PASSWORD_ENV)
    if given is not None:
        check_password(given)
        return given, PASSWORD_ENV
    if not generate:
        raise ConfigurationError(f"a server with authentication needs the admin's password: set {PASSWORD_ENV} "
                                 f"(at least {MIN_PASSWORD_LENGTH} characters), or pass --generate-password")
    path = directory / "admin_password"
    return private_secret(path), str(path)


def private_secret(path: Path) -> str:
    """The secret kept in ``path``, made (random, 24 characters) on first use in a file only the user can read."""
    if path.exists():
        return path.read_text(encoding="utf-8").strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    secret = secrets.token_urlsafe(18)
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as handle:
        handle.write(secret + "\n")
    return secret


def auth_config(database_uri: str, directory: Path) -> Path:
    """MLflow's basic-auth settings (``directory/basic_auth.ini``, only the user can read it): users and
    permissions in ``database_uri``, an admin named admin, READ for everyone else by default."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "basic_auth.ini"
    path.unlink(missing_ok=True)
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as handle:
        handle.write(f"[mlflow]\ndefault_permission = READ\ndatabase_uri = {database_uri}\n"
                     f"admin_username = {ADMIN}\n"
                     "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n")
    return path


def check_auth_installed() -> None:
    import importlib.util

    if importlib.util.find_spec("flask_wtf") is None:
        raise ConfigurationError("authentication needs MLflow's basic-auth app: pip install 'mcsa-bench[server]'")


def server_command(argv: list[str]) -> int:
    from mcsa_bench.tracking.store import absolute_uri, check_tracking_uri, redacted, tracking_uri_of
    from mcsa_bench.tracking.ui import serve

    try:
        args = parser().parse_intermixed_args(argv)
    except SystemExit as done:  # --help
        return int(done.code or 0)
    uri = tracking_uri_of(args.overrides, "server")
    check_tracking_uri(uri)
    if uri.startswith(("http://", "https://")):
        raise ConfigurationError(f"server keeps its runs in a database (sqlite:///..., postgresql://...), "
                                 f"not in another server ({uri})")
    if not 0 < args.port < 65536 or args.workers < 1:
        raise ConfigurationError(f"--port takes 1-65535 and --workers at least 1, got {args.port} and {args.workers}")
    artifacts = args.artifacts_destination or str(Path("outputs") / "mlartifacts")
    state = Path(artifacts).resolve().parent if "://" not in artifacts else Path("outputs").resolve()
    options = ["--workers", str(args.workers), "--artifacts-destination", artifacts]
    if args.allowed_hosts:
        options += ["--allowed-hosts", args.allowed_hosts]
    env, note = {}, "no authentication (this machine only)"
    if args.auth or not is_loopback(args.host):
        check_auth_installed()
        password, source = admin_password(args.generate_password, state)
        config = auth_config(args.auth_db or f"sqlite:///{state / 'basic_auth.db'}", state)
        options += ["--app-name", "basic-auth"]
        # the auth app's CSRF key: the same for every worker and restart (MLflow's requirement)
        key = os.environ.get(SECRET_KEY_ENV) or private_secret(state / "flask_secret_key")
        env = {"MLFLOW_AUTH_CONFIG_PATH": str(config), PASSWORD_ENV: password, SECRET_KEY_ENV: key}
        note = (f"basic authentication: user {ADMIN}, password from {source} (clients: MLFLOW_TRACKING_USERNAME "
                "and MLFLOW_TRACKING_PASSWORD)")
    uri = absolute_uri(uri)
    print(f"Shared tracking server: {note}; runs in {redacted(uri)}, artifacts in {artifacts}", flush=True)
    return serve(uri, args.port, host=args.host, options=tuple(options), env=env, what="MLflow tracking server",
                 shown=redacted(uri))
