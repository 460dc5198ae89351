"""A Ctrl-C or SIGTERM that Python swallowed, raised again where the loops can stop.

A signal's handler raises in whatever code runs when it arrives. When that is a garbage-collection
callback (JAX registers one) or a ``__del__``, the interpreter prints "Exception ignored in" and goes
on: the interrupt is lost and the run would compute to its last iteration (seen in CI: a SIGTERMed
``backend=jax`` cell ran on). :func:`keep_swallowed_interrupts` (installed with the signal handlers,
tracking.lifecycle) keeps such an interrupt instead, and the MCSA loops call
:func:`raise_swallowed_interrupt` between steps, so the run ends as the signal meant.
"""

from __future__ import annotations

import sys

_swallowed: list[KeyboardInterrupt] = []


def _keep_or_report(unraisable) -> None:
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        _swallowed.append(unraisable.exc_value)
    else:
        sys.__unraisablehook__(unraisable)


def keep_swallowed_interrupts() -> None:
    """Interrupts raised where Python cannot propagate them are kept for :func:`raise_swallowed_interrupt`;
    every other such exception is reported as Python reports it."""
    sys.unraisablehook = _keep_or_report


def raise_swallowed_interrupt() -> None:
    """Raise the first interrupt Python swallowed since the last call, if any."""
    if _swallowed:
        interrupt = _swallowed[0]
        _swallowed.clear()
        raise interrupt
