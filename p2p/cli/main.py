"""The ``p2p`` command line: run a node, inspect or stop it, make a swarm key.

::

    p2p run --config node.toml --data-dir ./n0 [--listen H:P] [--advertise H:P] [--bootstrap H:P,...]
    p2p run --relay-only --config node.toml --data-dir ./relay --listen 0.0.0.0:7661
    p2p status|peers|models|metrics|groups|checkpoint|stop (--data-dir DIR | --socket PATH)
    p2p keygen [--out FILE] [--force]          p2p config --config FILE [--json]
    p2p dashboard (--data-dir DIR | --glob PATTERN | --metrics-url URL)... [--listen H:P]
    p2p export (--data-dir DIR | --socket PATH) --out FILE   # the model as a state_dict

Errors print one line to stderr (``p2p: error: ...``) and exit non-zero (2: usage,
configuration or unsafe files; 3: data directory or port taken; 1: unreachable
node or failed command); tracebacks only with ``--log-level debug`` or
``P2P_DEBUG=1``. See docs/guide/operations.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import errno
import json
import logging
import os
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from p2p.cli.dashboard_args import add_arguments as add_dashboard_arguments
from p2p.config import (
    CLI_OPTIONS,
    LOG_FORMATS,
    LOG_LEVELS,
    ConfigError,
    NodeConfig,
    config_to_dict,
    encode_swarm_key,
    generate_swarm_key,
    load_config,
    load_swarm_key,
    option_setting,
    preflight,
    render_config_toml,
    write_swarm_key,
)
from p2p.config.factories import uses_user_code
from p2p.config.kinds import Integer, Number
from p2p.files import FileWriteError

__all__ = ["JsonLogFormatter", "build_parser", "main", "setup_logging"]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_IN_USE = 3  # `run`: another node holds the data directory, or the port is taken
EXIT_INTERRUPTED = 130

QUERY_COMMANDS = ("status", "peers", "models", "metrics", "groups")


class UsageError(Exception):
    """Bad command-line usage (exit status 2)."""


class CommandFailed(Exception):
    """A command could not do its job (exit status 1)."""


# --------------------------------------------------------------------------- logging

# Attributes every LogRecord has; anything else was passed with ``extra=``.
_STANDARD_RECORD_ATTRS = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", None, None)).keys()
) | {"message", "asctime", "taskName"}


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line: ``time`` (UTC ISO 8601), ``level``, ``logger``,
    ``message``, ``exc`` when there is a traceback, plus any ``extra=`` fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC)
            .isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD_RECORD_ATTRS and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def setup_logging(log_format: str = "text", level: str = "info",
                  stream: TextIO | None = None) -> None:
    """Configure the root logger: human text lines or JSON lines, on stderr."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonLogFormatter())
    else:
        handler.setFormatter(logging.Formatter(
            "%(asctime)s %(levelname)-7s %(name)s: %(message)s", "%Y-%m-%d %H:%M:%S"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())


# --------------------------------------------------------------------------- parser


def _add_target_options(parser: argparse.ArgumentParser) -> None:
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--data-dir", metavar="DIR",
                        help="the node's data directory (its admin socket is DIR/admin.sock); "
                             "default: $P2P_DATA_DIR")
    target.add_argument("--socket", metavar="PATH", help="path of the node's admin socket")
    parser.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                        help="how long to wait for the node's answer (default: 10)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``p2p`` command."""
    parser = argparse.ArgumentParser(
        prog="p2p",
        description="Peer-to-peer gossip learning daemon: train neural networks together, "
                    "averaging shared partial models by gossip, without a server.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    run = sub.add_parser(
        "run", help="run a node in the foreground",
        description="Run a node in the foreground until SIGINT/SIGTERM or `p2p stop`. "
                    "Command-line options override the config file.",
    )
    run.add_argument("--config", required=True, metavar="FILE",
                     help="TOML config file (see docs/guide/configuration.md and examples/)")
    run.add_argument("--data-dir", metavar="DIR",
                     help="data directory: identity key, checkpoint, admin socket "
                          "(overrides node.data_dir; created with mode 0700 if missing)")
    run.add_argument("--listen", metavar="HOST:PORT",
                     help="TCP address to accept peers on, port 0 = any free port "
                          "(overrides node.listen)")
    run.add_argument("--advertise", metavar="HOST:PORT",
                     help="address other nodes should dial, a host name or IP (overrides "
                          "node.advertise; default: the address peers confirm, see "
                          "docs/guide/deployment.md)")
    run.add_argument("--bootstrap", metavar="HOST:PORT,...",
                     help="comma-separated peers to join through (overrides node.bootstrap; "
                          "an empty string means none)")
    run.add_argument("--swarm-key-file", metavar="FILE",
                     help="swarm key written by `p2p keygen`: only nodes holding it can join "
                          "(overrides security.swarm_key_file)")
    run.add_argument("--log-format", choices=LOG_FORMATS,
                     help="log lines as human text or JSON objects (overrides node.log_format)")
    run.add_argument("--log-level", choices=LOG_LEVELS, type=str.lower,
                     help="minimum level logged (overrides node.log_level)")
    _add_override_options(run)
    run.add_argument("--relay-only", action="store_true",
                     help="run a bootstrap-and-relay node: peer sampling, reachability and "
                          "relaying for nodes behind NATs (relay.serve), no model, no data, "
                          "no torch (see docs/guide/deployment.md)")
    run.add_argument("--fresh", action="store_true",
                     help="start over: move an existing checkpoint aside (to "
                          "DIR/checkpoint.<date-time>.old) instead of resuming it; needed when "
                          "the network, models or data changed since it was trained")

    for name, text in (("status", "show a running node's status"),
                       ("peers", "show a running node's peer views"),
                       ("models", "show a running node's partial models"),
                       ("metrics", "show a running node's counters and timings"),
                       ("groups", "show a running node's automatic semi-local groups")):
        p = sub.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        _add_target_options(p)
        p.add_argument("--json", action="store_true",
                       help="print the raw JSON result instead of tables")

    ck = sub.add_parser("checkpoint", help="make a running node write a checkpoint now",
                        description="Make a running node write a checkpoint now.")
    _add_target_options(ck)
    ck.add_argument("--json", action="store_true", help="print the raw JSON result")

    stop = sub.add_parser("stop", help="stop a running node cleanly",
                          description="Ask a running node to checkpoint, close its "
                                      "connections and exit.")
    _add_target_options(stop)
    stop.add_argument("--wait", action="store_true",
                      help="wait until the node's process has exited (its pid is read from "
                           "the data directory's lock), up to --wait-timeout")
    stop.add_argument("--wait-timeout", type=float, default=60.0, metavar="SECONDS",
                      help="with --wait: how long to wait for the process to exit; exit "
                           "status 1 if it still runs then (default: 60)")
    stop.add_argument("--json", action="store_true", help="print the raw JSON result")

    keygen = sub.add_parser(
        "keygen", help="create a swarm key",
        description="Create a swarm key: 32 random bytes, base64. Give the same file to "
                    "every node of a private swarm (`--swarm-key-file`).",
    )
    keygen.add_argument("--out", metavar="FILE",
                        help="write the key to FILE (mode 0600) instead of printing it")
    keygen.add_argument("--force", action="store_true", help="overwrite an existing FILE")

    cfg = sub.add_parser("config", help="validate a config file and print it resolved",
                         description="Validate a config file and print it with every default "
                                     "filled in (exit 2 on the first error).")
    cfg.add_argument("--config", required=True, metavar="FILE", help="TOML config file")
    cfg.add_argument("--json", action="store_true",
                     help="print the resolved config as one JSON object instead of TOML")

    dash = sub.add_parser("dashboard", help="watch nodes live in a browser (read-only)",
                          description="Serve a live page over nodes' admin sockets or "
                                      "metrics URLs; prints its URL (with a random token).")
    add_dashboard_arguments(dash)

    export = sub.add_parser(
        "export", help="write the node's current model as a plain torch state_dict",
        description="Write the node's current model (a running node checkpoints first; "
                    "else its last checkpoint) with torch.save, as a plain state_dict: "
                    "load it with model.load_state_dict(torch.load(FILE)).")
    _add_target_options(export)
    export.add_argument("--out", required=True, metavar="FILE", help="file to write")
    return parser


