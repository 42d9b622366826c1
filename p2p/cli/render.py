"""Tables for people: render admin results (the JSON dicts) with :mod:`rich`.

Every renderer takes the ``result`` dict of one admin command (see
:mod:`p2p.runtime.admin_server` for the fields) and tolerates missing or extra fields: a
missing value shows as ``-``, unknown status fields are listed at the end, so
an older CLI still shows a newer node's answers. :func:`render_result` fits the
tables to the terminal (:mod:`p2p.cli.fit`): short headers, then fewer
columns, never a number broken across lines.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Callable, Mapping
from typing import Any, TypeGuard

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from p2p.cli.fit import fit_table

__all__ = [
    "RENDERERS",
    "fmt_age",
    "fmt_bytes",
    "fmt_duration",
    "fmt_groups",
    "fmt_strategy",
    "fmt_masking",
    "fmt_privacy",
    "make_console",
    "render_checkpoint",
    "render_groups",
    "render_metrics",
    "render_models",
    "render_peers",
    "render_result",
    "render_status",
    "render_stop",
    "to_text",
]

MISSING = "-"


# --------------------------------------------------------------------------- formatting


def _is_number(value: object) -> TypeGuard[int | float]:
    """A finite int or float (not a bool): a value the formatters can show."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def fmt_duration(seconds: object) -> str:
    """``3725.2`` -> ``"1h 02m 05s"``; sub-minute values keep one decimal."""
    if not _is_number(seconds) or seconds < 0:
        return MISSING
    s = float(seconds)
    if s < 60:
        return f"{s:.1f}s"
    total = int(s)
    days, rem = divmod(total, 86400)
    hours, rem = divmod(rem, 3600)
    minutes, secs = divmod(rem, 60)
    if days:
        return f"{days}d {hours:02d}h {minutes:02d}m"
    if hours:
        return f"{hours}h {minutes:02d}m {secs:02d}s"
    return f"{minutes}m {secs:02d}s"


def fmt_age(seconds: object) -> str:
    """Seconds since an event as ``"4.2s ago"`` (``never`` for null)."""
    if seconds is None:
        return "never"
    text = fmt_duration(seconds)
    return text if text == MISSING else f"{text} ago"


def fmt_bytes(n: object) -> str:
    """``1536`` -> ``"1.5 KiB"``."""
    if not _is_number(n):
        return MISSING
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return MISSING  # pragma: no cover


def _fmt_int(n: object) -> str:
    if isinstance(n, bool) or not _is_number(n):
        return MISSING
    return f"{int(n):,}"


def _fmt_float(x: object, digits: int = 4) -> str:
    return f"{float(x):.{digits}g}" if _is_number(x) else MISSING


def _fmt_percent(x: object) -> str:
    return f"{100 * float(x):.1f}%" if _is_number(x) else MISSING


def _fmt_id(node_id: object, width: int = 10) -> str:
    if not isinstance(node_id, str) or not node_id:
        return MISSING
    return node_id if len(node_id) <= width else node_id[:width] + "…"


def _fmt_text(value: object) -> str:
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value) or MISSING
    return str(value)


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _rows(value: object) -> list[Mapping[str, Any]]:
    if not isinstance(value, list):
        return []
    return [v for v in value if isinstance(v, Mapping)]


def fmt_privacy(value: object) -> str:
    """``status``'s ``privacy``: ``dp: epsilon 2.31 of budget 4 at delta 1e-05, ...``."""
    p = _mapping(value)
    if not p:
        return MISSING
    epsilon = p.get("epsilon")
    text = f"{p.get('mode', 'dp')}: epsilon "
    text += f"{float(epsilon):.3g}" if _is_number(epsilon) else "infinite (no noise)"
    if _is_number(p.get("budget")):
        text += f" of budget {float(p['budget']):g}"
        if p.get("budget_spent") is True:
            text += " (spent: training stopped)"
    text += (f" at delta {_fmt_float(p.get('delta'))}, noise multiplier "
             f"{_fmt_float(p.get('noise_multiplier'))}, clip norm {_fmt_float(p.get('clip_norm'))}"
             f", {_fmt_int(p.get('steps'))} DP-SGD steps at sample rate "
             f"{_fmt_float(p.get('sample_rate'), 3)}")
    return text


def _fmt_records(g: Mapping[str, Any]) -> str:
    expected = g.get("expected")
    of = f" of {_fmt_int(expected)}" if _is_number(expected) else ""
    return f"{_fmt_int(g.get('records'))}{of} projection records"


