"""`mcsa-bench server`'s refusals and its admin password (mcsa_bench.tracking.server); the server itself
runs in tests/e2e/test_server.py. Nothing here listens on any address."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from mcsa_bench.api import ConfigurationError
from mcsa_bench.cli import main
from mcsa_bench.tracking.server import PASSWORD_ENV, admin_password, is_loopback


@pytest.mark.parametrize(("arguments", "password", "message"), [
    (["--host", "0.0.0.0"], None, f"needs the admin's password: set {PASSWORD_ENV}"),
    (["--host", "192.0.2.1"], "password1234", "not a default password"),
    (["--auth"], "short", "at least 12 printable ASCII characters"),
    (["--auth"], "пароль-для-сервера", "printable ASCII"),  # artifact uploads encode it as Latin-1: 401
    (["--auth"], " " * 12, "no space at either end"),
    (["--auth"], "a" * 12, "at least 5 different ones"),
    (["--auth"], "a-long-pass\nword-2", "no newline"),
    (["--auth", "--host", "192.0.2.1"], "a-good-long-password", "192.0.2.1 is not an address of this machine"),
    (["--host", "no-such-host.invalid"], "a-good-long-password", "cannot listen on no-such-host.invalid"),
    (["tracking.uri=http://127.0.0.1:5000"], None, "not in another server"),
    (["--port", "70000"], None, "--port takes 1-65535"),
    (["--hots", "x"], None, "server: unrecognized arguments"),
])
def test_a_server_that_would_be_exposed_without_a_good_password_is_refused_in_one_line(
        arguments, password, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    if password is None:
        monkeypatch.delenv(PASSWORD_ENV, raising=False)
    else:
        monkeypatch.setenv(PASSWORD_ENV, password)
    assert main(["server", *arguments]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not (tmp_path / "outputs").exists()  # nothing written, nothing started


def test_a_generated_password_is_long_random_kept_in_a_private_file_and_reused(tmp_path, monkeypatch):
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    password, source = admin_password(True, tmp_path / "state")
    again, _ = admin_password(True, tmp_path / "state")
    other, _ = admin_password(True, tmp_path / "elsewhere")
    assert len(password) >= 24 and again == password and other != password
    assert stat.S_IMODE((tmp_path / "state" / "admin_password").stat().st_mode) == 0o600
    assert source == str(tmp_path / "state" / "admin_password")
    monkeypatch.setenv(PASSWORD_ENV, "a-good-long-password")
    assert admin_password(False, tmp_path / "none") == ("a-good-long-password", PASSWORD_ENV)
    monkeypatch.setenv(PASSWORD_ENV, "")
    with pytest.raises(ConfigurationError):
        admin_password(True, tmp_path / "state")


def test_only_loopback_addresses_count_as_this_machine():
    """The addresses that run without authentication (docs/scaling.md §10 says the same): loopback ones, and
    names that resolve to loopback addresses alone."""
    assert all(map(is_loopback, ("127.0.0.1", "127.0.0.2", "127.1.2.3", "::1", "localhost")))
    assert not any(map(is_loopback, ("0.0.0.0", "::", "10.0.0.5", "192.0.2.1", "no-such-host.invalid")))
    docs = " ".join((Path(__file__).parents[2] / "docs" / "scaling.md").read_text().split())
    assert "a loopback address (127.0.0.0/8, ::1, or a name such as localhost that resolves to those alone)" in docs


@pytest.mark.parametrize(("content", "mode", "message"), [
    ("abc", 0o644, "mode 0644: others may read or write it"),
    ("abc", 0o600, "must be at least 12 printable ASCII characters"),
    ("a-good-long-password", 0o640, "mode 0640"),
])
def test_generate_password_refuses_a_weak_or_readable_existing_file_and_leaves_it(
        content, mode, message, tmp_path, monkeypatch, capsys):
    """Issue 52: a planted 3-character, world-readable admin_password was reused unchecked (then MLflow's
    41-line traceback) and stayed 0644."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    planted = tmp_path / "outputs" / "admin_password"
    planted.parent.mkdir()
    planted.write_text(content)
    planted.chmod(mode)
    assert main(["server", "--auth", "--generate-password"]) == 2
    err = capsys.readouterr().err
    assert message in err and str(planted) in err and err.count("\n") == 1, err
    assert planted.read_text() == content and stat.S_IMODE(planted.stat().st_mode) == mode
    assert sorted(p.name for p in planted.parent.iterdir()) == ["admin_password"]  # nothing else written


def test_the_auth_database_is_made_and_kept_readable_by_the_user_alone(tmp_path):
    from mcsa_bench.tracking.server import private_database

    made, kept = tmp_path / "new" / "basic_auth.db", tmp_path / "basic_auth.db"
    kept.write_bytes(b"")
    kept.chmod(0o644)
    for path in (made, kept):
        private_database(f"sqlite:///{path}")
        assert path.is_file() and stat.S_IMODE(path.stat().st_mode) == 0o600
    private_database("postgresql://mlflow@db-host/auth")  # a database server's: nothing to do here
