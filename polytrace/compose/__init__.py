"""The composition layer: kernel costs + model + hardware + workload -> per-stage RL step time.

- ``rollout.py``: decode-iteration simulation of continuous batching (long tail, KV capacity)
- ``training.py``: forward / update passes over data-parallel ranks (padding, FSDP, Megatron)
- ``stages.py``: ``RunConfig`` and ``stage_costs`` for one step's sequence lengths
- ``measured.py``: measured kernel rates from ``results/<gpu>/*.json``
- ``memory.py``: per-GPU memory (trainer state, activations, rollout weights, KV cache) and the
  feasibility check ``estimate`` runs: errors for setups that cannot run, warnings for ones that
  need unpriced help (offload)
- ``estimate.py``: ``estimate`` over sampled steps of a profile
- ``report.py``: ``report_section`` and ``plot_stage_breakdown`` for ``polytrace report``
"""

from .efficiency import DEFAULT as DEFAULT_EFFICIENCY
from .efficiency import Efficiency
from .estimate import build_config, estimate, estimate_step
from .measured import MeasuredRates
from .memory import MemoryPlan, check_feasibility, memory_plan
from .report import plot_stage_breakdown, report_section
from .rollout import simulate_rollout
from .stages import STAGES, RunConfig, StageCosts, stage_costs, synthetic_lengths

__all__ = [
    "DEFAULT_EFFICIENCY", "STAGES", "Efficiency", "MeasuredRates", "MemoryPlan", "RunConfig", "StageCosts",
    "build_config", "check_feasibility", "estimate", "estimate_step", "memory_plan", "plot_stage_breakdown",
    "report_section", "simulate_rollout", "stage_costs", "synthetic_lengths",
]
