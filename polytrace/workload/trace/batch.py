"""``Batch``: one RL step's sequences as flat numpy arrays.

Both a sampled profile (``Profile.sample``) and a recorded trace step (``Step.to_batch``) produce a
``Batch``, so statistics, packing and the suites treat real and sampled workloads the same way.

Arrays, one entry per sequence (response) unless noted:

- ``prompt_lens`` int64: prompt tokens of the sequence's prompt (repeated across its group)
- ``response_lens`` int64: response tokens (for multi-turn: everything after the prompt,
  tool output included, as the trainer sees it)
- ``group_ids`` int64: index of the prompt group (all n samples of a prompt share it)
- ``capped`` bool: the response stopped at the length cap

Multi-turn batches add a ``turns`` table (one row per assistant turn; see ``TurnTable``) and
``loss_lens`` (loss-bearing tokens per sequence: generated tokens, not tool output).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class TurnTable:
    """Per-turn arrays of a multi-turn batch, one row per assistant turn.

    ``seq`` is the sequence index each turn belongs to (rows of one sequence are contiguous and in
    turn order). ``prompt_tokens`` is the context the engine saw for the turn, ``cached_tokens``
    the part served from the prefix cache, ``completion_tokens`` the tokens generated.
    ``tool_latency_s`` is the latency of the tool call made after the turn (0 when none) and
    ``tool_tokens`` the tokens that call appended to the context.
    """

    seq: np.ndarray
    prompt_tokens: np.ndarray
    cached_tokens: np.ndarray
    completion_tokens: np.ndarray
    tool_latency_s: np.ndarray
    tool_tokens: np.ndarray

    def __len__(self) -> int:
        return int(self.seq.shape[0])

    def turns_per_sequence(self, n_sequences: int) -> np.ndarray:
        return np.bincount(self.seq, minlength=n_sequences)

    def tool_calls_per_sequence(self, n_sequences: int) -> np.ndarray:
        return np.bincount(self.seq, weights=(self.tool_tokens > 0) | (self.tool_latency_s > 0),
                           minlength=n_sequences).astype(np.int64)


@dataclass
class Batch:
    prompt_lens: np.ndarray
    response_lens: np.ndarray
    group_ids: np.ndarray
    capped: np.ndarray
    max_response_len: int
    step: int = 0
    turns: TurnTable | None = None
    loss_lens: np.ndarray | None = None
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.response_lens.shape[0])

    @property
    def n_groups(self) -> int:
        return int(self.group_ids.max()) + 1 if len(self) else 0

    @property
    def seq_lens(self) -> np.ndarray:
        """Total tokens per sequence (prompt + response): what packing and attention see."""
        return self.prompt_lens + self.response_lens

    @property
    def total_tokens(self) -> int:
        return int(self.seq_lens.sum())

    @property
    def is_multiturn(self) -> bool:
        return self.turns is not None
