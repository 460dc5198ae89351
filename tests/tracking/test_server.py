"""`mcsa-bench server`'s refusals and its admin password (mcsa_bench.tracking.server); the server itself
runs in tests/e2e/test_server.py. Nothing here listens on any address."""

from __future__ import annotations

import stat

import pytest

from mcsa_bench.api import ConfigurationError
from mcsa_bench.cli import main
from mcsa_bench.tracking.server import PASSWORD_ENV, admin_password, is_loopback


@pytest.mark.parametrize(("arguments", "password", "message"), [
    (["--host", "0.0.0.0"], None, f"needs the admin's password: set {PASSWORD_ENV}"),
    (["--host", "192.0.2.1"], "password1234", "not a default password"),
    (["--auth"], "short", "at least 12 characters"),
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
    assert all(map(is_loopback, ("127.0.0.1", "127.1.2.3", "::1", "localhost")))
    assert not any(map(is_loopback, ("0.0.0.0", "::", "10.0.0.5", "node01")))
