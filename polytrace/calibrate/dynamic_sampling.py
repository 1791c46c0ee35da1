"""DAPO's dynamic sampling in a log: generation runs on more prompts than the trainer keeps.

verl's DAPO trainer (``recipe/dapo/dapo_ray_trainer.py``) generates ``data.gen_batch_size``
prompts x n per generation batch (its dataloader's batch), drops the prompts whose responses all
score alike (``algorithm.filter_groups``), and generates another batch until
``data.train_batch_size`` prompts are kept. A step's ``timing_s/gen`` and ``timing_s/reward`` add
up every batch's (verl's ``marked_timer`` adds into a ``timing_raw`` cleared only once a step has
trained) and ``train/num_gen_batches`` counts the batches; the trainer's passes run on the
``train_batch_size`` prompts kept. So a DAPO step's generation is ``num_gen_batches`` rollouts
of ``gen_batch_size`` prompts, each waking and resharding the engine, and its rule-based reward
scores all of their responses.

The length metrics (``response_length/*``) describe the kept responses only: the dropped ones
(all right or all wrong: often shorter, or capped) are priced with the same statistics, and a note
says so.
"""

from __future__ import annotations

import math

from ..run.spec import declarations, verl_key
from ..stepmodel.dynamic_sampling import samples_apart

GEN_BATCHES = "train/num_gen_batches"
GEN_BATCH_KEY = verl_key("gen_batch")  # data.gen_batch_size
# verl's max_num_gen_batches is 10 in the DAPO recipes; past 1000 it is no count (estimate's
# --gen-batches bound, declared once)
MAX_GEN_BATCHES = int(declarations()["gen_batches"].hi)


def gen_batches(stats: dict) -> int:
    """The step's generation batches (``train/num_gen_batches``; 1 where not logged). A value that
    is no whole count in [1, ``MAX_GEN_BATCHES``] is refused by ``problem`` before pricing."""
    v = stats.get(GEN_BATCHES)
    return 1 if v is None else int(v)


def problem(stats: dict) -> str:
    """Why a step's ``train/num_gen_batches`` cannot be priced ("" when it can or is absent)."""
    v = stats.get(GEN_BATCHES)
    if v is None:
        return ""
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v == int(v)
    if not ok or not 1 <= v <= MAX_GEN_BATCHES:
        return f"{GEN_BATCHES} is {v!r}, not a count of generation batches in [1, {MAX_GEN_BATCHES}]"
    return ""


def applies(run, stats: dict) -> bool:
    """Whether a step generates other than the training batch: more than one batch, or a run whose
    generation batch is its own (``stepmodel.dynamic_sampling.samples_apart``)."""
    return gen_batches(stats) > 1 or samples_apart(run.gen_batch_prompts, run.gen_batches)


def notes(run, rows) -> list[str]:
    """One note where a log's steps generate more than they train on (``applies``)."""
    counts = [gen_batches(r.stats) for r in rows]
    if not any(applies(run, r.stats) for r in rows):
        return []
    per_batch = run.gen_batch_prompts or run.prompts_per_step
    spread = (f"{min(counts)}-{max(counts)} per step, mean {sum(counts) / len(counts):.2f}"
              if min(counts) != max(counts) else f"{counts[0]} per step")
    return [f"dynamic sampling (DAPO): generation runs {per_batch} prompts x {run.n} per batch ({GEN_BATCH_KEY}), "
            f"{spread} ({GEN_BATCHES}), the trainer the {run.prompts_per_step} prompts kept; the dropped responses "
            "are priced with the kept ones' length statistics, the only ones the log gives"]
