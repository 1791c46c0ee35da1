"""argparse value types shared by the subcommands: a bad value is a one-line usage error."""

from __future__ import annotations

import argparse
import math
import sys

# Above this a count is a typo, not a workload: a million GPUs, ranks, steps or replicas would
# allocate for minutes and then die of memory instead of saying what was wrong.
MAX_COUNT = 1_000_000
# Steps sampled in one command: each step is a full batch (e.g. 96 prompts x 8 responses).
MAX_STEPS = 10_000


def _int_at_least(text: str, lowest: int, what: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a {what} integer, got {text!r}") from None
    if v < lowest:
        raise argparse.ArgumentTypeError(f"expected a {what} integer, got {text!r}")
    return v


def _positive(text: str) -> int:
    return _int_at_least(text, 1, "positive")


def positive_int(text: str) -> int:
    v = _positive(text)
    if v > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"{text!r} is too large (at most {MAX_COUNT:,})")
    return v


def any_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def positive_int_at_most(limit: int, what: str):
    """A positive-integer type capped at ``limit`` (work grows linearly with it)."""
    def parse(text: str) -> int:
        v = _positive(text)
        if v > limit:
            raise argparse.ArgumentTypeError(f"{text!r} {what} is too many (at most {limit:,})")
        return v
    parse.__name__ = "positive integer"
    return parse


# How many steps to sample: 1 .. MAX_STEPS.
step_count = positive_int_at_most(MAX_STEPS, "steps")


def finite_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return v


def nonneg_int(text: str) -> int:
    return _int_at_least(text, 0, "non-negative")


def step_list(text: str) -> list[int]:
    """``0-7``, ``0,50,100`` or ``0-200:20`` (every 20th)."""
    out: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part:
                span, _, stride = part.partition(":")
                lo, hi = (int(x) for x in span.split("-"))
                every = int(stride) if stride else 1
                if every < 1:
                    raise argparse.ArgumentTypeError(f"steps {text!r}: the stride after ':' must be positive")
                # check before building a huge list (len() of a range overflows past 2**63)
                if (hi - lo) // every >= MAX_STEPS or len(out) + len(range(lo, hi + 1, every)) > MAX_STEPS:
                    raise argparse.ArgumentTypeError(f"steps {text!r}: too many steps (at most {MAX_STEPS:,} "
                                                     f"per command)")
                out.extend(range(lo, hi + 1, every))
            else:  # an empty item (``0,,1``, a trailing comma) is a typo, not "no step"
                out.append(int(part))
    except ValueError:
        raise argparse.ArgumentTypeError(f"steps must look like 0-7, 0,50,100 or 0-200:20; got {text!r}") from None
    if len(out) > MAX_STEPS:
        raise argparse.ArgumentTypeError(f"steps {text!r}: too many steps (at most {MAX_STEPS:,} per command)")
    if not out or min(out) < 0:
        raise argparse.ArgumentTypeError(f"steps must be non-negative and non-empty; got {text!r}")
    return out


def threshold_fraction(text: str) -> float:
    """A relative threshold: ``5%`` or ``0.05`` -> 0.05. A bare number above 1 is refused (``5``
    would mean 500%, which nobody who types it means)."""
    t = text.strip()
    try:
        value = float(t[:-1]) / 100.0 if t.endswith("%") else float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage like 5% or a fraction like 0.05, got {text!r}") \
            from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite, positive percentage like 5% or fraction like 0.05, "
                                         f"got {text!r}")
    if not t.endswith("%") and value > 1:
        raise argparse.ArgumentTypeError(f"{text!r} would be {value:.0%}; did you mean {t}%? (a bare number is a "
                                         "fraction: 0.05 = 5%)")
    if value >= 10:
        raise argparse.ArgumentTypeError(f"must be below 1000%, got {text!r}")
    return value


def probability(text: str) -> float:
    """A significance level strictly between 0 and 1."""
    v = finite_float(text)
    if not 0 < v < 1:
        raise argparse.ArgumentTypeError(f"expected a probability between 0 and 1 (exclusive), got {text!r}")
    return v


def share(text: str) -> float:
    """A share of a whole, 0 to 1 inclusive (``--cpu-optimizer``)."""
    v = finite_float(text)
    if not 0 <= v <= 1:
        raise argparse.ArgumentTypeError(f"expected a share in [0, 1], got {text!r}")
    return v


def one_step(text: str) -> list[int]:
    """``--step N``: the one step N (a list, like ``--steps``)."""
    return [nonneg_int(text)]


def add_steps(parser, *, default, what: str = "steps to sample", count_note: bool = False) -> None:
    """``--steps A-B`` (also ``0,50,100``, ``0-200:20``, or ``N`` meaning step N alone) and
    ``--step N``, one meaning in every command (dest ``steps``). ``count_note``: the commands where
    ``--steps N`` once meant the first N steps print a note when given a bare number."""
    group = parser.add_mutually_exclusive_group()
    shown = ""
    if default:
        shown = f" (default {default[0]}-{default[-1]})" if len(default) > 1 else f" (default {default[0]})"
    group.add_argument("--steps", type=_steps_noting_counts if count_note else step_list, default=default,
                       metavar="A-B", help=f"{what}: a range A-B, a list 0,50,100, every 20th 0-200:20, or N for "
                       f"step N alone{shown}")
    group.add_argument("--step", type=one_step, dest="steps", metavar="N", help="one step: the same as --steps N")


