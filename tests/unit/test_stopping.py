"""wapflow.stopping: a stop signal that lands where Python cannot raise is not lost, nor printed."""

from __future__ import annotations

import signal
import sys
import textwrap
import time
import weakref

import pytest

from wapflow.stopping import Stop, StopRequested


class _Held:
    pass


def _signal_inside_a_weakref_callback(stop: Stop) -> None:
    """SIGTERM while Python runs a weakref callback (as an import's module lock has): the handler runs there."""
    held = _Held()

    def callback(_: object) -> None:
        signal.raise_signal(signal.SIGTERM)
        stop.signum = stop.signum  # a bytecode after the signal: Python runs the handler here, in the callback

    ref = weakref.ref(held, callback)
    del held
    assert ref() is None


def test_a_stop_raised_inside_a_weakref_callback_is_raised_again_on_the_main_thread(
    capfd: pytest.CaptureFixture[str],
) -> None:
    stop = Stop()
    stop.install()
    try:
        with pytest.raises(StopRequested, match="SIGTERM"):
            _signal_inside_a_weakref_callback(stop)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                time.sleep(0.01)
        assert stop.requested.is_set() and stop.signum == signal.SIGTERM
    finally:
        stop.uninstall()
    err = capfd.readouterr().err
    assert "Exception ignored" not in err and "Traceback" not in err, err


def test_a_dropped_stop_asks_the_graceful_part_that_began_meanwhile_and_raises_nothing() -> None:
    stop = Stop()
    stop.install()
    asked: list[bool] = []
    try:
        _signal_inside_a_weakref_callback(stop)
        with stop.graceful(lambda: asked.append(True)) as requested:
            time.sleep(0.2)  # the signal sent again arrives here: the part was asked when it began
            assert requested.is_set()
    finally:
        stop.uninstall()
    assert asked == [True]


def test_other_unraisable_exceptions_go_to_the_hook_that_was_there() -> None:
    seen: list[BaseException | None] = []
    before = sys.unraisablehook
    sys.unraisablehook = lambda u: seen.append(u.exc_value)
    stop = Stop()
    stop.install()
    try:
        held = _Held()

        def callback(_: object) -> None:
            raise ValueError("not a stop")

        ref = weakref.ref(held, callback)
        del held
        assert ref() is None
    finally:
        stop.uninstall()
        restored = sys.unraisablehook
        sys.unraisablehook = before
    assert [type(e) for e in seen] == [ValueError]
    assert restored is not before  # uninstall gave back the hook it found (this test's), not Python's default


def test_a_dropped_stop_is_not_sent_again_once_the_handlers_are_gone() -> None:
    """uninstall within the 10 ms before the signal is sent again: nothing is sent (Python's default action for
    SIGTERM would end the process)."""
    stop = Stop()
    stop.install()
    _signal_inside_a_weakref_callback(stop)
    stop.uninstall()
    received: list[int] = []
    before = signal.signal(signal.SIGTERM, lambda signum, _: received.append(signum))
    try:
        time.sleep(0.2)
    finally:
        signal.signal(signal.SIGTERM, before)
    assert received == []


def test_an_error_a_library_raises_in_place_of_the_stop_ends_the_command_as_the_stop() -> None:
    """pydantic builds a model's validator in Rust at import: a stop landing there comes out as its SchemaError
    ("Error building ... StopRequested: stopped by SIGTERM"), not as the stop. `wap` ends it as the stop:
    its one line and exit code, no traceback (a SIGTERM at 0.25 s of `wap watch` once printed that error).
    In a process of its own: a stopped command ends this process's children (a JVM it started)."""
    import subprocess

    from wapflow.cli.stop import wrapped_stop
    from wapflow.errors import EXIT_STOPPED

    assert wrapped_stop(RuntimeError("a real failure")) is None  # no stop came: an error is an error
    script = textwrap.dedent(
        """
        import signal, sys
        import wapflow.cli as cli
        from wapflow.stopping import STOP, StopRequested

        def start_up_cut_by_a_stop():
            try:
                STOP.deliver(signal.SIGTERM)
            except StopRequested as stop:
                raise RuntimeError(f"Error building validator: {stop}") from None  # the cause lost, as in pydantic

        cli._engine_first = start_up_cut_by_a_stop
        sys.argv = ["wap", "ingest", "trips"]
        cli.main()
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == EXIT_STOPPED, done.stderr
    err = done.stderr
    assert err.startswith("stopped by SIGTERM") and "Traceback" not in err and "Error building" not in err, err
