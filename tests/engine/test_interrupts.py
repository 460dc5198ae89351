"""A Ctrl-C Python swallowed is kept and raised again where the loops stop (mcsa_bench.engine.interrupts);
every other exception Python cannot raise is reported as Python reports it."""

import sys

import pytest

from mcsa_bench.engine.interrupts import keep_swallowed_interrupts, raise_swallowed_interrupt


class RaisesWhenCollected:
    def __init__(self, exception):
        self.exception = exception

    def __del__(self):
        raise self.exception


def test_a_swallowed_interrupt_is_raised_once_at_the_next_check_and_other_errors_are_reported(monkeypatch, capsys):
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)  # restored after the test
    keep_swallowed_interrupts()
    raise_swallowed_interrupt()  # nothing swallowed yet: nothing raised
    interrupt = KeyboardInterrupt("swallowed in __del__")
    RaisesWhenCollected(interrupt)  # collected at once: its KeyboardInterrupt cannot propagate
    with pytest.raises(KeyboardInterrupt) as raised:
        raise_swallowed_interrupt()
    assert raised.value is interrupt
    raise_swallowed_interrupt()  # raised once, then forgotten
    RaisesWhenCollected(ValueError("not an interrupt"))
    raise_swallowed_interrupt()
    assert "ValueError: not an interrupt" in capsys.readouterr().err