def _steps_noting_counts(text: str) -> list[int]:
    if text.strip().isdigit():
        n = int(text)
        hint = f"; the first {n} steps are --steps 0-{n - 1}" if n > 1 else ""
        print(f"polytrace: note: --steps {n} is step {n} alone, as in every command{hint}", file=sys.stderr)
    return step_list(text)


class DeprecatedAlias(argparse.Action):
    """A hidden old spelling of an option: works as before (``kind``: store, store_true, append,
    extend) and says on stderr which spelling to use instead."""

    def __init__(self, option_strings, dest, use: str, kind: str = "store", **kw):
        if kind == "store_true":
            kw["nargs"] = 0
        elif kind == "extend":
            kw.setdefault("nargs", "+")
        self.use, self.kind = use, kind
        super().__init__(option_strings, dest, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"polytrace: note: {option_string} is deprecated; use {self.use}", file=sys.stderr)
        if self.kind == "store_true":
            setattr(namespace, self.dest, True)
        elif self.kind in ("append", "extend"):
            current = list(getattr(namespace, self.dest, None) or [])
            setattr(namespace, self.dest, current + (list(values) if self.kind == "extend" else [values]))
        else:
            setattr(namespace, self.dest, values)


def deprecated(parser, old: str, *, use: str, dest: str, kind: str = "store", **kw) -> None:
    """Accept ``old`` (hidden from --help) as ``use``, with a note on stderr."""
    parser.add_argument(old, dest=dest, action=DeprecatedAlias, use=use, kind=kind, help=argparse.SUPPRESS,
                        default=argparse.SUPPRESS, **kw)


def add_out(parser, *, old: tuple[str, ...] = (), **kw) -> None:
    """``-o/--out PATH`` (dest ``out``), with the command's old spellings as hidden aliases."""
    parser.add_argument("-o", "--out", dest="out", **kw)
    for spelling in old:
        deprecated(parser, spelling, use="-o/--out", dest="out", metavar=kw.get("metavar"))


# ----- --help (the main settings) and --help-all (every flag) -----

HELP_ALL = "--help-all"


def advanced(action):
    """Mark a hand-written flag as one a first run leaves alone: ``--help-all`` lists it, ``--help``
    does not (a run setting's flag is marked by its declaration, ``polytrace.run.spec``)."""
    action.advanced = True
    return action


def is_advanced(action) -> bool:
    """Marked by ``advanced`` or ``add_run_flags``, or a hand-written flag of a setting whose
    declaration says so (``--rollout-gpus``: the declaration is the one place it is marked)."""
    marked = getattr(action, "advanced", None)
    if marked is not None:
        return bool(marked)
    from ..run.spec import declarations

    for d in declarations().values():
        if d.flag in action.option_strings and d.argument == action.dest:
            return d.advanced
    return False


class _HelpAll(argparse.Action):
    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        parser._print_message(parser.format_help(everything=True), sys.stdout)
        parser.exit()


class ShortHelpParser(argparse.ArgumentParser):
    """``--help``: the flags a first run sets, grouped by the run's sections, and one closing line
    naming ``--help-all``; ``--help-all``: every flag (``add_help_all``)."""

    def format_help(self, everything: bool = False) -> str:
        has_all = any(HELP_ALL in a.option_strings for a in self._actions)
        hidden = [] if everything or not has_all else \
            [a for a in self._actions if a.help is not argparse.SUPPRESS and is_advanced(a)]
        saved = [(a, a.help) for a in hidden]
        usage = self.usage
        for a in hidden:
            a.help = argparse.SUPPRESS
        if hidden and usage is None:
            # the options are listed below: a usage line of them all was 11 of estimate's 78 lines
            positionals = [a for a in self._actions if not a.option_strings and a.help is not argparse.SUPPRESS]
            shown = self._get_formatter()._format_usage(None, positionals, [], "").strip()
            self.usage = shown.replace(self.prog, f"{self.prog} [options]", 1).replace(self.prog, "%(prog)s", 1)
        try:
            text = super().format_help()
        finally:
            self.usage = usage
            for a, text_of in saved:
                a.help = text_of
        if hidden:
            text += f"\n{len(hidden)} more options: '{self.prog} {HELP_ALL}' lists every option\n"
        return text


def add_help_all(parser) -> None:
    """``--help-all`` on a command with flags marked advanced (none: ``--help`` already lists all)."""
    if any(is_advanced(a) for a in parser._actions):
        parser.add_argument(HELP_ALL, action=_HelpAll, help="list every option (--help: the main ones)")
