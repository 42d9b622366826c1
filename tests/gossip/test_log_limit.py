"""The rate-limited log helper (gossip.log_limit) with a fake clock: plain numbers."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from gossip import LogLimiter, Push, PushSum, RejectedPush, encode
from gossip.log_limit import OTHERS

LOG = logging.getLogger("test.log_limit")


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOG.name]


def test_first_line_then_one_summary_per_offender_and_interval(
        caplog: pytest.LogCaptureFixture) -> None:
    limiter = LogLimiter(LOG, interval=30.0)
    with caplog.at_level(logging.INFO, logger=LOG.name):
        for i in range(58):
            limiter.warning(float(i) * 0.5, "peer A", "frame %d refused from A: %s", i, "bad MAC")
        limiter.warning(1.0, "peer B", "frame refused from B")
        assert lines(caplog) == ["frame 0 refused from A: bad MAC", "frame refused from B"]
        assert limiter.flush(29.9) == 0  # A's window is not over yet
        assert limiter.flush(30.0) == 1  # A: summary; B had nothing more to say
        assert limiter.flush(31.0) == 0  # B's window closes silently
    assert lines(caplog)[2] == ("peer A: 57 more lines like this in the last 30 s, not logged "
                                "one by one (last: frame 57 refused from A: bad MAC)")
    assert len(lines(caplog)) == 3 and limiter.suppressed_total == 57
    assert limiter.tracked == 0
    # every offence counts, written or not (the node's p2p_offences_total); INFO lines do not
    assert limiter.warnings_total == 59
    limiter.log(40.0, "peer C", logging.INFO, "busy, no offence")
    assert limiter.warnings_total == 59


def test_a_new_window_starts_with_a_full_line_and_any_call_flushes_others(
        caplog: pytest.LogCaptureFixture) -> None:
    limiter = LogLimiter(LOG, interval=10.0)
    with caplog.at_level(logging.INFO, logger=LOG.name):
        assert limiter.warning(0.0, "A", "a1")
        assert not limiter.warning(1.0, "A", "a2")
        assert limiter.warning(12.0, "B", "b1")  # A's summary is written on the way
        assert limiter.warning(13.0, "A", "a3")  # A's next window: a full line again
    assert lines(caplog) == [
        "a1", "A: 1 more lines like this in the last 12 s, not logged one by one (last: a2)",
        "b1", "a3"]


def test_summary_keeps_the_highest_level() -> None:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("test.log_limit.levels")
    logger.propagate = False
    logger.addHandler(Keep())
    logger.setLevel(logging.DEBUG)
    limiter = LogLimiter(logger, interval=5.0)
    limiter.log(0.0, "A", logging.INFO, "first")
    limiter.log(1.0, "A", logging.DEBUG, "quiet")
    limiter.log(2.0, "A", logging.ERROR, "loud")
    limiter.flush(5.0)
    assert [(r.levelno, r.getMessage()[:14]) for r in records] == [
        (logging.INFO, "first"), (logging.ERROR, "A: 2 more line")]


def test_offenders_beyond_max_keys_share_one_window(caplog: pytest.LogCaptureFixture) -> None:
    limiter = LogLimiter(LOG, interval=30.0, max_keys=3)
    with caplog.at_level(logging.INFO, logger=LOG.name):
        for i in range(100):
            limiter.warning(0.0, f"10.0.0.{i}", "refused %d", i)
        limiter.flush(30.0)
    got = lines(caplog)
    # three own windows, one shared: 4 full lines and one summary of the other 96
    assert got[:4] == ["refused 0", "refused 1", "refused 2", "refused 3"]
    assert got[4].startswith(f"{OTHERS}: 96 more lines") and len(got) == 5
    assert limiter.tracked == 0


@pytest.mark.parametrize("bad", [{"interval": 0.0}, {"max_keys": 0}])
def test_bad_settings_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        LogLimiter(LOG, **bad)  # type: ignore[arg-type]


def test_push_sum_logs_one_line_and_one_summary_per_rejecting_sender(
        caplog: pytest.LogCaptureFixture) -> None:
    core = PushSum(b"\x07" * 32, np.zeros(4), rng=np.random.default_rng(0))
    bad = np.zeros(4)
    with caplog.at_level(logging.WARNING, logger="gossip.pushsum"):
        for i in range(50):
            push = Push(core.fingerprint, i, encode(bad, "f64"), -1.0)
            with pytest.raises(RejectedPush):
                core.on_push(b"\x01" * 32, push, now=i * 0.1)
        # the next offence after the interval flushes the summary first
        with pytest.raises(RejectedPush):
            core.on_push(b"\x01" * 32, Push(core.fingerprint, 99, encode(bad, "f64"), -1.0),
                         now=60.0)
    got = [r.getMessage() for r in caplog.records if r.name == "gossip.pushsum"]
    assert len(got) == 3, got
    assert got[0].startswith("rejected push from 01010101")
    assert got[1].startswith("01" * 32 + ": 49 more lines like this in the last 60 s")
    assert got[2].startswith("rejected push from 01010101")
    assert core.counters.rejected == 51  # every rejection is still counted
