"""The ``hpclab`` command (chapter 00).

``hpclab doctor [--json]``, ``hpclab run --list``, ``hpclab run NAME [--param value ...]
[--json] [--save [--label L]]``, ``hpclab exercises build|check``,
``hpclab notebooks refresh|clean PATH...``.

Bad arguments print one line naming the argument and what is allowed, and exit 2. A run that
fails for another reason (a rank died, a data file is missing or corrupt) prints what happened,
the cause first, and exits 1; never a traceback of the command itself.
``--json`` prints exactly one JSON object on stdout and nothing else.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, NoReturn

from hpclab.config import ConfigError, element_type


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad arguments in one line (no usage block) with exit code 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def _fail(message: str, code: int = 2) -> NoReturn:
    sys.stderr.write(f"hpclab: error: {message}\n")
    raise SystemExit(code)


def _tuple_parser(f: dict[str, Any]) -> Any:
    """Comma-separated values of the field's element type. An empty list is refused: where the
    default is empty ("choose automatically", as autotune's threads and ranks), say ``auto``."""
    default = f["default"]
    auto = not default
    elem = element_type(default, f["min"], f["max"])

    def parse(text: str) -> tuple:
        if auto and text.strip() == "auto":
            return ()
        items = [x.strip() for x in text.split(",")]
        if not all(items):
            hint = " or 'auto' (choose automatically)" if auto else ""
            raise argparse.ArgumentTypeError(
                f"expected comma-separated {elem.__name__} values{hint}, got {text!r}"
            )
        try:
            return tuple(elem(x) for x in items)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected comma-separated {elem.__name__} values, got {text!r}"
            ) from None

    return parse


def _add_config_flags(parser: argparse.ArgumentParser, config_cls: Any) -> None:
    for f in config_cls.describe():
        # A trailing underscore lets a field use a Python keyword as its flag (from_ -> --from).
        flag = "--" + f["name"].rstrip("_").replace("_", "-")
        default = f["default"]
        help_text = f"{f['help']} (default {default!r}; allowed: {f['allowed']})"
        if isinstance(default, bool):
            parser.add_argument(
                flag, dest=f["name"], action=argparse.BooleanOptionalAction, help=help_text
            )
        elif isinstance(default, tuple):
            parser.add_argument(flag, dest=f["name"], type=_tuple_parser(f), help=help_text)
        else:
            kind = type(default) if isinstance(default, (int, float)) else str
            if isinstance(default, float):
                kind = float
            parser.add_argument(flag, dest=f["name"], type=kind, help=help_text)


def _cmd_doctor(args: argparse.Namespace) -> int:
    from hpclab.doctor import format_report, run_checks
    from hpclab.measure.sysinfo import system_info

    info = system_info()
    checks = run_checks(info)
    if args.json:
        print(
            json.dumps(
                {"env": info, "checks": [c.__dict__ for c in checks]},
                default=str,
            )
        )
    else:
        print(format_report(checks, info))
    return 1 if any(c.level == "fail" for c in checks) else 0


def _list_experiments() -> int:
    """``hpclab run --list``: every experiment by chapter; a module that did not load, on stderr."""
    from hpclab import experiments

    registry = experiments.registry()
    for name, exp in sorted(registry.items(), key=lambda kv: (kv[1].chapter, kv[0])):
        print(f"{name:<20} ch{exp.chapter}  {exp.help}")
    for module, reason in experiments.unavailable().items():
        print(
            f"{module} did not load ({reason}); its experiments are missing: "
            "reinstall with `pip install -e .`",
            file=sys.stderr,
        )
    return 0


def _cmd_run(argv: list[str]) -> int:
    from hpclab import experiments

    head = _Parser(prog="hpclab run", add_help=False)
    head.add_argument("name", nargs="?")
    head.add_argument("--list", action="store_true")
    head.add_argument("-h", "--help", action="store_true")
    known, rest = head.parse_known_args(argv)
    if known.list or not known.name:
        if known.name is None and not known.list and not known.help:
            _fail("hpclab run needs an experiment name; try `hpclab run --list`")
        return _list_experiments()
    try:
        exp = experiments.get(known.name)
    except ConfigError as err:
        _fail(str(err))
    parser = _Parser(prog=f"hpclab run {exp.name}", description=exp.help)
    _add_config_flags(parser, exp.config)
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument("--save", action="store_true", help="store the result in the results db")
    parser.add_argument("--label", default="", help="label stored with --save")
    if known.help:
        parser.print_help()
        return 0
    args = parser.parse_args(rest)
    params = {
        k: v for k, v in vars(args).items() if v is not None and k not in ("json", "save", "label")
    }
    from hpclab.progress import Cancelled, Progress, stderr_bar

    try:
        config = exp.config.create(**params)
    except ConfigError as err:
        _fail(str(err))
    from hpclab.config import RunError

    progress = Progress(stderr_bar())
    try:
        result = experiments.run_config(exp, config, progress)
    except ConfigError as err:
        _fail(str(err))
    except RunError as err:
        partial = getattr(err, "result", None)  # e.g. a search that stopped: what finished
        if partial is None:
            _fail(str(err), code=1)
        _show(partial, args)
        _fail(str(err), code=getattr(err, "exit_code", 1))
    except (KeyboardInterrupt, Cancelled):
        _fail("cancelled", code=130)
    from hpclab.display import load_note

    if load_note(result):
        sys.stderr.write(f"note: {load_note(result)}\n")
    return _show(result, args)


