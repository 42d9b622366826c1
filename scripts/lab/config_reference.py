"""The configuration reference's ``[strategy]`` table, generated from the plug-ins.

docs/guide/configuration.md holds, between :data:`BEGIN` and :data:`END`, the table
of ``[strategy]``: ``strategy.name`` (each registered strategy's summary), then each
strategy's keys with their default and help, as its ``settings.py`` declares them.
After changing a strategy's settings (or adding one), rewrite the table with
``python -m lab.config_reference``; ``--check`` only says whether the page is
current (tests/docs/test_config_reference.py runs it).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

from p2p.config import StrategyConfig
from p2p.config.document import toml_value
from p2p.config.kinds import settings_of
from p2p.strategies import STRATEGY_TABLE, StrategyPlugin

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "configuration.md"
BEGIN = ("<!-- generated from each strategy's settings.py by "
         "`python -m lab.config_reference`: edit those, not this table -->")
END = "<!-- end of the generated table -->"


def strategy_table(table: Mapping[str, StrategyPlugin] = STRATEGY_TABLE) -> list[str]:
    """The ``[strategy]`` table's lines (header included), in registry order."""
    names = "; ".join(f'`"{name}"`: {plugin.summary}' for name, plugin in table.items())
    lines = ["| key | default | meaning |", "|---|---|---|",
             f'| `strategy.name` | `"{StrategyConfig().name}"` | {names} |']
    for plugin in table.values():
        if plugin.settings is None:
            continue
        defaults = {f.name: f.default for f in dataclasses.fields(plugin.settings)}
        for key, declared in settings_of(plugin.settings).items():
            default = toml_value(declared.kind.dump(defaults[key]))
            lines.append(f"| `strategy.{key}` | `{default}` | {declared.help} |")
    return lines


def with_table(page: str, lines: Sequence[str]) -> str:
    """``page`` with the text between its markers replaced by ``lines``."""
    head, begin, rest = page.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise ValueError(f"the page lacks the markers {BEGIN!r} ... {END!r}")
    return "".join([head, BEGIN, "\n", "\n".join(lines), "\n", END, tail])


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true",
                   help="exit 1 if the page's table differs from the strategies' settings")
    p.add_argument("--page", type=Path, default=PAGE, help="the page (default: %(default)s)")
    args = p.parse_args(argv)
    page = args.page.read_text()
    wanted = with_table(page, strategy_table())
    if wanted == page:
        print(f"{args.page}: the [strategy] table is current")
        return 0
    if args.check:
        print(f"{args.page}: the [strategy] table differs from the strategies' settings; "
              "run python -m lab.config_reference")
        return 1
    args.page.write_text(wanted)
    print(f"{args.page}: [strategy] table rewritten")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
