"""The composition layer: kernel timings + model + hardware + workload -> per-stage RL step time.

- ``timings.py``: measured kernel timings from result files (``results/<gpu>/*.json`` or files
  given), as monotone time-versus-size curves
- ``pricing.py``: the kernel families a step is made of and the price of each: measured timings
  of the chosen provider where present, else the roofline; what-if speedups
- ``rollout.py``: decode-iteration simulation of continuous batching (long tail, KV capacity)
- ``training.py``: forward / update passes over data-parallel ranks (padding, FSDP, Megatron)
- ``stages.py``: ``RunConfig`` and ``stage_costs``: one step's stages as parts by kernel family;
  ``synthetic_lengths``, a step's lengths from a log's statistics (Beta quantiles: ``quantiles.py``)
- ``refit.py``: the colocated refit (the trainer's weights into the engine on the same GPUs) from
  its bytes and links; ``parallel.py`` the MoE, context and pipeline layouts' prices
- ``memory.py``: per-GPU memory (trainer state, activations, rollout weights, KV cache) and the
  feasibility check ``estimate`` runs: errors for setups that cannot run, warnings for ones that
  need unpriced help (offload)
- ``estimate.py``: ``estimate_run`` prices a ``RunSpec`` (``polytrace/run/spec.py``) over sampled steps of a
  profile (``estimate``: the same from keywords); ``result.py`` its typed pieces (``Price``,
  ``EstimateResult``, the ``--json`` schema)
- ``modes.py``: execution modes (colocated sync, one-step-off, fully async): the steady-state
  step of a rollout:trainer split, the weight sync, busy shares and idle GPU time by cause;
  ``streaming.py`` the physics under them (streaming rollout, drain, weight sync, the trainer
  consuming samples as they arrive); ``modes_text.py`` their text
- ``breakdown.py``: the kernel breakdown, what-ifs and the Amdahl table, and their tables
- ``impact.py``: the step-time change between two result files (``polytrace impact``, the gate's line)
- ``workloads.py``: the default workload of each profile (model, GPU count)
- ``report.py``: ``report_section`` and ``plot_stage_breakdown`` for ``polytrace report``
"""

from .efficiency import DEFAULT as DEFAULT_EFFICIENCY
from .efficiency import Efficiency
from .estimate import PriceOptions, build_config, configure, estimate, estimate_run, estimate_step
from .memory import MemoryPlan, check_feasibility, memory_plan
from .modes import MODES, compare_modes, estimate_mode, mode_estimate
from .pricing import FAMILIES, MEASURED, Pricer
from .report import plot_stage_breakdown, report_section
from .result import EstimateResult, Price
from .rollout import simulate_rollout
from .stages import STAGES, Part, RunConfig, StageCosts, stage_costs, synthetic_lengths
from .timings import Curve, KernelTimings

__all__ = [
    "DEFAULT_EFFICIENCY", "FAMILIES", "MEASURED", "MODES", "STAGES", "Curve", "Efficiency", "EstimateResult",
    "KernelTimings", "MemoryPlan", "Part", "Price", "PriceOptions", "Pricer", "RunConfig", "StageCosts",
    "build_config", "check_feasibility", "compare_modes", "configure", "estimate", "estimate_mode", "estimate_run",
    "estimate_step", "memory_plan", "mode_estimate", "plot_stage_breakdown", "report_section", "simulate_rollout",
    "stage_costs", "synthetic_lengths",
]
