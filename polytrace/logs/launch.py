"""The configuration of a verl run, read from its launch command and its printed config.

verl is launched with hydra-style overrides (``data.train_batch_size=1024``), often through a shell
script: echoed by ``set -x`` (``+ python3 -m verl.trainer.main_ppo ...``), or pasted whole with
``\\`` continuations and shell variables (``script.py`` reads those). verl then prints the resolved
config as a Python dict (``{'actor_rollout_ref': {...}}``), which holds the script's defaults too.
Both are read; the printed config wins where both speak, since it is what the trainer used.

Entry points recognised: ``verl.trainer.main_ppo``, recipe modules (``recipe.dapo.main_dapo``,
``recipe.one_step_off_policy.main_ppo``, ``recipe.fully_async_policy.fully_async_main``, ...), any
``verl.*`` / ``recipe.*`` module or ``main_*`` script, and wrapper ``*.sh`` scripts given overrides.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field

from .script import Command, Unresolved, run_script
from .shell_lines import logical_lines, split_words

_OVERRIDE = re.compile(r"^\+{0,2}([A-Za-z_]\w*(?:\.\w+)+)=(.*)$", re.S)
_GROUPED = re.compile(r"\s\+{0,2}[A-Za-z_]\w*(?:\.\w+)+=")
_RAY_PREFIX = re.compile(r"\((?:[\w:.\-]+ )*pid=\d+(?:, ip=[\d.]+)?\)\s?")
# (linear: every alternative starts with a literal; no unanchored run before a suffix)
_ENTRY = re.compile(r"(?:\b(?:verl|recipe)(?:[./][\w\-]+)+|\bmain_\w+|\bfully_async|\bone_step_off|\.sh\b)")
_MODULE = re.compile(r"^(?:verl|recipe)(?:\.[\w]+)+$")
# A quoted group of overrides handed to a wrapper script nests once or twice; deeper is not a script.
_MAX_GROUP_DEPTH = 3
# pprint'ed configs are 200-1,500 lines; the block read is bounded in lines and characters.
_CONFIG_MAX_LINES = 4000
_CONFIG_MAX_CHARS = 2_000_000
_HF_CONFIG_MAX_LINES = 400


def parse_value(text):
    """An override's value as hydra would read it: int, float, bool, null, list, else string.
    An ``Unresolved`` (a shell variable the log never assigns) is passed through."""
    if isinstance(text, Unresolved):
        return text
    s = text.strip()
    low = s.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("null", "none", "~"):
        return None
    if len(s) <= 400:  # int() of thousands of digits is refused by Python; not a config value
        try:
            return int(s)
        except ValueError:
            pass
        try:
            return float(s)
        except ValueError:
            pass
    if s.startswith("[") and s.endswith("]") and len(s) <= 20_000:
        try:
            value = ast.literal_eval(s)
            if isinstance(value, list):
                return value
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            pass
        inner = s[1:-1].strip()
        return [parse_value(x) for x in inner.split(",")] if inner else []
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"":
        return s[1:-1]
    return s


@dataclass
class Override:
    key: str
    value: object
    line: int


def _word_overrides(word, line: int, depth: int = 0) -> list[Override]:
    text = word.text if isinstance(word, Unresolved) else word
    if depth < _MAX_GROUP_DEPTH and any(ch in text for ch in " \t") and _GROUPED.search(text):
        # "a.b=1 c.d=2" passed to a wrapper script as one argument
        out = []
        for inner in split_words(text):
            inner_text = "".join(seg for seg, _ in inner)
            if isinstance(word, Unresolved) and "$" in inner_text:  # the unknown part, as written
                inner_word = Unresolved(inner_text, word.names, word.reason)
            else:
                inner_word = inner_text
            out.extend(_word_overrides(inner_word, line, depth + 1))
        return out
    m = _OVERRIDE.match(text)
    if not m:
        return []
    key, raw = m.group(1), m.group(2)
    if isinstance(word, Unresolved) and ("$" in raw or "`" in raw):
        return [Override(key, Unresolved(raw, word.names, word.reason), line)]
    return [Override(key, parse_value(raw), line)]


def command_overrides(cmd: Command) -> list[Override]:
    out: list[Override] = []
    for w in cmd.words:
        out.extend(_word_overrides(w, cmd.line))
    return out


def parse_overrides(line: str) -> list[tuple[str, object]]:
    """Every ``a.b.c=value`` override on one command line, in order (quoted groups of overrides,
    as passed to a wrapper script, are split too). Variables are expanded against nothing."""
    commands, _ = run_script(logical_lines([(1, line)]))
    return [(o.key, o.value) for c in commands for o in command_overrides(c)]


@dataclass
class Launch:
    """What the launch commands of a log state."""

    overrides: dict = field(default_factory=dict)  # key -> value, later commands winning
    lines: dict = field(default_factory=dict)  # key -> line number of the winning override
    commands: list = field(default_factory=list)  # (line, text) of each launch command
    entry: str = ""  # the module or script of the last python launch
    model_paths: list = field(default_factory=list)  # every actor model path value, in order
    variables: dict = field(default_factory=dict)  # shell variables the script assigned


def _text(word) -> str:
    return word.text if isinstance(word, Unresolved) else str(word)


def _entry_of(words: list) -> str:
    texts = [_text(w) for w in words]
    for i, t in enumerate(texts):
        if t == "-m" and i + 1 < len(texts):
            return texts[i + 1]
    for t in texts:
        if _MODULE.match(t) or t.endswith(".py"):
            return t
    return ""


def _worth_reading(text: str) -> bool:
    """A line that may launch the run: names an entry point, or starts with a variable that may
    hold one (``$CMD $ARGS``)."""
    return bool(_ENTRY.search(text)) or text.lstrip("\"'").startswith("$")


def read_launch(lines) -> Launch:
    """The launch commands among ``lines`` (``(number, text)`` pairs): every command that names a
    verl entry point and carries overrides, after the script's variables are expanded."""
    commands, shell = run_script(logical_lines(lines), wanted=_worth_reading)
    out = Launch(variables=dict(shell.vars))
    for cmd in commands:
        joined = " ".join(_text(w) for w in cmd.words)
        if not _ENTRY.search(joined):
            continue
        ovs = command_overrides(cmd)
        if not ovs:
            continue
        out.commands.append((cmd.line, joined))
        entry = _entry_of(cmd.words)
        if entry:
            out.entry = entry
        for o in ovs:
            out.overrides[o.key] = o.value
            out.lines[o.key] = o.line
            if o.key == "actor_rollout_ref.model.path":  # a critic's path is not the model trained
                out.model_paths.append(o.value)
    return out


