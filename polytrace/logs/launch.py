"""The configuration of a verl run, read from its launch command and its printed config.

verl is launched with hydra-style overrides (``data.train_batch_size=1024``), often through a shell
script whose own overrides are echoed by ``set -x`` (``+ python3 -m verl.trainer.main_ppo ...``).
verl then prints the resolved config as a Python dict (``{'actor_rollout_ref': {...}}``), which
holds the script's defaults too. Both are read; the printed config wins where both speak, since it
is what the trainer actually used.
"""

from __future__ import annotations

import ast
import re
import shlex

_OVERRIDE = re.compile(r"^\+{0,2}([A-Za-z_][\w]*(?:\.[\w]+)+)=(.*)$", re.S)
_GROUPED = re.compile(r"\s\+{0,2}[A-Za-z_]\w*(?:\.\w+)+=")
_RAY_PREFIX = re.compile(r"\((?:[\w:.\-]+ )*pid=\d+(?:, ip=[\d.]+)?\)\s?")
_LAUNCH_HINTS = ("main_ppo", "main_dapo", "verl.trainer", "verl/trainer", ".sh")


def parse_value(text: str):
    """An override's value as hydra would read it: int, float, bool, null, list, else string."""
    s = text.strip()
    low = s.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("null", "none", "~"):
        return None
    try:
        return int(s)
    except ValueError:
        pass
    try:
        return float(s)
    except ValueError:
        pass
    if s.startswith("[") and s.endswith("]"):
        try:
            return ast.literal_eval(s)
        except (ValueError, SyntaxError):
            inner = s[1:-1].strip()
            return [parse_value(x) for x in inner.split(",")] if inner else []
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"":
        return s[1:-1]
    return s


def _tokens(line: str) -> list[str]:
    try:
        return shlex.split(line, posix=True)
    except ValueError:  # unbalanced quotes in a truncated line
        return line.split()


def parse_overrides(line: str) -> list[tuple[str, object]]:
    """Every ``a.b.c=value`` override on a command line, in order (quoted groups of overrides, as
    passed to a wrapper script, are split too)."""
    out: list[tuple[str, object]] = []
    for tok in _tokens(line):
        if _GROUPED.search(tok):  # "a.b=1 c.d=2" passed to a wrapper script as one argument
            out.extend(parse_overrides(tok))
            continue
        m = _OVERRIDE.match(tok)
        if m:
            out.append((m.group(1), parse_value(m.group(2))))
    return out


def launch_lines(lines: list[str], head: int = 400) -> list[str]:
    """Lines near the top of a log that launch the run (a shell command with overrides)."""
    found = []
    for line in lines[:head]:
        s = line.strip()
        if not s or "=" not in s:
            continue
        if any(h in s for h in _LAUNCH_HINTS) and parse_overrides(s):
            found.append(s)
    return found


def overrides_from_lines(lines: list[str]) -> dict:
    """The overrides of every launch line, later ones winning (hydra semantics)."""
    flat: dict = {}
    for line in launch_lines(lines):
        for key, value in parse_overrides(line):
            flat[key] = value
    return flat


def all_override_values(lines: list[str], key: str) -> list:
    """Every value a key was given on the launch lines, in order (a wrapper script and its user may
    both set a model path; the earlier one can name the architecture when the later is local)."""
    vals = []
    for line in launch_lines(lines):
        for k, v in parse_overrides(line):
            if k == key:
                vals.append(v)
    return vals


_DICT_START = "{'actor_rollout_ref'"


def printed_config(lines: list[str], head: int = 3000) -> dict | None:
    """The resolved config verl prints at start-up (a pprint'ed dict, one prefix per line; other
    processes' lines may be interleaved, so only lines with the same prefix are joined)."""
    for i, line in enumerate(lines[:head]):
        pos = line.find(_DICT_START)
        if pos < 0:
            continue
        prefix = line[:pos]
        parts = [line[pos:]]
        for nxt in lines[i + 1: i + 4000]:
            if prefix and not nxt.startswith(prefix):
                continue
            # another process's output can start mid-line: cut it off
            body = _RAY_PREFIX.split(nxt[len(prefix):])[0]
            parts.append(body)
            if body.rstrip().endswith("}"):
                try:
                    value = ast.literal_eval("\n".join(parts))
                except (ValueError, SyntaxError, MemoryError, RecursionError):
                    if body.rstrip().endswith("}}") and body.startswith(" '"):
                        break  # the top level closed but some lines are missing
                    continue
                return value if isinstance(value, dict) else None
        # Lines lost (redacted, or swallowed by another process's output): rebuild what survives
        # from pprint's indentation.
        return _config_from_indentation(parts) or None
    return None


_KEY = re.compile(r"'([^']+)': ")


def _config_from_indentation(parts: list[str]) -> dict:
    """pprint puts a nested dict's keys in the column just after its ``{``; a key's parent is the
    open dict whose child column matches. Keys whose parent line is missing are dropped."""
    root: dict = {}
    stack: list[tuple[int, dict | None]] = [(1, root)]  # (column of child keys, dict or None=lost)
    for line in parts:
        pos = 0
        while True:
            m = _KEY.search(line, pos)
            if not m:
                break
            col = m.start()
            while len(stack) > 1 and stack[-1][0] > col:
                stack.pop()
            parent = stack[-1][1] if stack[-1][0] == col else None
            rest_start = m.end()
            if line[rest_start:rest_start + 1] == "{":
                child: dict | None = {} if parent is not None else None
                if parent is not None:
                    parent[m.group(1)] = child
                stack.append((rest_start + 1, child))
                pos = rest_start + 1
                continue
            nxt = _KEY.search(line, rest_start)
            end = nxt.start() if nxt else len(line)
            text = line[rest_start:end].rstrip().rstrip(",").rstrip("}").rstrip(",").strip()
            if parent is not None:
                try:
                    parent[m.group(1)] = ast.literal_eval(text)
                except (ValueError, SyntaxError):
                    pass
            pos = end
    return root


def flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict):
            out.update(flatten(v, key))
        else:
            out[key] = v
    return out


_HF_CONFIG_START = re.compile(r"(?:Model config after override: )?\w+Config \{\s*$")


def printed_model_config(lines: list[str], head: int = 6000) -> dict | None:
    """The HF model config transformers prints when verl builds the model (``Qwen2Config {...}``),
    as a dict; None when the log has none."""
    import json

    for i, line in enumerate(lines[:head]):
        m = _HF_CONFIG_START.search(line)
        if not m:
            continue
        prefix = _RAY_PREFIX.match(line)
        prefix = prefix.group(0) if prefix else ""
        parts = ["{"]
        for nxt in lines[i + 1: i + 400]:
            if prefix and not nxt.startswith(prefix):
                continue
            body = nxt[len(prefix):]
            parts.append(body)
            if body.strip() == "}":
                try:
                    value = json.loads("\n".join(parts))
                except ValueError:
                    break
                if isinstance(value, dict) and "hidden_size" in value:
                    return value
                break
    return None
