"""The mutations of ``scripts/fuzz_inputs.py``: hostile values put into any field of a JSON or JSONL
file, damaged lines of a text file (deleted, duplicated, swapped, truncated, over-long, invalid
UTF-8), and damaged folders of step files (a FIFO, a folder or a symlink loop named like one).
Each function says what it did in one line, which the fuzzer's report and ``--only`` replay name."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path

DEEP = "__DEEP_NESTING__"
HUGE = "__HUGE_STRING__"
# Values a field may hold in a hostile file: out-of-range integers, non-finite and denormal floats,
# every wrong JSON type, and sizes meant to exhaust recursion or memory.
HOSTILE = [2 ** 63, 2 ** 64 + 7, 10 ** 12, 2 ** 31, -1, 0, 1, -(2 ** 63), 1e308, -1e308, 1e-300, 0.5, 1e9,
           float("nan"), float("inf"), float("-inf"), "abc", "", "1e9", "two", None, True, False, [], {},
           [1, 2], [[1]], {"a": 1}, "x" * 5000, DEEP, HUGE]



def _dump(value) -> str:
    text = json.dumps(value)
    text = text.replace(json.dumps(DEEP), "[" * 100_000 + "]" * 100_000)
    return text.replace(json.dumps(HUGE), json.dumps("y" * (8 << 20)))


def _paths(node, prefix=(), depth=0):
    yield prefix
    if depth > 6:
        return
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,), depth + 1)
    elif isinstance(node, list):
        for i, v in enumerate(node[:8]):
            yield from _paths(v, prefix + (i,), depth + 1)


def _set(node, path, value, delete=False):
    if not path:
        return value
    parent = node
    for k in path[:-1]:
        parent = parent[k]
    if delete and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return node


def mutate_json_value(rng: random.Random, doc):
    """Replace (or delete) one node of a parsed JSON document; returns (doc, description)."""
    paths = list(_paths(doc))
    path = rng.choice(paths[1:] if len(paths) > 1 else paths)
    where = "/".join(str(p) for p in path) or "<root>"
    if path and rng.random() < 0.12:
        return _set(doc, path, None, delete=True), f"delete {where}"
    value = rng.choice(HOSTILE)
    return _set(doc, path, value, delete=False), f"{where} = {_short(value)}"


def _short(value) -> str:
    text = DEEP if value == DEEP else ("8MB string" if value == HUGE else repr(value))
    return text if len(text) < 40 else text[:37] + "..."


def mutate_text(rng: random.Random, text: str, is_jsonl: bool) -> tuple[bytes, str]:
    lines = text.split("\n")
    body = [i for i, ln in enumerate(lines) if ln.strip()] or [0]
    i = rng.choice(body)
    if not is_jsonl and rng.random() < 0.6:  # logs: most lines are noise; aim at step and config lines
        keyed = [j for j in body if "step:" in lines[j] or "=" in lines[j] or ": " in lines[j]]
        i = rng.choice(keyed) if keyed else i
    kind = rng.choice(["truncate", "dup", "delete", "deep", "long", "garbage", "utf8", "numbers", "empty",
                       "swap"] + (["jsonvalue"] * 10 if is_jsonl else ["numbers"] * 6))
    if kind == "jsonvalue":
        try:
            rec = json.loads(lines[i])
        except (ValueError, RecursionError):
            kind = "numbers"
        else:
            rec, what = mutate_json_value(rng, rec)
            lines[i] = _dump(rec)
            return "\n".join(lines).encode(), f"line {i + 1}: {what}"
    if kind == "truncate":
        cut = rng.randrange(len(text) + 1)
        return text[:cut].encode(), f"truncate at byte {cut}"
    if kind == "dup":
        lines.insert(i, lines[i])
        return "\n".join(lines).encode(), f"duplicate line {i + 1}"
    if kind == "delete":
        del lines[i]
        return "\n".join(lines).encode(), f"delete line {i + 1}"
    if kind == "swap":
        j = rng.choice(body)
        lines[i], lines[j] = lines[j], lines[i]
        return "\n".join(lines).encode(), f"swap lines {i + 1} and {j + 1}"
    if kind == "deep":
        lines.insert(i, "[" * 100_000 + "]" * 100_000)
        return "\n".join(lines).encode(), f"insert 100,000-deep list at line {i + 1}"
    if kind == "long":
        lines.insert(i, "a" + "Config {" * (1 << 20))
        return "\n".join(lines).encode(), f"insert 8 MB line at line {i + 1}"
    if kind == "garbage":
        lines[i] = lines[i][: rng.randrange(len(lines[i]) + 1)] + rng.choice(["}", "{", "\x00", ",,", "\"", "]"])
        return "\n".join(lines).encode(), f"corrupt line {i + 1}"
    if kind == "utf8":
        return ("\n".join(lines[:i]) + "\n").encode() + b"\xff\xfe\x80" + "\n".join(lines[i:]).encode(), \
            f"invalid UTF-8 at line {i + 1}"
    if kind == "empty":
        return b"", "empty file"
    # numbers: replace one number on the line with hostile text (logs: the values after 'key:' or 'key=')
    nums = list(re.finditer(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?", lines[i]))
    if not nums:
        lines[i] += " step:1 - x:nan"
        return "\n".join(lines).encode(), f"append junk to line {i + 1}"
    m = rng.choice(nums)
    new = rng.choice(["nan", "inf", "-inf", "-1", "0", "1e308", "1e-300", "1e9", "abc", "two", "9" * 30,
                      "[1, 2]", "{}", "null", "-0", "2e9"])
    lines[i] = lines[i][: m.start()] + new + lines[i][m.end():]
    return "\n".join(lines).encode(), f"line {i + 1}: {m.group()!r} -> {new!r}"


def mutate_file(rng: random.Random, src: Path, dst: Path) -> str:
    """Write a mutated copy of ``src`` at ``dst`` (1-3 mutations); returns what was done."""
    text = src.read_text(errors="replace")
    is_jsonl = src.suffix == ".jsonl"
    whole_json = src.suffix == ".json"
    done = []
    data = text.encode()
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        if whole_json and rng.random() < 0.75:
            try:
                doc = json.loads(data)
            except (ValueError, RecursionError):
                doc = None
            if doc is not None:
                doc, what = mutate_json_value(rng, doc)
                data = _dump(doc).encode()
                done.append(what)
                continue
        data, what = mutate_text(rng, data.decode(errors="replace"), is_jsonl)
        done.append(what)
    dst.write_bytes(data)
    return "; ".join(done)


def mutate_folder(rng: random.Random, src: Path, dst: Path) -> str:
    shutil.copytree(src, dst)
    files = sorted(dst.iterdir())
    what = []
    target = rng.choice(files)
    what.append(f"{target.name}: {mutate_file(rng, src / target.name, target)}")
    extra = rng.random()
    stem = files[0].name.rsplit("_", 1)[0]
    if extra < 0.25:
        os.mkfifo(dst / f"{stem}_9.jsonl")
        what.append("FIFO named like a step file")
    elif extra < 0.35:
        (dst / f"{stem}_8.jsonl").mkdir()
        what.append("folder named like a step file")
    elif extra < 0.45:
        (dst / f"{stem}_7.jsonl").symlink_to(dst / f"{stem}_7.jsonl")
        what.append("self-referencing symlink named like a step file")
    return "; ".join(what)