def _fmt_agreement(g: Mapping[str, Any]) -> str:
    """``fingerprint 3fa2c1d0e4…, 11 peers agree`` (+ disagreements repaired)."""
    text = f"fingerprint {_fmt_id(g.get('fingerprint'))}, {_fmt_int(g.get('peers_agreeing'))} " \
           "peers agree"
    disagreements = g.get("disagreements")
    if _is_number(disagreements) and disagreements:
        text += f", differing fingerprints seen: {_fmt_int(disagreements)} (re-synced)"
    return text


def _fmt_epoch(g: Mapping[str, Any]) -> str:
    """``1``, or ``1 attempt 2`` once the nodes looked again (``clustering.retries``)."""
    attempt = g.get("attempt")
    more = f" attempt {_fmt_int(attempt)}" if _is_number(attempt) and attempt else ""
    return _fmt_int(g.get("epoch")) + more


def fmt_masking(value: object) -> str:
    """``status``'s ``masking``: ``global: mixing, epoch 3, 4 pairs, 2 folds; ...`` plus
    each model's warning (a model with too few holders to hide its pushes)."""
    models = _mapping(value)
    if not models:
        return MISSING
    parts = []
    for name, raw in models.items():
        m = _mapping(raw)
        text = (f"{name}: {m.get('phase', '?')}, epoch {_fmt_int(m.get('epoch'))}, "
                f"{_fmt_int(m.get('pairs'))} pairs, {_fmt_int(m.get('folds'))} folds, "
                f"{_fmt_int(m.get('holders'))} holders")
        if isinstance(m.get("warning"), str):
            text += f" (WARNING: {m['warning']})"
        parts.append(text)
    return "; ".join(parts)


def fmt_strategy(value: object) -> str:
    """``status``'s ``strategy``: ``fedcurv (lambda 1, fisher_rounds 4, ...)``."""
    g = _mapping(value)
    if not g:
        return MISSING
    rest = [f"{k} {_fmt_float(v) if isinstance(v, float) else v}"
            for k, v in g.items() if k != "name" and not isinstance(v, (dict, list))]
    return f"{g.get('name', '?')}" + (f" ({', '.join(rest)})" if rest else "")


def fmt_groups(value: object) -> str:
    """``status``'s ``groups``: ``agreed, epoch 1: 5 groups; own: semi-e1-g2 (2 members);
    fingerprint 3fa2c1d0e4…, 11 peers agree``."""
    g = _mapping(value)
    if not g:
        return MISSING
    phase, epoch = g.get("phase"), _fmt_epoch(g)
    if phase == "agreed":
        members = g.get("members")
        own = (f"own: {g['model']} ({_fmt_int(members)} members)" if g.get("model")
               else "own: alone (its neurons stay local)")
        return (f"agreed, epoch {epoch}: {_fmt_int(g.get('count'))} groups; {own}; "
                + _fmt_agreement(g))
    if phase == "collecting":
        return f"collecting, epoch {epoch}: {_fmt_records(g)}"
    return f"{_fmt_text(phase)}, epoch {epoch}"


def fmt_relay(value: object) -> str:
    """``status``'s ``relay``: what this node relays for others and the relays it
    reserved with: ``reserved with 203.0.113.10:7661 (active, 2 circuits)``;
    ``relaying: 3 circuits, 5 reservations, 1.2 MB``."""
    r = _mapping(value)
    if not r:
        return MISSING
    parts = []
    if r.get("serving"):
        parts.append(f"relaying: {_fmt_int(r.get('circuits'))} circuits, "
                     f"{_fmt_int(r.get('reservations'))} reservations, "
                     f"{fmt_bytes(r.get('bytes_relayed'))} relayed, "
                     f"{_fmt_int(r.get('circuits_refused'))} circuits refused")
    held = [_mapping(x) for x in r.get("reserved_with") or []]
    if held:
        parts.append("reserved with " + ", ".join(
            f"{h.get('relay')} ({h.get('state')}"
            + (f": {h.get('reason')}" if h.get("reason") else "")
            + f", {_fmt_int(h.get('circuits'))} circuits)" for h in held))
    if r.get("reservation_problem"):
        parts.append(str(r["reservation_problem"]))
    return "; ".join(parts) or "not relaying, no reservation"


# --------------------------------------------------------------------------- renderers

