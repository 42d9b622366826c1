"""Message loss and delay injected under real transports and nodes (in memory).

Nodes run over :class:`p2p.testing.MemoryNetwork` with per-message faults
(see :func:`p2p.testing.run_with_faults`): each write is delayed up to
``max_delay`` and with probability ``loss`` lost (the connection then goes
dark, so the requester times out). Pushes, acks, shuffles and handshakes are
all exposed. Training must finish, the push-sum weight must stay bounded
during the run and be exact (N) once in-flight exchanges have settled: a push
whose reply was lost may have been merged, so it must be retransmitted (same
id, deduplicated), never forgotten.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from lab.faults import run_with_faults


async def test_training_completes_and_weight_stays_exact_under_loss_and_delay(
        tmp_path: Path) -> None:
    r = await run_with_faults(tmp_path, nodes=4, rounds=8, loss=0.1, delay=0.02)
    assert r.dropped > 0  # faults really happened
    assert all(a is not None for a in r.accuracy)
    assert r.pushes > 0  # and they really averaged
    # live weight counts shares merged but not yet acknowledged: bounded, not drifting
    assert 0.5 < r.weight_min and r.weight_max < 2.0, r
    assert r.settled == pytest.approx(1.0, rel=1e-9), r
