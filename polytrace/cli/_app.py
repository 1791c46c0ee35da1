"""The parser and the dispatch of ``polytrace``: imported by ``main`` inside its Ctrl-C handling, so
an interrupt while argparse, signal's enums and the subcommands load is one line too."""

from __future__ import annotations

import argparse
import contextlib
import sys

from ..errors import PolytraceError
from ._args import ShortHelpParser, add_help_all

# Order = order in ``polytrace --help``. Imported when the parser is built, inside ``main``'s
# Ctrl-C handling: an interrupt during those imports (the first ~1.5 s) is then one line too.
COMMAND_MODULE_NAMES = ("workload_cmds", "presets_cmds", "packing_cmds", "compose_cmds", "validate_cmds",
                        "results_cmds", "bench_cmds", "ab_cmds")


def command_modules() -> tuple:
    import importlib

    return tuple(importlib.import_module(f".{name}", __package__) for name in COMMAND_MODULE_NAMES)


class _Parser(ShortHelpParser):
    """Usage mistakes (bad value, missing argument, unknown choice) as one line
    ``polytrace: error: <subcommand>: <message>`` and exit 2, like every other user error; the full
    usage stays one ``--help`` away instead of being dumped above the message."""

    def error(self, message: str):
        cmd = self.prog.removeprefix("polytrace").strip()
        where = f"{cmd}: " if cmd else ""
        hint = f"see 'polytrace {cmd} --help'" if cmd else "see 'polytrace --help'"
        self.exit(2, f"polytrace: error: {where}{' '.join(message.split())} ({hint})\n")

    def _get_value(self, action, arg_string):
        """An empty value (``--gpu ""``, ``-o ""``, a blank positional) is a typo or an unset shell
        variable, never a setting: refused here, naming the argument, before it is read as "the
        default" (a falsy value) or as the current folder (``Path("")`` is ".")."""
        if (isinstance(arg_string, str) and not arg_string.strip() and action.dest not in _MAY_BE_EMPTY
                and action.nargs not in (argparse.PARSER, argparse.REMAINDER)):  # a subcommand: its own parser checks
            name = "/".join(action.option_strings) or action.metavar or action.dest
            want = _WANTED.get(action.dest, "a value")
            raise argparse.ArgumentError(None, f"{name} {arg_string!r}: empty; give {want}")
        return super()._get_value(action, arg_string)


# Free text where an empty string is a real value (fit --description "").
_MAY_BE_EMPTY = frozenset({"description"})
_WANTED = {"model": "a preset (polytrace presets models), a Hugging Face repo id or a config.json",
           "gpu": "a preset (polytrace presets gpus)",
           "profile": "a profile name (polytrace profiles) or a profile or trace file",
           "out": "a path", "log": "a log file"}


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="polytrace",
        description="RLVR workload model (PolyTrace), kernel benchmarks and RL step estimates.",
    )
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"polytrace {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module in command_modules():
        module.register(sub)
    for command in sub.choices.values():
        add_help_all(command)
    return parser


def given_options(argv: list[str], parser: argparse.ArgumentParser | None = None) -> set[str]:
    """The destinations the command line set explicitly (not left at their defaults), so a command
    can take defaults from elsewhere (``estimate --calibration``: the calibrated run's) and list
    where the flags differ. Parsed again with every default suppressed; notes of deprecated
    spellings are said once, by the first parse. ``parser``: one whose work is done (``_main``'s,
    after its parse), changed in place; default a new one."""
    import io

    parser = parser or build_parser()
    stack = [parser]
    while stack:
        p = stack.pop()
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                stack.extend(action.choices.values())
            elif action.option_strings:
                action.default, action.required = argparse.SUPPRESS, False
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            ns = parser.parse_args(argv)
    except SystemExit:  # cannot happen after the first parse succeeded; nothing is then "given"
        return set()
    return {k for k in vars(ns) if k not in ("func", "command", "results_command")}


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.from_command_line = argv is None  # sys.argv: the process may be re-run (tune --allow-cpu)
    # the same parser, its parse done: building a second costs ~13 ms, twice a command (the tests
    # run ~1,000 commands in-process)
    args.given = given_options(sys.argv[1:] if argv is None else argv, parser)
    try:
        code = args.func(args)
    except PolytraceError as exc:
        from .compose_cmds import blame_calibration

        print(f"polytrace: error: {blame_calibration(args, str(exc))}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:  # e.g. `polytrace describe ... | head`
        return 0
    return int(code or 0)