_STATUS_FIELDS: tuple[tuple[str, str, Callable[[object], str]], ...] = (
    ("id", "node id", _fmt_text),
    ("name", "name", _fmt_text),
    ("addresses", "addresses", _fmt_text),
    ("reachable", "reachable", _fmt_text),
    ("relay", "relay", fmt_relay),
    ("uptime", "uptime", fmt_duration),
    ("round", "round", _fmt_int),
    ("steps", "steps", _fmt_int),
    ("loss", "train loss", _fmt_float),  # of the last round's mini-batches
    ("accuracy", "test accuracy", _fmt_percent),  # on the local test split
    ("isolated", "isolated", _fmt_text),
    ("collaborating", "collaborating", _fmt_text),
    ("training", "training", _fmt_text),
    ("checkpoint", "checkpoint", _fmt_text),  # only after a fallback or a file moved aside
    ("privacy", "privacy", fmt_privacy),
    ("masking", "masking", fmt_masking),
    ("groups", "groups", fmt_groups),
    ("strategy", "strategy", fmt_strategy),
    ("view_size", "peers in view", _fmt_int),
    ("connections", "connections", _fmt_int),
    ("pid", "pid", _fmt_text),
    ("data_dir", "data dir", _fmt_text),
    ("metrics_url", "metrics endpoint", _fmt_text),  # the Prometheus URL ([metrics])
)


# shown inside another row: collaboration_* in "collaborating", rounds in "training"
_STATUS_FOLDED = frozenset({"collaboration_state", "collaboration_reason", "isolation_reason",
                            "rounds", "reachable_reason", "confirmed_addresses"})


def _collaboration(result: Mapping[str, Any]) -> Text:
    """``yes: sharing global with 3 peers`` / ``no: <why>`` (red unless by design)."""
    value, reason = result.get("collaborating"), result.get("collaboration_reason")
    if not isinstance(value, bool):
        return Text(MISSING)
    if value:
        return Text("yes" + (f": {reason}" if isinstance(reason, str) else ""))
    benign = result.get("collaboration_state") == "local-only"
    if result.get("isolated") is True and not benign:
        return Text("no (isolated: see above)", style="bold red")
    return Text("no" + (f": {reason}" if isinstance(reason, str) else ""),
                style="" if benign else "bold red")


def _reachable(result: Mapping[str, Any]) -> Text:
    """``yes`` / ``no (why)`` / ``unknown (why)``: whether peers can dial this node,
    and the addresses peers confirmed."""
    value, reason = result.get("reachable"), result.get("reachable_reason")
    if not isinstance(value, str):
        return Text(MISSING)
    text = value + (f" ({reason})" if isinstance(reason, str) and reason else "")
    confirmed = result.get("confirmed_addresses")
    if isinstance(confirmed, list) and confirmed:
        text += "; confirmed by peers: " + ", ".join(str(a) for a in confirmed)
    return Text(text, style="bold red" if value == "no" else "")


def render_status(result: Mapping[str, Any]) -> RenderableType:
    """Two-column table of the ``status`` fields."""
    table = Table(title="node status", show_header=False, title_justify="left")
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value")
    for key, label, fmt in _STATUS_FIELDS:
        # no DP-SGD, no clustering, no metrics endpoint: no row
        if key not in result or (key in ("privacy", "masking", "groups", "checkpoint",
                                         "metrics_url")
                                 and not result[key]):
            continue
        value = fmt(result[key])
        if key == "isolated" and result[key] is True:
            reason = result.get("isolation_reason")
            table.add_row(label, Text(f"yes: {reason}" if isinstance(reason, str)
                                      else "yes (no peer reachable)", style="bold red"))
        elif key == "collaborating":
            table.add_row(label, _collaboration(result))
        elif key == "reachable":
            table.add_row(label, _reachable(result))
        else:
            table.add_row(label, value)
    known = {key for key, _, _ in _STATUS_FIELDS} | _STATUS_FOLDED
    for key in sorted(k for k in result if k not in known):
        table.add_row(key.replace("_", " "), _fmt_text(result[key]))
    return table


