"""Refusals by where and why, read from the flat counters of the admin ``metrics``.

One reading for the Prometheus ``p2p_refusals_total`` and the dashboard's table:
push-sum refusals per model (``<model>.rejected`` counts them all; guard and
bad replies are named parts of it, the rest is ``invalid``; delta references
missing and evicted replies are counted apart), requests the node did not
expect, and peer-sampling messages and descriptors it refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Refusal", "offences", "refusals"]

#: named parts of ``<model>.rejected``
_PUSH_PARTS = {"guard": "guard_refused", "bad_reply": "bad_replies"}
#: refusals counted apart from ``<model>.rejected``
_PUSH_APART = {"reference_missing": "references_missing", "reply_evicted": "replies_evicted"}
_SAMPLING = {"message": "messages_rejected", "descriptor": "descriptors_rejected",
             "unsolicited": "unsolicited_dropped"}


@dataclass(frozen=True)
class Refusal:
    """``count`` messages refused by ``source`` for ``reason`` (``model``: "" if none)."""

    source: str
    reason: str
    model: str
    count: int


def _int(value: object) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def refusals(counters: Mapping[str, object]) -> list[Refusal]:
    """Every refusal counter of one node's ``metrics`` counters, zeros included."""
    out: list[Refusal] = []
    models = sorted(key[: -len(".rejected")] for key in counters
                    if key.endswith(".rejected") and not key.startswith("peer_sampling."))
    for model in models:
        named = 0
        for reason, key in _PUSH_PARTS.items():
            count = _int(counters.get(f"{model}.{key}"))
            named += count
            out.append(Refusal("push", reason, model, count))
        out.append(Refusal("push", "invalid", model,
                           max(0, _int(counters.get(f"{model}.rejected")) - named)))
        for reason, key in _PUSH_APART.items():
            out.append(Refusal("push", reason, model, _int(counters.get(f"{model}.{key}"))))
    out.append(Refusal("request", "unexpected", "", _int(counters.get("rejected_messages"))))
    for reason, key in _SAMPLING.items():
        out.append(Refusal("peer_sampling", reason, "",
                           _int(counters.get(f"peer_sampling.{key}"))))
    return out


def offences(counters: Mapping[str, object]) -> dict[str, int]:
    """``offences.<subsystem>`` counters: warning lines peers caused, per subsystem."""
    return {key.partition(".")[2]: _int(value) for key, value in counters.items()
            if key.startswith("offences.")}
