"""Watch our Triton kernels run in the interpreter: which kernels launched, and which elements each
program wrote (the write footprint).

Why: the interpreter runs a grid's programs one after another, so a program that writes one row
too many (``rows <= length`` in a pack kernel) is hidden when the next program overwrites that row
with the right value; on a GPU the two programs race. And a torch fallback inside an API would
pass every value test without running our kernel at all.

``watch_kernels()`` records, for every launch of a ``@triton.jit`` kernel inside the ``with`` block,
its name, grid and arguments, and for every store each program issues the addresses it writes.
That is the footprint one would get by launching each program (or each sequence's programs) alone
into NaN-poisoned outputs and diffing, done in a single launch, and it also sees a write that a
poison diff misses (a value written twice, or NaN written into NaN). Stores to addresses outside
every tensor argument of the launch are dropped (and reported), so a bad kernel cannot scribble over
the test process. ``Launch.assert_footprint`` then checks: no write outside the declared outputs,
no element written by two programs, every expected element written, and (with ``owner``) each
program wrote exactly its own elements.

Interpreter only (``TRITON_INTERPRET=1``): on a GPU the fixtures skip. Hooks two internals of
Triton's interpreter (``GridExecutor.__call__`` and ``interpreter_builder.create_masked_store``),
present in triton 3.6-3.9; a triton without them skips the footprint tests with that reason.
"""

from __future__ import annotations

import contextlib
import inspect
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch

Program = tuple[int, int, int]