def _peer_table(title: str, peers: list[Mapping[str, Any]]) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("peer", no_wrap=True)
    table.add_column("address", no_wrap=True)
    table.add_column("age", justify="right")
    table.add_column("last contact", justify="right", no_wrap=True)
    table.add_column("failures", justify="right")
    table.add_column("path", no_wrap=True)
    table.add_column("models")
    for peer in sorted(peers, key=lambda p: (p.get("age") if _is_number(p.get("age")) else 1e18,
                                             str(p.get("id", "")))):
        failures = peer.get("failures")
        table.add_row(
            _fmt_id(peer.get("id")),
            _fmt_text(peer.get("address")),
            _fmt_int(peer.get("age")),
            fmt_age(peer.get("last_contact")) if "last_contact" in peer else MISSING,
            Text(_fmt_int(failures), style="red") if _is_number(failures) and failures
            else _fmt_int(failures),
            _fmt_text(peer.get("path")),
            _fmt_text(peer.get("models")),
        )
    if not peers:
        table.add_row("(none)", "", "", "", "", "", "")
    return table


def render_peers(result: Mapping[str, Any]) -> RenderableType:
    """The peer-sampling view, then one table per shared model's view."""
    parts: list[RenderableType] = []
    view = _rows(result.get("view"))
    parts.append(_peer_table(f"view ({len(view)} peers)", view))
    for name, peers in sorted(_mapping(result.get("models")).items()):
        rows = _rows(peers)
        parts.append(_peer_table(f"model {name!r} ({len(rows)} holders)", rows))
    return Group(*parts)


