"""The trace data model: steps -> prompt groups -> responses (-> turns -> tool calls).

A recorded RL run keeps its group structure (all n samples of a prompt stay together: GRPO's
advantage and the within-group spread of lengths depend on it), which responses were truncated
at the length cap, and, for multi-turn agents, what each turn cost.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from .batch import Batch, TurnTable


@dataclass
class ToolCall:
    latency_s: float  # wall time of the call
    tokens: int  # tokens the tool's answer appended to the context (not loss-bearing)


@dataclass
class Turn:
    """One assistant turn of a multi-turn trajectory."""

    prompt_tokens: int  # context the engine saw for this turn
    cached_tokens: int  # of which served from the prefix cache
    completion_tokens: int  # tokens generated in this turn
    loss_tokens: int  # of which loss-bearing
    engine_latency_s: float | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)


@dataclass
class Response:
    length: int  # response tokens as the trainer sees them (multi-turn: tool output included)
    capped: bool  # stopped at the length cap
    loss_tokens: int | None = None  # multi-turn: loss-bearing tokens (generated, not tool output)
    turns: list[Turn] | None = None


@dataclass
class PromptGroup:
    prompt_len: int
    responses: list[Response]

    @property
    def n(self) -> int:
        return len(self.responses)


@dataclass
class Step:
    step: int
    groups: list[PromptGroup]

    @property
    def n_responses(self) -> int:
        return sum(g.n for g in self.groups)

    def to_batch(self, max_response_len: int) -> Batch:
        """Flatten into a ``Batch`` (one entry per response)."""
        sizes = np.fromiter((g.n for g in self.groups), dtype=np.int64, count=len(self.groups))
        prompt = np.repeat(np.fromiter((g.prompt_len for g in self.groups), dtype=np.int64,
                                       count=len(self.groups)), sizes)
        group_ids = np.repeat(np.arange(len(self.groups), dtype=np.int64), sizes)
        responses = [r for g in self.groups for r in g.responses]
        lens = np.fromiter((r.length for r in responses), dtype=np.int64, count=len(responses))
        capped = np.fromiter((r.capped for r in responses), dtype=bool, count=len(responses))
        turns = None
        loss = None
        if responses and responses[0].turns is not None:
            turns = _turn_table(responses)
            loss = np.fromiter((r.loss_tokens if r.loss_tokens is not None else r.length for r in responses),
                               dtype=np.int64, count=len(responses))
        return Batch(prompt_lens=prompt, response_lens=lens, group_ids=group_ids, capped=capped,
                     max_response_len=int(max_response_len), step=self.step, turns=turns, loss_lens=loss)


def _turn_table(responses: list[Response]) -> TurnTable:
    seq, prompt, cached, completion, latency, tool_tokens = [], [], [], [], [], []
    for i, r in enumerate(responses):
        for t in r.turns or ():
            seq.append(i)
            prompt.append(t.prompt_tokens)
            cached.append(t.cached_tokens)
            completion.append(t.completion_tokens)
            latency.append(sum(c.latency_s for c in t.tool_calls))
            tool_tokens.append(sum(c.tokens for c in t.tool_calls))
    return TurnTable(seq=np.asarray(seq, dtype=np.int64), prompt_tokens=np.asarray(prompt, dtype=np.int64),
                     cached_tokens=np.asarray(cached, dtype=np.int64),
                     completion_tokens=np.asarray(completion, dtype=np.int64),
                     tool_latency_s=np.asarray(latency, dtype=np.float64),
                     tool_tokens=np.asarray(tool_tokens, dtype=np.int64))


# Where a trace's response-length cap came from (``Trace.cap_source``).
CAP_SOURCES = {
    "stated": "stated by the caller (--max-response-len)",
    "recorded": "recorded in the trace",
    "pile-up": "inferred from responses piling up at the maximum",
    "longest": "the longest response: no pile-up at the maximum shows truncation, so the run's cap is unknown "
               "and may be higher (state it with --max-response-len)",
}


def describe_cap(cap: int, source: str) -> str:
    """'max response 32,768 (stated by the caller ...)': the cap and where it came from."""
    return f"max response {int(cap):,} ({CAP_SOURCES.get(source, source)})"


# A step holding fewer than this share of the median step's responses is partial: the run stopped
# (or its logger did) while writing it; the Search-R1 trace's last step has 47 of 2,048.
PARTIAL_STEP_FRACTION = 0.5


@dataclass
class Trace:
    """A recorded (or converted) workload: a list of steps and the caps it ran under."""

    steps: list[Step]
    max_response_len: int  # the response length cap (inferred when the source does not state it)
    kind: str = "single"  # "single" (one generation per response) or "multiturn"
    name: str = ""
    source: str = ""  # where it was read from (not written to the native format's equality)
    max_prompt_len: int | None = None
    cap_source: str = "recorded"  # one of CAP_SOURCES (provenance: not part of equality)

    def __post_init__(self):
        if self.kind not in ("single", "multiturn"):
            raise ValueError(f"kind must be 'single' or 'multiturn', got {self.kind!r}")
        if self.cap_source not in CAP_SOURCES:
            raise ValueError(f"cap_source must be one of {sorted(CAP_SOURCES)}, got {self.cap_source!r}")

    def __eq__(self, other) -> bool:  # ``source`` is provenance, not content
        if not isinstance(other, Trace):
            return NotImplemented
        return (self.steps, self.max_response_len, self.kind, self.name, self.max_prompt_len) == (
            other.steps, other.max_response_len, other.kind, other.name, other.max_prompt_len)

    @property
    def is_multiturn(self) -> bool:
        return self.kind == "multiturn"

    @property
    def n_responses(self) -> int:
        return sum(s.n_responses for s in self.steps)

    def batches(self) -> list[Batch]:
        return [s.to_batch(self.max_response_len) for s in self.steps]

    def partial_flags(self) -> list[bool]:
        """Per step: whether it is partial, i.e. holds fewer than ``PARTIAL_STEP_FRACTION`` of the
        responses of the median step (so per-step statistics would treat a fragment as a step)."""
        sizes = np.asarray([s.n_responses for s in self.steps], dtype=np.float64)
        if sizes.size < 2:
            return [False] * int(sizes.size)
        typical = float(np.median(sizes))
        return [bool(n < PARTIAL_STEP_FRACTION * typical) for n in sizes]

    def typical_step_size(self) -> int:
        """Responses in the median step."""
        sizes = [s.n_responses for s in self.steps]
        return int(np.median(sizes)) if sizes else 0

    def without_partial_steps(self) -> Trace:
        """The same trace with its partial steps left out."""
        flags = self.partial_flags()
        return replace(self, steps=[s for s, partial in zip(self.steps, flags) if not partial])

    def pooled(self) -> Batch:
        """All steps as one batch (group ids kept distinct across steps)."""
        return concat_batches(self.batches(), self.max_response_len)


def concat_batches(batches: list[Batch], max_response_len: int) -> Batch:
    if not batches:
        e = np.zeros(0, dtype=np.int64)
        return Batch(e, e, e, np.zeros(0, dtype=bool), max_response_len)
    offsets = np.cumsum([0] + [b.n_groups for b in batches[:-1]])
    seq_off = np.cumsum([0] + [len(b) for b in batches[:-1]])
    turns = None
    if all(b.turns is not None for b in batches):
        tt = [b.turns for b in batches]
        turns = TurnTable(
            seq=np.concatenate([t.seq + o for t, o in zip(tt, seq_off)]),
            prompt_tokens=np.concatenate([t.prompt_tokens for t in tt]),
            cached_tokens=np.concatenate([t.cached_tokens for t in tt]),
            completion_tokens=np.concatenate([t.completion_tokens for t in tt]),
            tool_latency_s=np.concatenate([t.tool_latency_s for t in tt]),
            tool_tokens=np.concatenate([t.tool_tokens for t in tt]),
        )
    loss = None
    if all(b.loss_lens is not None for b in batches):
        loss = np.concatenate([b.loss_lens for b in batches])
    return Batch(
        prompt_lens=np.concatenate([b.prompt_lens for b in batches]),
        response_lens=np.concatenate([b.response_lens for b in batches]),
        group_ids=np.concatenate([b.group_ids + o for b, o in zip(batches, offsets)]),
        capped=np.concatenate([b.capped for b in batches]),
        max_response_len=max_response_len,
        step=batches[0].step,
        turns=turns,
        loss_lens=loss,
    )