def _add_override_options(run: argparse.ArgumentParser) -> None:
    """One ``--option`` per entry of CLI_OPTIONS not declared by hand above; its
    type and help come from the key's declaration in the schema."""
    declared = {flag for action in run._actions for flag in action.option_strings}
    for option, key in CLI_OPTIONS.items():
        flag = "--" + option.replace("_", "-")
        if flag in declared:
            continue
        declaration = option_setting(option)
        value_type = {Integer: int, Number: float}.get(type(declaration.kind), str)
        run.add_argument(flag, type=value_type, metavar=option.split("_")[-1].upper(),
                         help=f"{declaration.help} (overrides {key})")


# --------------------------------------------------------------------------- commands


def _cmd_run(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    config = config.with_overrides(**{option: getattr(args, option) for option in CLI_OPTIONS})
    if config.node.data_dir is None:
        raise UsageError("no data directory: pass --data-dir DIR or set node.data_dir in "
                         f"{args.config}")
    # data, key and models, as `p2p config` checks them: before the identity key, the
    # lock or the data directory is created (torch loads only for the user's code)
    learning = None
    if not args.relay_only:
        preflight(config)
        learning = _build_user_code(config)  # the user's code fails here: nothing created yet
    elif config.security.swarm_key_file is not None:  # a relay-only node reads no data
        load_swarm_key(config.security.swarm_key_file)
    setup_logging(config.node.log_format, config.node.log_level)
    from p2p.runtime.datadir_lock import DataDirLock

    # Held while the node runs: a second node on this directory stops here, before
    # it loads or logs anything; `p2p stop --wait` reads the node's pid from it.
    lock = DataDirLock(Path(config.node.data_dir).expanduser().absolute())
    try:
        if lock.data_dir.is_dir():
            lock.acquire()  # before torch loads, which takes seconds
        _probe_listen(config)
        from p2p.runtime.data_dir import check_data_dir_writable

        check_data_dir_writable(lock.data_dir)
        lock.acquire()  # a new directory: now that it exists (no-op when held)
        if args.relay_only:
            from p2p.runtime.relay_node import run_relay_node

            return run_relay_node(config)
        return _start_node(config, fresh=args.fresh, learning=learning)
    finally:
        lock.release()


def _build_user_code(config: NodeConfig) -> Any:
    """With the user's code (a factory, a hook) or another device: the node's network,
    data and trainer, built and checked on a first batch now (None otherwise: the node
    builds them after its lock is taken, as before)."""
    if not uses_user_code(config):
        return None
    from p2p.runtime.assembly import build_learning

    return build_learning(config)


def _probe_listen(config: NodeConfig) -> None:
    """Fail fast, before torch loads, when the listen or metrics port is taken (the
    node binds them for real before it resumes or logs anything)."""
    from p2p.config.metrics_section import METRICS_SETTING
    from p2p.wire.listen import bind_tcp_listeners

    listen, metrics = config.node.listen, config.metrics.listen
    if listen.port:  # port 0 never collides
        for sock in bind_tcp_listeners(listen.host or None, listen.port):
            sock.close()
    if metrics is not None and metrics.port:
        for sock in bind_tcp_listeners(metrics.host or None, metrics.port,
                                       setting=METRICS_SETTING):
            sock.close()


def _start_node(config: NodeConfig, *, fresh: bool = False, learning: Any = None) -> int:
    try:
        from p2p.runtime.node import run_node
    except ModuleNotFoundError as exc:
        if exc.name == "p2p.runtime.node":
            raise CommandFailed("the node runtime (p2p.runtime.node) is not installed") from exc
        raise
    built = {} if learning is None else {"learning": learning}  # with the user's code
    return int(run_node(config, fresh=fresh, **built) or 0)


def _socket_path(args: argparse.Namespace) -> Path:
    from p2p.runtime.admin_server import admin_socket_path

    if args.socket:
        return Path(args.socket)
    data_dir = args.data_dir or os.environ.get("P2P_DATA_DIR")
    if not data_dir:
        raise UsageError(f"`p2p {args.command}` needs --data-dir DIR or --socket PATH "
                         "(or $P2P_DATA_DIR)")
    return admin_socket_path(data_dir)


def _cmd_query(args: argparse.Namespace) -> int:
    from p2p.cli.admin_client import AdminClient

    result = AdminClient(_socket_path(args), timeout=args.timeout).request(args.command)
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
        return EXIT_OK
    from p2p.cli.render import make_console, render_result

    console = make_console()
    console.print(render_result(args.command, result, console.width))
    return EXIT_OK


def _cmd_stop(args: argparse.Namespace) -> int:
    from p2p.cli.admin_client import AdminClient
    from p2p.runtime.datadir_lock import lock_owner

    path = _socket_path(args)
    # The admin socket lives in the data directory, whose lock names the node's pid.
    pid = lock_owner(path.parent) if args.wait else None
    client = AdminClient(path, timeout=args.timeout)
    t0 = time.monotonic()
    result = client.request("stop")
    peer = client.last_peer  # who answered, as the kernel says (Linux)
    if pid is None and peer is not None and peer.pid > 0 and peer.pid != os.getpid():
        pid = peer.pid  # no lock to read: wait for the process that accepted the stop
    if not args.wait:
        _print_stop(args, result)
        return EXIT_OK
    if not args.json:
        _print_stop(args, result)
        what = f"pid {pid}" if pid is not None else f"the admin socket {path} (pid unknown)"
        print(f"waiting up to {args.wait_timeout:g} s for the node to exit ({what})",
              flush=True)
    if not _wait_gone(path, pid, args.wait_timeout):
        who = f"the node (pid {pid})" if pid is not None else f"the node on {path}"
        raise CommandFailed(
            f"{who} is still running {args.wait_timeout:g} s after the stop request (it may "
            "be finishing a long training round: see its log; raise --wait-timeout, or end it "
            f"with `kill {pid if pid is not None else 'PID'}`)")
    waited = time.monotonic() - t0
    if args.json:
        _print_stop(args, {**result, "exited": True, "pid": pid, "seconds": round(waited, 3)})
    else:
        print(f"node has exited ({'' if pid is None else f'pid {pid}, '}"
              f"{waited:.1f} s after the stop request)")
    return EXIT_OK


def _print_stop(args: argparse.Namespace, result: dict[str, Any]) -> None:
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
        return
    from p2p.cli.render import make_console, render_stop

    make_console().print(render_stop(result))


def _wait_gone(socket_path: Path, pid: int | None, timeout: float) -> bool:
    """Wait until process ``pid`` has exited (without a pid: until nothing
    answers on the admin socket); False if it still runs after ``timeout``."""
    from p2p.cli.admin_client import AdminClient, AdminConnectionError
    from p2p.runtime.datadir_lock import process_exited

    deadline = time.monotonic() + timeout
    while True:
        if pid is not None:
            if process_exited(pid):
                return True
        else:
            try:
                AdminClient(socket_path, timeout=1.0).request("help")
            except AdminConnectionError:
                return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _cmd_keygen(args: argparse.Namespace) -> int:
    key = generate_swarm_key()
    if not args.out:
        sys.stdout.write(encode_swarm_key(key))
        return EXIT_OK
    out = Path(args.out).expanduser()
    if out.is_dir():
        raise CommandFailed(f"{out} is a directory; give a file name to --out")
    if out.exists() and not args.force:
        raise CommandFailed(f"{out} already exists; refusing to overwrite a swarm key "
                            "(use --force to replace it)")
    try:
        write_swarm_key(out, key, replace=args.force)
    except FileWriteError as exc:
        if exc.errno == errno.EEXIST:
            raise CommandFailed(f"{out} already exists; use --force to replace it") from None
        raise CommandFailed(str(exc)) from None
    print(f"swarm key written to {out} (mode 0600); give this file to every node of the "
          "swarm with --swarm-key-file", file=sys.stderr)
    return EXIT_OK


def _cmd_config(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    preflight(config)  # what `p2p run` checks before it creates anything
    _build_user_code(config)  # imports and runs the user's code on a first batch
    if args.json:
        print(json.dumps(config_to_dict(config), indent=2))
    else:
        sys.stdout.write(render_config_toml(config))
    return EXIT_OK


def _cmd_dashboard(args: argparse.Namespace) -> int:
    from p2p.dashboard.cli import DashboardUsage, run_dashboard

    try:
        return run_dashboard(args)
    except DashboardUsage as exc:
        raise UsageError(str(exc)) from None


def _cmd_export(args: argparse.Namespace) -> int:
    from p2p.cli.export import ExportError, export_model

    try:
        print(export_model(_socket_path(args).parent, Path(args.out).expanduser(),
                           timeout=args.timeout))
    except ExportError as exc:
        raise CommandFailed(str(exc)) from None
    return EXIT_OK


_COMMANDS = {
    "run": _cmd_run,
    "status": _cmd_query,
    "peers": _cmd_query,
    "models": _cmd_query,
    "metrics": _cmd_query,
    "groups": _cmd_query,
    "checkpoint": _cmd_query,
    "stop": _cmd_stop,
    "keygen": _cmd_keygen,
    "config": _cmd_config,
    "dashboard": _cmd_dashboard,
    "export": _cmd_export,
}


def _error(message: str) -> None:
    print(f"p2p: error: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``p2p`` command; returns the exit status.

    Called without ``argv`` (the installed command, ``python -m p2p``), ``run``
    ends the process itself once the node has stopped (:func:`_end_process`).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    status = _run_command(args)
    if argv is None and args.command == "run":
        _end_process(status)
    return status


def _run_command(args: argparse.Namespace) -> int:
    debug = os.environ.get("P2P_DEBUG") == "1" or getattr(args, "log_level", None) == "debug"
    from p2p.cli.admin_client import AdminClientError
    from p2p.cli.failures import describe, root_cause

    try:
        try:
            return _COMMANDS[args.command](args)
        except BaseExceptionGroup as group:  # a node task's error, wrapped by its nursery
            cause = root_cause(group)
            if cause is group:
                raise
            raise cause from None
    except (ConfigError, UsageError) as exc:
        _error(str(exc))
        return EXIT_USAGE
    except (AdminClientError, CommandFailed) as exc:
        _error(str(exc))
        return EXIT_FAILURE
    except KeyboardInterrupt:
        _error("interrupted")
        return EXIT_INTERRUPTED
    except Exception as exc:
        status = _startup_failure(exc)
        if status is not None:
            if debug:
                traceback.print_exc()
            _error(str(exc))
            return status
        data_dir = sys.modules.get("p2p.runtime.data_dir")  # only loaded by `run`
        if data_dir is not None and isinstance(exc, data_dir.CheckpointError):
            _error(str(exc))
            checkpoint = sys.modules.get("p2p.runtime.checkpoint")
            broken = () if checkpoint is None else (checkpoint.CheckpointConflict,
                                                    checkpoint.CheckpointCorrupt)
            # fixed by a flag, or by running again (the corrupt files were moved aside)
            usage = (data_dir.DataDirError, *broken)
            return EXIT_USAGE if isinstance(exc, usage) else EXIT_FAILURE
        if debug:
            traceback.print_exc()
        _error(describe(exc) + ("" if debug else
               " (set P2P_DEBUG=1 or --log-level debug for a traceback)"))
        return EXIT_FAILURE


def _startup_failure(exc: Exception) -> int | None:
    """The exit status for a node that could not start, or None for other errors.

    EXIT_IN_USE when another process holds what the node needs (its data
    directory, its port); EXIT_USAGE when the listen address is wrong or the
    data directory or a key is not private to the node's user."""
    from p2p.file_safety import UnsafeFileError
    from p2p.runtime.admin_server import AdminError
    from p2p.runtime.datadir_lock import DataDirLocked, DataDirLockError
    from p2p.wire.listen import ListenError

    if isinstance(exc, UnsafeFileError):  # fixed by the operator (chown/chmod), like usage
        return EXIT_USAGE
    if isinstance(exc, DataDirLocked):
        return EXIT_IN_USE
    if isinstance(exc, ListenError):
        return EXIT_IN_USE if exc.in_use else EXIT_USAGE
    if isinstance(exc, DataDirLockError):
        return EXIT_USAGE
    if isinstance(exc, AdminError):  # e.g. the admin socket path is too long
        return EXIT_FAILURE
    return None


def _end_process(status: int) -> None:
    """Exit now, skipping the interpreter's teardown.

    Everything the node owns is already closed and its final checkpoint is on
    disk (fsync'ed), but tearing down torch's, numpy's and scikit-learn's
    modules runs full garbage collections that kept the process alive for
    seconds (8-11 s measured on a loaded machine) after its ``stopped`` line.
    """
    logging.shutdown()  # flush and close the log handlers
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)