def _show(result: Any, args: argparse.Namespace) -> int:
    """Print the result (``--json``: one object) and store it with ``--save``; 1 when it could
    not be stored (then it is also written beside the store, if that is possible)."""
    if args.json:
        print(result.to_json())
    else:
        import pandas as pd

        with pd.option_context("display.width", 160, "display.max_columns", 30):
            print(result.frame().to_string(index=False))
    sys.stdout.flush()
    if not args.save:
        return 0
    from hpclab import results as store

    try:
        run_id = store.save(result, label=args.label)
    except store.StoreError as err:
        sys.stderr.write(f"hpclab: error: {err}\n")
        return 1
    sys.stderr.write(f"saved as run {run_id} in {store.store_path()}\n")
    return 0


def _cmd_exercises(args: argparse.Namespace) -> int:
    from hpclab import exercises

    if args.action == "build":
        written = exercises.build(args.solutions, args.exercises)
        for path in written:
            print(f"wrote {path}")
        return 0
    stale = exercises.stale(args.solutions, args.exercises)
    for line in stale:
        print(f"stale: {line}", file=sys.stderr)
    if stale:
        print("run `hpclab exercises build` to regenerate exercises/", file=sys.stderr)
        return 1
    print("exercises are up to date")
    return 0


def _cmd_notebooks(args: argparse.Namespace) -> int:
    from hpclab import notebooks

    for path in args.paths:
        if args.action == "refresh":
            for note in notebooks.refresh(path):
                print(f"{path}: key figure in {note}", file=sys.stderr)
        else:
            notebooks.clean_file(path)
        print(f"{args.action}ed {path}")
    return 0


def _cmd_cluster(args: argparse.Namespace) -> int:
    """Chapter 07's local Slurm, through the same script the tests and `make slurm-up` use."""
    from hpclab.cluster import local
    from hpclab.cluster.slurm import SlurmError

    try:
        if args.action == "up":
            local.up(args.nodes)
            print(local.env(), end="")
        elif args.action == "down":
            print(local.down())
        else:
            print(local.env(), end="")
    except SlurmError as err:
        _fail(str(err), code=1)
    return 0


def main(argv: list[str] | None = None) -> int:
    import signal
    import threading

    interrupted: list[bool] = []

    def on_sigint(signum: int, frame: Any) -> None:
        interrupted.append(True)
        raise KeyboardInterrupt

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, on_sigint) if main_thread else None
    try:
        return _main(argv)
    except KeyboardInterrupt:  # Ctrl-C anywhere, even while torch is still importing
        sys.stderr.write("hpclab: cancelled\n")
        return 130
    except BrokenPipeError:  # `hpclab doctor | head`: the reader left; not an error
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception:
        # An error that follows a Ctrl-C is its echo (an import cut in half fails later with
        # anything, even a RecursionError inside numpy): the cause was the Ctrl-C.
        if interrupted:
            sys.stderr.write("hpclab: cancelled\n")
            return 130
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "run":
        return _cmd_run(argv[1:])
    parser = _Parser(prog="hpclab", description="Deep Learning on HPC clusters: the workbook CLI")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    doc = sub.add_parser("doctor", help="check this machine and allocation")
    doc.add_argument("--json", action="store_true")
    sub.add_parser("run", help="run an experiment (hpclab run --list)")
    ex = sub.add_parser("exercises", help="build exercises/ from solutions/ or check staleness")
    ex.add_argument("action", choices=("build", "check"))
    ex.add_argument("--solutions", default="solutions")
    ex.add_argument("--exercises", default="exercises")
    nb = sub.add_parser("notebooks", help="execute (refresh) or clean notebooks for git")
    nb.add_argument("action", choices=("refresh", "clean"))
    nb.add_argument("paths", nargs="+")
    cl = sub.add_parser("cluster", help="start/stop the local Slurm, or print its environment")
    cl.add_argument("action", choices=("up", "down", "env"))
    cl.add_argument("--nodes", type=int, default=2, help="slurmd nodes (up)")
    args = parser.parse_args(argv)
    try:
        if args.command == "cluster":
            return _cmd_cluster(args)
        if args.command == "doctor":
            return _cmd_doctor(args)
        if args.command == "exercises":
            return _cmd_exercises(args)
        return _cmd_notebooks(args)
    except (ConfigError, FileNotFoundError) as err:
        _fail(str(err))


def run() -> None:
    """The ``hpclab`` command: :func:`main`, then exit. Once it has decided to exit, a Ctrl-C
    that arrives late (or was caught half-way through restoring the handler) must not turn a
    clean exit into a death by SIGINT: it is ignored while the interpreter shuts down."""
    import signal

    try:
        code = main()
    except KeyboardInterrupt:
        sys.stderr.write("hpclab: cancelled\n")
        code = 130
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the process entry: always the main thread
    if code == 130:
        _forget_interrupt()
    raise SystemExit(code)


def _forget_interrupt() -> None:
    """Clear CPython's "unhandled KeyboardInterrupt" mark once the interrupt has been handled.

    CPython sets that mark whenever a KeyboardInterrupt leaves code it runs through its
    ``PyRun_*`` entry points (some imports do), and never clears it when the interrupt is then
    caught; under ``python -m`` the interpreter reads it at exit and kills itself with SIGINT,
    so a handled Ctrl-C ended -2 instead of 130 (about 1 run in 20 when the signal lands in
    torch's import). Running an empty statement through the same entry point resets the mark."""
    try:
        import ctypes

        ctypes.pythonapi.PyRun_SimpleString(b"pass")
    except (ImportError, AttributeError, OSError):  # not CPython: no such mark
        pass


if __name__ == "__main__":
    run()
