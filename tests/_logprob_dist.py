"""Workers of the vocabulary-parallel log-prob test (``tests/kernels/test_logprob_features.py``): a gloo
process group of CPU processes, each holding a vocabulary shard, in the Triton interpreter."""

from __future__ import annotations

import os

import torch


def shard_worker(rank: int, world: int, init_file: str, bounds: list, cases: dict, out_dir: str) -> None:
    """Every case of ``cases`` ({name: case}) in one gloo group, each rank's results saved as
    ``rank<r>-<name>.pt``: one group for all of them, since each process start (torch, triton and
    the kernels imported) costs about 3 CPU-s on the 2-core machine, more than a case's work."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        for name, case in cases.items():
            torch.save(_shard_case(rank, bounds, case), os.path.join(out_dir, f"rank{rank}-{name}.pt"))
    finally:
        dist.destroy_process_group()


def _shard_case(rank: int, bounds: list, case: dict) -> dict:
    from polytrace_kernels.logprob import vocab_parallel_token_logprobs

    lo, hi = bounds[rank], bounds[rank + 1]
    shard = case["logits"][:, lo:hi].clone().requires_grad_()
    results = {}
    lp, ent = vocab_parallel_token_logprobs(shard, case["tokens"], lo, case["temperature"], True,
                                            ignore_index=case.get("ignore_index", -100), softcap=case.get("softcap"))
    torch.autograd.backward([lp, ent], [case["g_lp"], case["g_ent"]])
    results.update(logprob=lp.detach(), entropy=ent.detach(), grad=shard.grad)
    bad = case["tokens"].clone()
    bad[0] = bounds[-1]  # past the whole vocabulary: owned by no rank
    try:
        vocab_parallel_token_logprobs(shard.detach(), bad, lo, ignore_index=case.get("ignore_index", -100))
        results["bad_token_error"] = ""
    except ValueError as exc:
        results["bad_token_error"] = str(exc)
    return results
