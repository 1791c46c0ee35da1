"""The planted kernel bugs that ``scripts/mutation_check.py`` checks the CPU kernel tests against:
one exact snippet of one file under ``kernels/`` replaced by a buggy one. ``old`` must occur exactly
once in its file (``tests/kernels/test_kernel_mutations.py`` keeps the list in step with the
kernels). One module per kernel family, as ``mutation_check.FAMILY_TESTS`` runs them.

Each family's list is four lists in turn:

- the first, the kinds numerical and indexing reviews find (masks, offsets, scale errors, biases);
- the second, written by someone who had not seen the first (launch grids, strides of views,
  accumulator dtypes, split boundaries, the planner's bin packing, GQA mapping, the
  vocabulary-parallel ignore index); its survivors got the tests they lacked;
- the third, written with the two above in sight and aimed at what they cover thinly (plan caching,
  schedules, configs per capability, decode with a head dim not a power of two, upstream gradients
  in any layout, ignored rows, the planner's reports);
- the fourth, written with the three above in sight and aimed at what they still cover thinly
  (packing: a trusted length past the padded width, the planner's exact-fit bounds and reports, a
  fractional attention cost; log-prob: single-output gradients of the fused head, the chunked
  d(hidden) with a strided weight, rows whose logits all underflow exp, the vocabulary-parallel
  reductions; attention: paged K and V in different layouts, multi-token decode windows, unbounded
  window sides, the plan cache's max_seqlen_q key, GQA and offsets in dQ and dK/dV). Of its 48 bugs
  the tests then in place killed 28; the 19 real gaps among the survivors got tests, and one more
  joined: the vocabulary-parallel entropy of a row one rank's shard holds only as -inf was NaN (a
  real bug found while writing the list, fixed in ``kernels/logprob/parallel.py``).

What a hunt wrote and the list leaves out is named, with its reason, in the family's module.
"""

from __future__ import annotations

from . import attention, logprob, packing
from .mutation import Mutation

MUTATIONS = packing.MUTATIONS + logprob.MUTATIONS + attention.MUTATIONS

__all__ = ["MUTATIONS", "Mutation"]
