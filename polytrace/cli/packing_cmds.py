"""``polytrace pack-compare``: our packing planner vs verl's on sampled batches."""

from __future__ import annotations

import argparse

from ._args import add_steps, deprecated, nonneg_int, positive_int
from ._args import positive_int_at_most as _at_most
from .workload_cmds import add_profile_arg, profile_arg


def register(sub) -> None:
    p = sub.add_parser("pack-compare", help="compare our sequence-packing planner with verl's on a profile",
                       description="Plan sampled batches of PROFILE across data-parallel ranks and into "
                                   "micro-batches with our planner and, when installed, verl's; print "
                                   "imbalance, gap to the lower bound, micro-batches and planning time.")
    add_profile_arg(p, "profile", "PROFILE", "built-in profile name (see `polytrace profiles`)")
    add_steps(p, default=[0, 1, 2, 3, 4])
    p.add_argument("--seed", type=nonneg_int, default=0,
                   help="seed of the sampled batches (default 0; same seed, same batches on any machine)")
    gpus = _at_most(65536, "GPUs")
    p.add_argument("--gpus", type=gpus, dest="ranks", default=8, metavar="N",
                   help="GPUs, one data-parallel rank each (default 8)")
    deprecated(p, "--ranks", use="--gpus", dest="ranks", type=gpus)
    p.add_argument("--micro-batch-tokens", type=positive_int, dest="max_tokens", default=None, metavar="N",
                   help="token budget per micro-batch (default: max prompt + max response of the profile)")
    deprecated(p, "--max-tokens", use="--micro-batch-tokens", dest="max_tokens", type=positive_int)
    p.add_argument("--cost", choices=("attention", "tokens"), default="attention",
                   help="cost model for balance (default attention: 24576*L + L^2, verl's)")
    p.add_argument("--equal-size", action=argparse.BooleanOptionalAction, default=True,
                   help="same number of sequences per rank, as verl's balance_batch (default on)")
    p.add_argument("--no-peers", dest="peers", action="store_false", help="run our planner only")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..workload.packcompare import compare
    from ._io import print_json

    result = compare(profile_arg(args, "profile"), steps=args.steps, seed=args.seed, ranks=args.ranks,
                     max_tokens=args.max_tokens, cost=args.cost, equal_size=args.equal_size, peers=args.peers)
    if args.json:
        print_json(result)
        return 0
    from tabulate import tabulate

    print(f"{result['profile']}: {result['ranks']} GPUs (data-parallel ranks), max {result['max_tokens']} tokens "
          f"per micro-batch, cost={result['cost']}, seed {result['seed']}; times: {result['measured_on']}")
    for peer, why in result["peers_skipped"].items():  # once per command, not once per step
        print(f"{peer}: skipped ({why})")
    table, failed = [], {}
    for r in result["rows"]:
        if r["skipped"]:
            table.append([r["step"], r["method"], r["n_sequences"], "skipped (below)"] + [""] * 5)
            failed.setdefault(r["skipped"], []).append(r["step"])
            continue
        table.append([r["step"], r["method"], r["n_sequences"], f"{r['imbalance']:.6f}", f"{100 * r['gap']:.4f}%",
                      r["n_microbatches"], f"{r['lockstep_imbalance']:.4f}", r["over_budget"],
                      f"{r['plan_ms']:.1f}"])
    print(tabulate(table, headers=["step", "planner", "seqs", "imbalance", "gap to LB", "micro-batches",
                                   "lock-step", "over budget", "plan ms"]))
    for why, steps in failed.items():  # a peer failing on some batches: each reason once, with its steps
        print(f"verl failed on step{'s' if len(steps) > 1 else ''} {', '.join(map(str, steps))}: {why}")
    cmp_ = result["summary"].get("ours_vs_verl")
    if cmp_:
        print(f"ours vs verl on {cmp_['batches']} batches: never worse = {cmp_['never_worse']}, "
              f"better on average = {cmp_['better_on_average']}, verl at the lower bound = "
              f"{cmp_['verl_at_lower_bound']}")
    return 0
