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
import socket
import stat
from pathlib import Path

from mcsa_bench.api import ConfigurationError

#: the env variable MLflow's auth app reads the admin's password from, on first start
PASSWORD_ENV = "MLFLOW_AUTH_ADMIN_PASSWORD"
#: the env variable of the auth app's key for CSRF protection
SECRET_KEY_ENV = "MLFLOW_FLASK_SERVER_SECRET_KEY"
MIN_PASSWORD_LENGTH, MIN_DISTINCT_CHARACTERS = 12, 5
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
    """Whether ``host`` reaches this machine only: a loopback address (127.0.0.0/8, ::1), or a name that
    resolves to loopback addresses alone (``localhost``, as /etc/hosts says)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        found = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except (OSError, UnicodeError):
        return False
    return bool(found) and all(ipaddress.ip_address(address.split("%")[0]).is_loopback for address in found)


def check_password(password: str, source: str = PASSWORD_ENV) -> None:
    """A password that may guard a shared server: at least 12 printable ASCII characters (HTTP basic
    authentication puts it in a header, which MLflow's client encodes as UTF-8 for its API calls and as
    Latin-1 for artifact uploads: a non-ASCII password passed the one and not the other), no space at either
    end, at least 5 different characters, not a default one."""
    if len(password) < MIN_PASSWORD_LENGTH or password.lower() in KNOWN_PASSWORDS \
            or not all(" " <= c <= "~" for c in password) or password != password.strip() \
            or len(set(password)) < MIN_DISTINCT_CHARACTERS:
        raise ConfigurationError(
            f"the admin password from {source} must be at least {MIN_PASSWORD_LENGTH} printable ASCII characters "
            f"(no newline, tab or other control character, no space at either end), with at least "
            f"{MIN_DISTINCT_CHARACTERS} different ones, and not a default password; or unset {PASSWORD_ENV} and pass "
            "--generate-password")


def admin_password(generate: bool, directory: Path) -> tuple[str, str]:
    """The admin's password and where it came from: MLFLOW_AUTH_ADMIN_PASSWORD, else (with ``generate``)
    the one in ``directory/admin_password``, made on first use (mode 0600), else an error."""
    given = os.environ.get(PASSWORD_ENV)
    if given is not None:
        check_password(given)
        return given, PASSWORD_ENV
    if not generate:
        raise ConfigurationError(f"a server with authentication needs the admin's password: set {PASSWORD_ENV} "
                                 f"(at least {MIN_PASSWORD_LENGTH} characters), or pass --generate-password")
    path = directory / "admin_password"
    password = private_secret(path)
    check_password(password, str(path))
    return password, str(path)


def private_secret(path: Path) -> str:
    """The secret kept in ``path``, made (random, 24 characters) on first use in a file only the user can read;
    an existing one must be a regular file of the user's that no one else may read or write."""
    try:
        found = path.lstat()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        secret = secrets.token_urlsafe(18)
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as handle:
            handle.write(secret + "\n")
        return secret
    if not stat.S_ISREG(found.st_mode) or found.st_uid != os.getuid() or found.st_mode & 0o077:
        what = "not a regular file" if not stat.S_ISREG(found.st_mode) else (
            "not yours" if found.st_uid != os.getuid() else f"mode {stat.S_IMODE(found.st_mode):04o}: others may "
                                                             "read or write it")
        raise ConfigurationError(f"{path} is {what}; a secret is kept in a file of yours with mode 0600 (chmod 600 "
                                 f"{path}, or delete it to have a new one made)")
    try:
        return path.read_text(encoding="utf-8").strip()
    except UnicodeDecodeError:
        raise ConfigurationError(f"{path} is not UTF-8 text; delete it to have a new one made") from None


def private_database(database_uri: str) -> None:
    """An SQLite auth database (it holds the password's hash) made, or kept, readable by the user alone."""
    from mcsa_bench.tracking.store import sqlite_path

    path = sqlite_path(database_uri)
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))  # MLflow's SQLite opens what is there
    path.chmod(0o600)


def admin_in_database(database_uri: str, password: str) -> str:
    """Make the stored admin's password ``password``: MLflow's auth app creates the admin on its first start
    only, so a later start with another password had the banner name a password that got 401. Returns what
    was found: ``new`` (no admin yet: MLflow creates it), ``kept`` (it has this password) or ``replaced``.
    The hash is MLflow's (werkzeug's generate_password_hash, its users table)."""
    import sqlalchemy
    from werkzeug.security import check_password_hash, generate_password_hash

    from mcsa_bench.tracking.store import redacted

    engine = sqlalchemy.create_engine(database_uri)
    try:
        with engine.begin() as connection:
            if not sqlalchemy.inspect(connection).has_table("users"):
                return "new"
            stored = connection.execute(sqlalchemy.text("SELECT password_hash FROM users WHERE username = :user"),
                                        {"user": ADMIN}).scalar()
            if stored is None:
                return "new"
            if check_password_hash(stored, password):
                return "kept"
            connection.execute(sqlalchemy.text("UPDATE users SET password_hash = :hash WHERE username = :user"),
                               {"hash": generate_password_hash(password), "user": ADMIN})
            return "replaced"
    except sqlalchemy.exc.SQLAlchemyError as error:
        raise ConfigurationError(f"cannot read the auth database {redacted(database_uri)} "
                                 f"({type(error).__name__}: {str(error).splitlines()[0][:200]})") from None
    finally:
        engine.dispose()


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
    from mcsa_bench.tracking.ui import check_port_free, serve

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
    authenticated = args.auth or not is_loopback(args.host)
    if authenticated and PASSWORD_ENV in os.environ:
        check_password(os.environ[PASSWORD_ENV])
    check_port_free(args.host, args.port)  # before anything is written
    artifacts = args.artifacts_destination or str(Path("outputs") / "mlartifacts")
    state = Path(artifacts).resolve().parent if "://" not in artifacts else Path("outputs").resolve()
    options = ["--workers", str(args.workers), "--artifacts-destination", artifacts]
    if args.allowed_hosts:
        options += ["--allowed-hosts", args.allowed_hosts]
    env, note = {}, "no authentication (this machine only)"
    if authenticated:
        check_auth_installed()
        password, source = admin_password(args.generate_password, state)
        database = args.auth_db or f"sqlite:///{state / 'basic_auth.db'}"
        private_database(database)
        found = admin_in_database(database, password)
        config = auth_config(database, state)
        options += ["--app-name", "basic-auth"]
        # the auth app's CSRF key: the same for every worker and restart (MLflow's requirement)
        key = os.environ.get(SECRET_KEY_ENV) or private_secret(state / "flask_secret_key")
        env = {"MLFLOW_AUTH_CONFIG_PATH": str(config), PASSWORD_ENV: password, SECRET_KEY_ENV: key}
        stored = {"new": "", "kept": "", "replaced": ", which replaced the admin's earlier password"}[found]
        note = (f"basic authentication: user {ADMIN}, password from {source}{stored} (clients: "
                "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD)")
    uri = absolute_uri(uri)
    print(f"Shared tracking server: {note}; runs in {redacted(uri)}, artifacts in {artifacts}", flush=True)
    return serve(uri, args.port, host=args.host, options=tuple(options), env=env, what="MLflow tracking server",
                 shown=redacted(uri))
