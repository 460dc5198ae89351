"""The suite's own hygiene: the check that fails a session whose tests left files in the checkout
(tests/conftest.py) sees a new file, and nothing of the environment or caches."""

import uuid

from tests.support import CHECKOUT, checkout_leftovers


def test_a_file_left_in_the_checkout_is_seen_and_caches_are_not():
    before = checkout_leftovers()
    assert before is not None, "the suite runs in a git checkout"
    assert not {path for path in before if "__pycache__" in path or path.startswith(".venv")}
    leftover = CHECKOUT / "outputs" / f"left-by-a-test-{uuid.uuid4().hex}.txt"
    name = str(leftover.relative_to(CHECKOUT))
    leftover.write_text("")
    try:
        assert name in checkout_leftovers() - before
    finally:
        leftover.unlink()
    assert name not in checkout_leftovers()
