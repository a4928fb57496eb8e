"""Before the event loop owns the signals, SIGTERM and SIGHUP interrupt like SIGINT (so the leases
taken by ``prepare`` are released), and the previous handlers come back afterwards."""

from __future__ import annotations

import os
import signal

import pytest

from lair.launch.run import _signals_interrupt


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_signal_becomes_keyboard_interrupt_then_handlers_are_restored(sig: signal.Signals) -> None:
    before = signal.getsignal(sig)
    with pytest.raises(KeyboardInterrupt), _signals_interrupt():
        os.kill(os.getpid(), sig)
        signal.sigtimedwait([], 0)  # give the interpreter a chance to run the handler
        raise AssertionError("the signal did not interrupt")
    assert signal.getsignal(sig) == before