# --- the printed config ------------------------------------------------------------------------

# pprint sorts keys, so verl's config starts with 'actor_rollout_ref'; recipes that print it
# unsorted start with another top-level section
_DICT_STARTS = tuple("{'" + k + "': " for k in ("actor_rollout_ref", "algorithm", "data", "trainer", "critic",
                                                 "reward_model", "async_training"))


def _dict_start(line: str) -> int:
    pos = line.find("{'")
    while pos >= 0:
        if line.startswith(_DICT_STARTS, pos):
            return pos
        pos = line.find("{'", pos + 2)
    return -1



def printed_config(lines: list[str], head: int = 3000) -> dict | None:
    """The resolved config verl prints at start-up (a pprint'ed dict, one prefix per line; other
    processes' lines may be interleaved, so only lines with the same prefix are joined). A dict
    that does not hold two of verl's top-level sections is some other print, and passed over."""
    for i, line in enumerate(lines[:head]):
        pos = _dict_start(line) if "{'" in line else -1
        if pos < 0:
            continue
        value = _config_block(lines, i, pos)
        if value and sum(k in value for k in _SECTIONS) >= 2:
            return value
    return None


_SECTIONS = ("actor_rollout_ref", "algorithm", "data", "trainer", "critic", "reward_model")


def _config_block(lines: list[str], i: int, pos: int) -> dict | None:
    line = lines[i]
    prefix = line[:pos]
    parts = [line[pos:]]
    size = len(parts[0])
    following = iter(lines[i + 1: i + _CONFIG_MAX_LINES])
    body = parts[0]
    while True:
        # pprint ends every line inside the dict with "," except the one closing the root:
        # one parse attempt there, so a block with lost lines costs no more than a good one
        if body.rstrip().endswith("}"):
            try:
                value = ast.literal_eval("\n".join(parts))
            except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
                value = None
            if isinstance(value, dict):
                return value
            break
        nxt = next(following, None)
        if nxt is None:
            break
        if prefix and not nxt.startswith(prefix):
            body = ""
            continue
        # another process's output can start mid-line: cut it off
        body = _RAY_PREFIX.split(nxt[len(prefix):])[0]
        parts.append(body)
        size += len(body)
        if size > _CONFIG_MAX_CHARS:
            break
    # Lines lost (redacted, or swallowed by another process's output): rebuild what survives
    # from pprint's indentation.
    return _config_from_indentation(parts) or None


_KEY = re.compile(r"'([^'\n]{1,200})': ")


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
                if len(stack) < 64:
                    stack.append((rest_start + 1, child))
                pos = rest_start + 1
                continue
            nxt = _KEY.search(line, rest_start)
            end = nxt.start() if nxt else len(line)
            text = line[rest_start:end].rstrip().rstrip(",").rstrip("}").rstrip(",").strip()
            if parent is not None and len(text) <= 20_000:
                try:
                    parent[m.group(1)] = ast.literal_eval(text)
                except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
                    pass
            pos = end
    return root


def flatten(d: dict, prefix: str = "", depth: int = 0) -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict) and depth < 32:
            out.update(flatten(v, key, depth + 1))
        else:
            out[key] = v
    return out


_HF_MARK = "Config {"


def printed_model_config(lines: list[str], head: int = 6000) -> dict | None:
    """The HF model config transformers prints when verl builds the model (``Qwen2Config {...}``),
    as a dict; None when the log has none. Found by a plain substring test (a regex like
    ``\\w+Config \\{`` searched over a long line of word characters is quadratic)."""
    for i, line in enumerate(lines[:head]):
        pos = line.rfind(_HF_MARK)
        if pos < 1 or line[pos + len(_HF_MARK):].strip() or not (line[pos - 1].isalnum() or line[pos - 1] == "_"):
            continue
        prefix = _RAY_PREFIX.match(line)
        prefix = prefix.group(0) if prefix else ""
        parts = ["{"]
        for nxt in lines[i + 1: i + _HF_CONFIG_MAX_LINES]:
            if prefix and not nxt.startswith(prefix):
                continue
            body = nxt[len(prefix):]
            parts.append(body)
            if body.rstrip() == "}":  # the outermost brace: nested ones are indented
                try:
                    value = json.loads("\n".join(parts))
                except (ValueError, RecursionError):
                    break
                text = value.get("text_config") if isinstance(value, dict) else None
                if isinstance(value, dict) and ("hidden_size" in value or
                                                isinstance(text, dict) and "hidden_size" in text):
                    return value  # a multimodal model nests its language model in text_config
                break
    return None
