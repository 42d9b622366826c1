"""Rate-limited log lines (:mod:`common.log_limit`), under gossip's name for its users."""

from common.log_limit import DEFAULT_LOG_INTERVAL, OTHERS, LogLimiter

__all__ = ["DEFAULT_LOG_INTERVAL", "OTHERS", "LogLimiter"]
