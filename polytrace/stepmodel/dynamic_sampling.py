"""DAPO's dynamic sampling priced by ``estimate`` (``--gen-batch``, ``--gen-batches``).

verl's DAPO trainer (``recipe/dapo/dapo_ray_trainer.py``) generates ``data.gen_batch_size``
prompts x n a generation batch, drops the prompts whose responses all score alike and generates
again until ``data.train_batch_size`` prompts are kept: a step's generation is ``gen_batches``
rollouts of ``gen_batch`` prompts, one after the other (each waking and resharding the engine),
its rule-based reward scores every generated response, and its trainer passes run on the prompts
kept (``--prompts``). A log states its own batches per step (``calibrate/dynamic_sampling.py``);
the PolyTrace DAPO trace's filter record kept 27-34 of each 96-prompt batch and fed 4 trainer
steps of 32 prompts from 6 batches (docs/workload.md): ``--prompts 32 --gen-batch 96
--gen-batches 1.5``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import PolytraceError
from .efficiency import DEFAULT
from .stages import RunConfig, stage_costs


def samples_apart(gen_batch_prompts: int | None, gen_batches: float) -> bool:
    """Whether generation runs other batches than the trainer's (a generation batch of its own
    size, or more than one a step): a ``RunConfig``'s two fields, or the same keys of an estimate's
    settings. The one place this is decided: the estimate prices it, ``estimate --mode`` refuses it
    outside sync, and the estimate's run line says it."""
    return bool(gen_batch_prompts) or gen_batches != 1.0


def generation_batches(prof, cfg: RunConfig, steps, seed: int) -> list:
    """Each step's generation batch where its size differs from the batch trained on
    (``cfg.gen_batch_prompts`` prompts, of which the trainer keeps its own); else None."""
    return [prof.sample(step=int(st), seed=seed, prompts=cfg.gen_batch_prompts) if cfg.gen_batch_prompts else None
            for st in steps]


def generation_parts(cfg: RunConfig, batch, generation, costs, pricer):
    """(the generation parts of one step, the stage costs they came from, the batches a step, a
    note): the generation batch (``generation``, else the trainer's ``batch`` whose ``costs`` are
    given) priced as a rollout and repeated ``cfg.gen_batches`` times. Multi-turn profiles are
    refused: their tool waits and prefill are priced on the batch trained on."""
    if batch.turns is not None:
        raise PolytraceError("--gen-batch / --gen-batches (DAPO's dynamic sampling) price single-turn profiles; "
                             "this profile is multi-turn")
    gen = generation if generation is not None else batch
    if gen is batch:
        gen_costs = costs
    else:
        gen_cfg = dataclasses.replace(cfg, prompts_per_step=cfg.gen_batch_prompts)
        gp = np.asarray(gen.prompt_lens, dtype=np.int64)
        gr = np.minimum(np.asarray(gen.response_lens, dtype=np.int64), cfg.max_response_len)
        gen_costs = stage_costs(gen_cfg, gp, np.maximum(gr, 1), eff=DEFAULT, pricer=pricer)
    times = float(cfg.gen_batches)
    parts = [dataclasses.replace(x, seconds=x.seconds * times) for x in gen_costs.parts if x.stage == "gen"]
    prompts = len(gen.response_lens) // max(cfg.n, 1)
    note = (f"dynamic sampling (DAPO): generation runs {prompts} prompts x {cfg.n} a batch, {times:g} batch(es) a "
            f"step; the trainer the {cfg.prompts_per_step} prompts kept (sampled from the profile apart from the "
            "generation batch: which prompts the filter keeps is not modelled)")
    return parts, gen_costs, times, note