@dataclass
class Launch:
    kernel: str
    args: dict
    grid: tuple | None
    writes: dict = field(default_factory=lambda: defaultdict(list))  # program -> [uint64 address arrays]
    dropped: dict = field(default_factory=lambda: defaultdict(int))  # program -> stores outside every tensor arg
    _spans: list = field(default_factory=list)  # (lo, hi) byte range of each tensor argument's storage

    def _inside_some_tensor(self, addrs: np.ndarray) -> np.ndarray:
        inside = np.zeros(addrs.shape, dtype=bool)
        for lo, hi in self._spans:
            inside |= (addrs >= lo) & (addrs < hi)
        return inside

    @property
    def programs(self) -> list[Program]:
        return sorted(self.writes)

    def footprint(self, outputs: list[str]) -> tuple[dict, list[str]]:
        """({program: {output name: sorted flat indices written}}, [problems: writes outside the outputs])."""
        maps = {}
        for name in outputs:
            t = self.args[name]
            if not isinstance(t, torch.Tensor):
                raise AssertionError(f"{self.kernel}: argument {name!r} is not a tensor")
            maps[name] = _address_map(t)
        result, problems = {}, []
        for prog, chunks in self.writes.items():
            addrs = np.unique(np.concatenate(chunks)) if chunks else np.zeros(0, np.uint64)
            mine = {}
            left = np.ones(addrs.shape, dtype=bool)
            for name, (sorted_addr, order) in maps.items():
                pos = np.searchsorted(sorted_addr, addrs)
                pos_c = np.minimum(pos, max(len(sorted_addr) - 1, 0))
                hit = (pos < len(sorted_addr)) & (sorted_addr[pos_c] == addrs) if len(sorted_addr) else \
                    np.zeros(addrs.shape, dtype=bool)
                hit &= left
                mine[name] = np.sort(order[pos_c[hit]])
                left &= ~hit
            if left.any():
                problems.append(f"program {prog} wrote {int(left.sum())} element(s) outside the outputs {outputs} "
                                f"(into {_which_arg(self, addrs[left][0])})")
            if self.dropped.get(prog):
                problems.append(f"program {prog} issued {self.dropped[prog]} store(s) outside every tensor argument")
            result[prog] = mine
        return result, problems

    def assert_footprint(self, outputs: list[str], *, expected: dict | None = None,
                         owner: Callable[[Program], dict] | None = None, max_problems: int = 5) -> dict:
        """Fail unless: every write lands in ``outputs``; no element is written by two programs; the
        elements written are exactly ``expected[name]`` (a bool mask shaped like the output; default:
        all of it); and, with ``owner``, program p wrote exactly ``owner(p)[name]`` (bool masks or
        flat indices; names missing from the dict mean nothing). Returns the footprint."""
        fp, problems = self.footprint(outputs)
        for name in outputs:
            t = self.args[name]
            count = np.zeros(t.numel(), dtype=np.int64)
            first = {}
            for prog, mine in fp.items():
                idx = mine[name]
                count[idx] += 1
                for i in idx[count[idx] > 1][:1]:
                    problems.append(f"{name}[{_unravel(int(i), t.shape)}] written by programs {first.get(int(i))} "
                                    f"and {prog} (a race on a GPU)")
                for i in idx:
                    first.setdefault(int(i), prog)
            want = np.ones(t.numel(), dtype=bool) if expected is None or name not in expected else \
                _as_mask(expected[name], t)
            missing = np.nonzero(want & (count == 0))[0]
            extra = np.nonzero(~want & (count > 0))[0]
            if len(missing):
                problems.append(f"{name}: {len(missing)} element(s) never written, first {name}"
                                f"[{_unravel(int(missing[0]), t.shape)}]")
            if len(extra):
                problems.append(f"{name}: {len(extra)} element(s) written that no program owns, first {name}"
                                f"[{_unravel(int(extra[0]), t.shape)}] by {first.get(int(extra[0]))}")
        if owner is not None:
            for prog, mine in fp.items():
                own = owner(prog)
                for name in outputs:
                    t = self.args[name]
                    want = np.nonzero(_as_mask(own[name], t))[0] if name in own else np.zeros(0, np.int64)
                    got = mine[name]
                    if not np.array_equal(np.sort(want), got):
                        stray = np.setdiff1d(got, want)
                        lost = np.setdiff1d(want, got)
                        problems.append(
                            f"program {prog} of {self.kernel}: wrote {len(stray)} {name} element(s) it does not own"
                            + (f" (first {name}[{_unravel(int(stray[0]), t.shape)}])" if len(stray) else "")
                            + f", missed {len(lost)} of its own"
                            + (f" (first {name}[{_unravel(int(lost[0]), t.shape)}])" if len(lost) else ""))
        if problems:
            shown = "; ".join(problems[:max_problems])
            more = f" (+{len(problems) - max_problems} more)" if len(problems) > max_problems else ""
            raise AssertionError(f"{self.kernel} write footprint: {shown}{more}")
        return fp


class Recorder:
    def __init__(self):
        self.launches: list[Launch] = []

    def names(self) -> list[str]:
        return [launch.kernel for launch in self.launches]

    def of(self, kernel: str) -> list[Launch]:
        return [launch for launch in self.launches if launch.kernel == kernel]

    def one(self, kernel: str) -> Launch:
        found = self.of(kernel)
        assert len(found) == 1, f"expected one launch of {kernel}, got {len(found)} (launched: {self.names()})"
        return found[0]

    def assert_launched(self, *kernels: str) -> None:
        """The named ``@triton.jit`` kernels ran: not a torch fallback, not another path."""
        missing = [k for k in kernels if k not in self.names()]
        assert not missing, f"Triton kernel(s) {missing} were not launched (launched: {self.names()})"


def _hooks():
    try:
        from triton.runtime import interpreter
    except ImportError as exc:  # pragma: no cover
        pytest.skip(f"triton's interpreter is not importable: {exc}")
    executor = getattr(interpreter, "GridExecutor", None)
    builder = getattr(interpreter, "interpreter_builder", None)
    if executor is None or builder is None or not hasattr(builder, "create_masked_store"):
        pytest.skip("this triton's interpreter has no GridExecutor / create_masked_store to watch")
    return interpreter, executor, builder


