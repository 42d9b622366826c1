"""Automatic semi-local groups on the operator surface: the admin command ``groups``,
``p2p groups`` (table and ``--json``) and the groups line of ``p2p status``."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import trio

from p2p.cli.admin_client import AdminClient
from p2p.cli.main import main
from p2p.cli.render import fmt_groups, render_groups, render_status, to_text
from p2p.runtime.admin_commands import groups_report, groups_summary
from p2p.runtime.admin_server import admin_socket_path, serve_admin, to_jsonable
from p2p.runtime.grouping.status import GroupsStatus, GroupView

NAN = float("nan")
ME = b"\x9f" * 32
PEER = b"\xa1" * 32
OTHERS = (b"\x01" * 32, b"\x02" * 32)
LONER = b"\x03" * 32

OWN = GroupView(model="semi-e1-g1", members=(PEER, ME), barycentre_distance=0.125, gain=0.0625)
AGREED = GroupsStatus(
    phase="agreed", epoch=1, records=5, expected=5, fingerprint="3fa2c1d0e4" + "0" * 54,
    groups=(GroupView("semi-e1-g0", OTHERS, NAN, NAN), OWN, GroupView(None, (LONER,), NAN, NAN)),
    own=OWN, peers_agreeing=4, disagreements=1)
COLLECTING = GroupsStatus(phase="collecting", epoch=1, records=3, expected=5, fingerprint=None,
                          groups=(), own=None, peers_agreeing=0, disagreements=0)


def _json(value: object) -> Any:
    """What the admin socket carries: the server's JSON encoding, through json."""
    return json.loads(json.dumps(to_jsonable(value), allow_nan=False))


def test_groups_report_is_json_with_hex_ids_and_null_for_other_groups_figures() -> None:
    report = _json(groups_report(ME, AGREED))
    assert report["id"] == ME.hex() and report["phase"] == "agreed"
    assert report["own"]["members"] == [PEER.hex(), ME.hex()]
    assert [g["model"] for g in report["groups"]] == ["semi-e1-g0", "semi-e1-g1", None]
    assert report["groups"][0]["barycentre_distance"] is None  # NaN: not this node's group
    assert report["groups"][1]["gain"] == 0.0625
    assert (report["peers_agreeing"], report["disagreements"]) == (4, 1)


def test_groups_table_shows_members_short_and_own_figures() -> None:
    text = to_text(render_groups(_json(groups_report(ME, AGREED))), width=140)
    assert "agreed, epoch 1, 5 of 5 projection records" in text
    assert "fingerprint 3fa2c1d0e4…, 4 peers agree" in text
    assert "differing fingerprints seen: 1" in text
    own_row = next(line for line in text.splitlines() if "semi-e1-g1" in line)
    assert "*" in own_row and "0.125" in own_row and "0.0625" in own_row
    assert f"{PEER.hex()[:10]}…" in own_row and ME.hex() not in text  # ids shortened
    other_row = next(line for line in text.splitlines() if "semi-e1-g0" in line)
    assert "*" not in other_row and "0.125" not in other_row
    assert "(alone)" in text and f"{LONER.hex()[:10]}…" in text


def test_groups_table_before_agreement_and_when_off() -> None:
    text = to_text(render_groups(_json(groups_report(ME, COLLECTING))))
    assert "collecting, epoch 1, 3 of 5 projection records (no grouping agreed yet)" in text
    assert "off" in to_text(render_groups(_json(groups_report(ME, GroupsStatus.off()))))


def test_status_line_summarises_groups_and_is_absent_when_off() -> None:
    assert groups_summary(GroupsStatus.off()) is None
    summary = _json(groups_summary(AGREED))
    assert (summary["count"], summary["model"], summary["members"]) == (2, "semi-e1-g1", 2)
    line = fmt_groups(summary)
    assert line.startswith("agreed, epoch 1: 2 groups; own: semi-e1-g1 (2 members)")
    alone = GroupView(None, (LONER,), 0.5, 0.0)
    loner = GroupsStatus("agreed", 1, 5, 5, "ab" * 32, AGREED.groups, alone, 4, 0)
    assert "own: alone" in fmt_groups(_json(groups_summary(loner)))
    assert fmt_groups(_json(groups_summary(COLLECTING))) == (
        "collecting, epoch 1: 3 of 5 projection records")
    # once the nodes looked again (clustering.retries) the attempt shows
    second = dataclasses.replace(COLLECTING, phase="pretraining", records=0, attempt=1)
    assert _json(groups_summary(second))["attempt"] == 1
    assert fmt_groups(_json(groups_summary(second))) == "pretraining, epoch 1 attempt 1"
    assert "epoch 1 attempt 1" in to_text(render_groups(_json(groups_report(ME, second))))
    status = {"id": ME.hex(), "round": 3, "groups": summary}
    assert "groups" in to_text(render_status(status)) and "semi-e1-g1" in to_text(
        render_status(status))
    assert "groups" not in to_text(render_status({"id": ME.hex(), "groups": None}))


class _GroupsHandler:
    """A node with clustering on, as far as the admin socket shows."""

    def status(self) -> dict[str, Any]:
        return {"id": ME.hex(), "name": "g", "round": 9, "isolated": False,
                "groups": groups_summary(AGREED)}

    def peers(self) -> dict[str, Any]:
        return {"view": [], "models": {}}

    def models(self) -> dict[str, Any]:
        return {"models": []}

    def metrics(self) -> dict[str, Any]:
        return {"counters": {}, "timings": {}}

    def checkpoint(self) -> dict[str, Any]:
        return {"path": "/c", "bytes": 1, "round": 9, "seconds": 0.0}

    def stop(self) -> dict[str, Any]:
        return {"stopping": True}

    def groups(self) -> dict[str, Any]:
        return groups_report(ME, AGREED)


async def test_groups_verb_and_status_line_over_a_live_socket(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the lines below hold at the piped default width; pytest-xdist's workers set COLUMNS=80
    monkeypatch.setenv("COLUMNS", "120")
    async with trio.open_nursery() as nursery:
        path = admin_socket_path(tmp_path)
        await nursery.start(serve_admin, path, _GroupsHandler())

        async def cli(*argv: str) -> tuple[int, str]:
            code = await trio.to_thread.run_sync(main, list(argv))
            return code, capsys.readouterr().out

        raw = await trio.to_thread.run_sync(lambda: AdminClient(path, timeout=60).request(
            "groups"))
        assert raw["fingerprint"] == AGREED.fingerprint and raw["own"]["gain"] == 0.0625
        code, out = await cli("groups", "--data-dir", str(tmp_path))
        assert code == 0 and "semi-e1-g1" in out and "4 peers agree" in out
        code, out = await cli("groups", "--socket", str(path), "--json")
        assert code == 0 and json.loads(out) == raw
        code, out = await cli("status", "--data-dir", str(tmp_path))
        assert code == 0 and "agreed, epoch 1: 2 groups" in out
        code, out = await cli("status", "--data-dir", str(tmp_path), "--json")
        assert code == 0 and json.loads(out)["groups"]["fingerprint"] == AGREED.fingerprint
        nursery.cancel_scope.cancel()


def test_groups_verb_without_a_node_fails_like_the_other_verbs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["groups", "--data-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("p2p: error: ") and "is the node running" in err
