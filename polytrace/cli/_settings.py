"""The run's flags, generated from its declarations (``polytrace.run.spec``), and ``--set
KEY=VALUE``: verl settings in verl's own key names, the same flag in ``validate``, ``calibrate`` and
``estimate`` (the registry: ``polytrace.calibrate.settings``, itself read from the declarations)."""

from __future__ import annotations

import argparse

from ..run.spec import declarations
from ._args import advanced, finite_float, nonneg_int, positive_int, share

# a declaration's kind -> the argparse type that reads it (bounds beyond the type's, e.g. a memory
# fraction's [0.05, 0.99], are checked once when the RunSpec is built, naming the flag)
_TYPES = {"count": positive_int, "nonneg": nonneg_int, "share": share, "fraction": finite_float,
          "float": finite_float}


class _Once(argparse.Action):
    """A run setting's flag: given twice with two values is a usage error naming both, not the
    last one silently winning."""

    def __call__(self, parser, namespace, values, option_string=None):
        seen = namespace.__dict__.setdefault("_run_flags_seen", {})
        value = self.const if self.nargs == 0 else values
        if self.dest in seen and seen[self.dest] != value:
            parser.error(f"{option_string} is given twice, as {seen[self.dest]} and {value}: keep one")
        seen[self.dest] = value
        setattr(namespace, self.dest, value)


# the heading of each RunSpec section's flags in --help
SECTION_TITLES = {"cluster": "the model and cluster", "batch": "the batch", "lengths": "lengths",
                  "rollout": "the rollout", "trainer": "the trainer"}


def add_run_flags(p, names, prefix: str = "", more: dict[str, str] | None = None) -> None:
    """A flag per run setting in ``names``, as declared (``prefix``: before each help text;
    ``more``: setting -> what this command's help says after it), under its section's heading when
    ``p`` is a parser (a group given: in that group)."""
    decls = declarations()
    for name in names:
        d = decls[name]
        g = section_group(p, d.section) if isinstance(p, argparse.ArgumentParser) else p
        kw = dict(dest=d.argument, help=prefix + d.help + (more or {}).get(name, ""), action=_Once)
        if d.metavar:
            kw["metavar"] = d.metavar
        if d.kind == "bool":
            # off unless given (--no-ref: the reference on)
            action = g.add_argument(d.flag, nargs=0, const=True, default=False, **kw)
        elif d.kind == "choice":
            action = g.add_argument(d.flag, choices=d.choices, default=d.default, **kw)
        else:
            # "auto" (micro_batch_tokens) is no count: left None here, made "auto" by run_values
            action = g.add_argument(d.flag, type=_TYPES[d.kind], default=d.default if d.default != "auto" else None,
                                    **kw)
        action.advanced = d.advanced


def section_group(parser, section: str):
    """The parser's argument group of ``section`` (made on first use)."""
    title = SECTION_TITLES.get(section, section)
    have = next((g for g in parser._action_groups if g.title == title), None)
    return have or parser.add_argument_group(title)


def run_values(args, names) -> dict:
    """Setting name -> value of the flags ``add_run_flags`` added for ``names``."""
    decls = declarations()
    out = {}
    for name in names:
        d = decls[name]
        value = getattr(args, d.argument)
        if d.inverted:
            value = not value
        if value is None and d.default == "auto":
            value = "auto"
        out[name] = value
    return out


def given_flags(args, names) -> list[str]:
    """The flags of ``names`` the command line set explicitly."""
    given = getattr(args, "given", set())
    decls = declarations()
    return [decls[n].flag for n in names if decls[n].argument in given]

SET_HELP = ("a verl setting in verl's key name, e.g. --set actor_rollout_ref.model.use_remove_padding=true or "
            "--set actor_rollout_ref.rollout.gpu_memory_utilization=0.6 (repeatable; keys: docs/step-model.md, "
            "'Settings'); for a log it wins over what the log states, and settings the log leaves unstated are "
            "otherwise inferred from its first steps")


def add_set_flag(p) -> None:
    advanced(p.add_argument("--set", action="append", default=None, metavar="KEY=VALUE", dest="settings",
                            help=SET_HELP))


def parsed_settings(args) -> dict:
    from ..calibrate.settings import parse_settings

    return parse_settings(getattr(args, "settings", None))




def estimate_settings(args, kw: dict) -> dict:
    """The ``estimate`` arguments ``--set`` changes (``kw``: those the flags give), with
    ``run_fields`` for the settings that have no flag; a ``--set`` against a flag given with
    another value is a usage error."""
    from ..calibrate.settings import SettingError, check_offload_keys, estimate_arguments

    given = parsed_settings(args)
    if not given:
        _check_cpu_optimizer_overlap(args, kw)
        return {}
    check_offload_keys(given, kw.get("strategy") or "fsdp")
    kwargs, fields = estimate_arguments(given)
    decls = declarations()
    for name, value in kwargs.items():
        # a --set of the quantity a flag given with another value states contradicts it
        flag, default = (decls[name].flag, decls[name].default) if name in decls else (None, None)
        have = kw.get(name, default)
        if flag and have != default and have != value:
            raise SettingError(f"--set {_key_of(given, name)}: contradicts {flag} {have}: give one")
    out = dict(kwargs)
    if fields:
        out["run_fields"] = fields
    _check_cpu_optimizer_overlap(args, {**kw, **out})
    # a check of these settings names the --set key the user gave, not a flag they never passed
    from ..calibrate.settings import REGISTRY

    out["origins"] = {REGISTRY[k].estimate: f"--set {k}" for k in given if REGISTRY[k].estimate in kwargs}
    return out


def _check_cpu_optimizer_overlap(args, kw: dict) -> None:
    """``--cpu-optimizer-overlap`` given on the command line with no CPU optimizer to overlap
    (neither ``--cpu-optimizer`` nor verl's ``optimizer_offload_fraction`` above 0) would be a flag
    that changes nothing: refused. verl's own ``overlap_cpu_optimizer_d2h_h2d`` key is not: its
    DeepSeek-V3 script sets it whatever the fraction (0 on 256 GPUs)."""
    from ..calibrate.settings import SettingError

    if getattr(args, "cpu_optimizer_overlap", False) is True and not kw.get("cpu_optimizer"):
        raise SettingError("--cpu-optimizer-overlap overlaps the CPU optimizer's copies with its step: give "
                           "--cpu-optimizer SHARE (above 0) too")


def _key_of(given: dict, argument: str) -> str:
    from ..calibrate.settings import REGISTRY

    key = next((k for k in given if REGISTRY[k].estimate == argument), None)
    if key is not None:
        return f"{key}={given[key]}"
    # a micro-batch size (or dynamic batching off) leaves no token budget; optimizer_cpu_offload off
    # leaves no CPU share
    via = {"micro_batch_tokens": ("micro_batch_seqs", "run:dynamic"),
           "cpu_optimizer": ("run:cpu_optimizer_offload",)}
    return next(f"{k}={v}" for k, v in given.items() if REGISTRY[k].estimate in via.get(argument, ()))
