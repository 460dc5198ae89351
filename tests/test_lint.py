"""The checkout passes the linter (ruff, configured in pyproject.toml: pyflakes, pycodestyle, isort,
pyupgrade and bugbear) with zero findings, as .ci/run requires; here too so a developer sees it."""

import importlib.util
import subprocess
import sys

import pytest

from tests.support import CHECKOUT


def test_ruff_finds_nothing():
    if importlib.util.find_spec("ruff") is None:
        pytest.skip("ruff is not installed (the dev extra installs it: pip install -e '.[dev]')")
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=CHECKOUT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