@contextlib.contextmanager
def watch_kernels():
    """Record the interpreter launches (and each program's stores) in the block. Skips the test
    when kernels are not interpreted (a GPU run)."""
    from polytrace_kernels._interpreter import interpreting

    if not interpreting():
        pytest.skip("watching kernels needs the Triton interpreter (TRITON_INTERPRET=1)")
    interpreter, executor, builder = _hooks()
    recorder = Recorder()
    current: list[Launch] = []
    original_call = executor.__call__
    original_store = builder.create_masked_store

    def call(self, *args_dev, **kwargs):
        names = inspect.getfullargspec(self.fn).args
        bound = dict(zip(names, args_dev))
        bound.update({k: v for k, v in kwargs.items() if k in names})
        launch = Launch(getattr(self.fn, "__name__", str(self.fn)), bound,
                        None if callable(self.grid) else tuple(self.grid))
        for value in bound.values():
            if isinstance(value, torch.Tensor) and value.device.type == "cpu":
                storage = value.untyped_storage()
                launch._spans.append((storage.data_ptr(), storage.data_ptr() + storage.nbytes()))
        recorder.launches.append(launch)
        current.append(launch)
        try:
            return original_call(self, *args_dev, **kwargs)
        finally:
            current.pop()

    def store(ptrs, value, mask, cache_policy):
        if current:
            launch = current[-1]
            addrs = np.asarray(ptrs.data).astype(np.uint64)
            m = np.broadcast_to(np.asarray(mask.data, dtype=bool), addrs.shape)
            inside = launch._inside_some_tensor(addrs)
            prog = tuple(int(i) for i in builder.grid_idx)
            launch.writes[prog].append(addrs[m & inside].ravel())
            if (m & ~inside).any():
                launch.dropped[prog] += 1
                mask = interpreter.TensorHandle(m & inside, mask.dtype)
        return original_store(ptrs, value, mask, cache_policy)

    executor.__call__ = call
    builder.create_masked_store = store
    try:
        yield recorder
    finally:
        executor.__call__ = original_call
        del builder.create_masked_store  # back to the class method


def _address_map(t: torch.Tensor):
    """(sorted byte addresses of t's elements, flat index of each)."""
    idx = torch.arange(t.numel(), dtype=torch.int64)
    offsets = torch.zeros(t.shape, dtype=torch.int64)
    for dim, (size, stride) in enumerate(zip(t.shape, t.stride())):
        shape = [1] * t.dim()
        shape[dim] = size
        offsets = offsets + torch.arange(size, dtype=torch.int64).reshape(shape) * stride
    addr = (t.data_ptr() + offsets.reshape(-1) * t.element_size()).numpy().astype(np.uint64)
    order = np.argsort(addr, kind="stable")
    return addr[order], idx.numpy()[order]


def _as_mask(spec, t: torch.Tensor) -> np.ndarray:
    if isinstance(spec, torch.Tensor) and spec.dtype == torch.bool:
        if tuple(spec.shape) != tuple(t.shape):
            raise AssertionError(f"mask of shape {tuple(spec.shape)} for an output of shape {tuple(t.shape)}")
        return spec.reshape(-1).cpu().numpy()
    mask = np.zeros(t.numel(), dtype=bool)
    mask[np.asarray(spec, dtype=np.int64).reshape(-1)] = True
    return mask


def _unravel(i: int, shape) -> tuple:
    return tuple(int(x) for x in np.unravel_index(i, tuple(shape))) if len(shape) else ()


def _which_arg(launch: Launch, addr) -> str:
    for name, value in launch.args.items():
        if isinstance(value, torch.Tensor) and value.device.type == "cpu":
            storage = value.untyped_storage()
            if storage.data_ptr() <= int(addr) < storage.data_ptr() + storage.nbytes():
                return f"the storage of argument {name!r}"
    return "no argument's storage"