def render_models(result: Mapping[str, Any]) -> RenderableType:
    """One row per partial model: kind, size, fingerprint, weight, pushes, traffic."""
    table = Table(title="partial models", title_justify="left")
    table.add_column("model", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("params", justify="right")
    table.add_column("fingerprint", no_wrap=True)
    table.add_column("weight", justify="right")
    table.add_column("holders", justify="right")
    table.add_column("pushes\nout/in/rej", justify="right")
    table.add_column("sent", justify="right")
    table.add_column("received", justify="right")
    models = _rows(result.get("models"))
    for m in models:
        rejected = m.get("pushes_rejected")
        pushes = Text(f"{_fmt_int(m.get('pushes_sent'))}/{_fmt_int(m.get('pushes_received'))}/")
        pushes.append(_fmt_int(rejected),
                      style="red" if _is_number(rejected) and rejected else "")
        table.add_row(
            _fmt_text(m.get("name")),
            _fmt_text(m.get("kind")),
            _fmt_int(m.get("size")),
            _fmt_id(m.get("fingerprint")),
            _fmt_float(m.get("weight")),
            _fmt_int(m.get("holders")),
            pushes,
            fmt_bytes(m.get("bytes_sent")),
            fmt_bytes(m.get("bytes_received")),
        )
    if not models:
        table.add_row("(none)", *[""] * 8)
    table.caption = WEIGHT_LEGEND
    table.caption_justify = "left"
    return table


WEIGHT_LEGEND = ("weight: the node's push-sum weight for the model: 1 at start; each push hands "
                 "part of it to a peer and each merge adds the peer's, so it moves around 1 "
                 "(every holder's weights sum to the number of holders)")


def render_metrics(result: Mapping[str, Any]) -> RenderableType:
    """Counters, then timings (count, mean, max, total)."""
    counters = Table(title="counters", title_justify="left")
    counters.add_column("counter")
    counters.add_column("value", justify="right")
    for name, value in sorted(_mapping(result.get("counters")).items()):
        shown = _fmt_int(value) if isinstance(value, int) else _fmt_float(value, 6)
        counters.add_row(str(name), shown)
    timings = Table(title="timings", title_justify="left")
    for header in ("operation", "count", "mean", "max", "total"):
        timings.add_column(header, justify="left" if header == "operation" else "right")
    for name, t in sorted(_mapping(result.get("timings")).items()):
        t = _mapping(t)
        timings.add_row(str(name), _fmt_int(t.get("count")), _fmt_seconds(t.get("mean")),
                        _fmt_seconds(t.get("max")), _fmt_seconds(t.get("total")))
    return Group(counters, timings)


def _fmt_seconds(x: object) -> str:
    if not _is_number(x):
        return MISSING
    s = float(x)
    if s < 1e-3:
        return f"{s * 1e6:.0f} µs"
    if s < 1:
        return f"{s * 1e3:.1f} ms"
    return f"{s:.2f} s"


def render_checkpoint(result: Mapping[str, Any]) -> RenderableType:
    """One line: where the checkpoint went, its size and round."""
    return Text(
        f"checkpoint written: {_fmt_text(result.get('path'))} "
        f"({fmt_bytes(result.get('bytes'))}, round {_fmt_int(result.get('round'))}, "
        f"{_fmt_seconds(result.get('seconds'))})"
    )


def render_groups(result: Mapping[str, Any]) -> RenderableType:
    """Automatic semi-local groups: a line on the phase and agreement, then one row per
    group (its model, members; the node's own group, marked ``*``, with its barycentre
    distance and gain)."""
    phase, epoch = result.get("phase"), _fmt_epoch(result)
    if phase == "off":
        return Text("automatic grouping is off on this node (clustering.mode = \"off\")")
    head = f"groups: {_fmt_text(phase)}, epoch {epoch}, {_fmt_records(result)}"
    if phase != "agreed":
        return Text(head + " (no grouping agreed yet)")
    head += "; " + _fmt_agreement(result)
    own = _mapping(result.get("own"))
    own_members = own.get("members")
    table = Table()
    table.add_column("", no_wrap=True)
    table.add_column("model", no_wrap=True)
    table.add_column("size", justify="right")
    table.add_column("members")
    table.add_column("distance", justify="right")
    table.add_column("gain", justify="right")
    groups = _rows(result.get("groups"))
    for group in groups:
        members = group.get("members")
        mine = isinstance(members, list) and members == own_members
        table.add_row(
            "*" if mine else "",
            _fmt_text(group.get("model")) if group.get("model") else "(alone)",
            _fmt_int(len(members)) if isinstance(members, list) else MISSING,
            ", ".join(_fmt_id(m) for m in members) if isinstance(members, list) else MISSING,
            _fmt_float(group.get("barycentre_distance")) if mine else "",
            _fmt_float(group.get("gain")) if mine else "",
        )
    if not groups:
        table.add_row("", "(none)", "", "", "", "")
    table.caption = ("* this node's group; distance: its projection to the group's barycentre; "
                     "gain: its utility in the group minus alone")
    table.caption_justify = "left"
    return Group(Text(head), table)


def render_stop(result: Mapping[str, Any]) -> RenderableType:
    """Acknowledge a stop request."""
    if result.get("stopping") is False:
        return Text("the node refused to stop")
    return Text("node is stopping (it checkpoints and exits)")


RENDERERS: dict[str, Callable[[Mapping[str, Any]], RenderableType]] = {
    "status": render_status,
    "peers": render_peers,
    "models": render_models,
    "metrics": render_metrics,
    "checkpoint": render_checkpoint,
    "stop": render_stop,
    "groups": render_groups,
}


#: How each command's tables fit a narrow terminal: columns dropped first to last,
#: shorter headers, and the free-text columns (wrapped between words).
_FITTING: dict[str, dict[str, Any]] = {
    "status": {"wrap": ("value",)},
    "peers": {"drop": ("age", "last contact"), "short": {"last contact": "contact",
                                                         "failures": "fail"},
              "wrap": ("models",)},
    "models": {"drop": ("kind", "fingerprint", "holders", "received"),
               "short": {"fingerprint": "fp", "holders": "hold", "received": "recv"}},
    "metrics": {"wrap": ("counter",)},
    "groups": {"drop": ("distance",), "wrap": ("members",)},
}


def render_result(command: str, result: Mapping[str, Any], width: int = 120) -> RenderableType:
    """The renderer for ``command`` applied to ``result``, its tables fitted to ``width``."""
    return fitted(RENDERERS[command](result), width, **_FITTING.get(command, {}))


def fitted(renderable: RenderableType, width: int, **fitting: Any) -> RenderableType:
    """Every table in ``renderable`` fitted to ``width`` (:func:`p2p.cli.fit.fit_table`)."""
    if isinstance(renderable, Table):
        return fit_table(renderable, width, **fitting)
    if isinstance(renderable, Group):
        for part in renderable.renderables:
            fitted(part, width, **fitting)
    return renderable


def make_console(file: Any = None) -> Console:
    """A console for CLI output: the terminal's width, or when piped ``$COLUMNS``
    or 120 columns (rich would use 80, which squeezes the wider tables)."""
    console = Console(file=file)
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console = Console(file=file, width=120)
    return console


def to_text(renderable: RenderableType, *, width: int = 100) -> str:
    """Render to plain text (no colours): for tests, docs and pipes."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, force_terminal=False,
                      legacy_windows=False)
    console.print(renderable)
    return buffer.getvalue()
