"""Published reference runs of other RL frameworks, as their documentation states them, and the
zero-shot estimate of each (``tests/stepmodel/test_compose_published_runs.py``, docs/step-model.md): NeMo
RL's performance tables (below) and verl's DeepSeek-V3 benchmark (``VERL_DPSK``, the last row,
priced from the settings of the script that page names).

Source: NeMo RL's "Performance" page (``docs/about/performance-summary.md``,
https://github.com/NVIDIA-NeMo/RL/blob/main/docs/about/performance-summary.md), GRPO on
OpenMathInstruct-2, DGX-H100 and GB200-NVL72, BF16 (and, in the FP8 tables, FP8) training and
generation, Megatron-core training backend. The
page's tables give per run: on- or one-step-off-policy, maximum sequence length, average generated
sequence length, GPUs, G-GBS (responses generated per step), T-GBS (responses per optimizer step),
the generation [TP, PP] and training [TP, CP, EP, PP] layouts and the total step time (training,
generation, log-probs and refit). Each configuration (model, mode, GPUs, layout, precision) is taken
at its latest published time: the "NeMo RL v0.6" tables (DGX-H100 and GB200-NVL72) (read 2026-12-01 at the
repository's commit 7ea279abfbeb698b092856d0dab61e7cf39bc909, the page last changed at aea463dd) for
the MoE runs; the "Nemo RL v0.5" tables (DGX-H100 BF16 and FP8, GB200-NVL72 BF16; commit 9dbd9adc,
in place 2026-01-20 to 2026-04-28) for the dense Llama-3.1-8B and Qwen3-32B runs v0.6 no longer
lists; the "Nemo RL v0.4" table (commit 06beed91bac98a2c39a19435f6bbbbe71aa45720) for the one
configuration published only there (Llama-3.1-8B one-step-off training at PP 2). DeepSeek-V3 (multi-head latent
attention, three dense layers, 256 routed experts and a shared one: ``polytrace/data/models.json``)
is priced with the recipes as they stood when the v0.6 table was published (commit 69c7ca11: 32
prompts x 16, no speculative decoding, MTP off in training). The 8-step-off run (async GRPO with
``max_trajectory_age_steps`` 8: up to 8 batches of prompts in flight, so the engines stay fed
across weight updates) is priced as NeMo RL's stream: ``--mode fully-async --staleness 7``
(``polytrace/stepmodel/frameworks.py``), on its recipe's split (generation on 8 of its 24 nodes).
Left out: Nemotron-3-Nano (hybrid Mamba), the DAPO run (dynamic sampling) and the MXFP8 rollouts
(Blackwell's microscaled format, not priced). The FP8 tables' runs generate and train in FP8
(``PublishedRun.fp8``: their recipes set vLLM's ``precision: "fp8"`` and Transformer Engine's
blockwise e4m3 ``fp8_cfg``), priced with ``--rollout-precision fp8 --train-precision fp8``.

Settings the tables do not state come from the performance recipes they link
(``examples/configs/recipes/llm/performance/``, same repository, read 2026-12-01) and the base
config ``examples/configs/grpo_math_1B.yaml``: 32 generations per prompt (16 for DeepSeek-V3);
sequence packing with ``train_micro_batch_size`` 1 (a micro-batch of at most
``max_total_sequence_length`` tokens); activation checkpointing on for Llama-3.1-8B, Qwen3-235B and
DeepSeek-V3, off for the others; vLLM ``gpu_memory_utilization`` as each row's recipe sets it
(``PublishedRun.recipe``; the base config's 0.6 unless the recipe overrides it: 0.8 for most
one-step-off recipes, 0.88 for Qwen3-235B's, 0.4 and 0.6 for the GB200 Qwen3-235B ones, 0.3 for the
GB200 DeepSeek-V3 ones); a reference model (KL penalty 0.01); one-step-off runs on half the GPUs
each for generation and training (``*-async-1off`` recipes: e.g. Qwen3-32B on 4 + 4 nodes,
Qwen3-235B on 16 + 16), with ``in_flight_weight_updates: true`` (the rollout decodes on through the
weight sync) and NeMo RL's packed broadcast, which gathers each pack of tensors while the one before
is broadcast (``nemo_rl/utils/packed_tensor.py``). The colocated (on-policy) runs switch the GPUs
between trainer and engine as NeMo RL's code does at the same commit, whatever the recipe: the vLLM
worker sleeps at level 1 (``nemo_rl/models/generation/vllm/vllm_worker.py``,
``self.llm.sleep(level=1)``: the engine's weights backed up to CPU memory and restored at wake) and
the Megatron worker moves its optimizer state to CPU memory before the refit
(``offload_before_refit``, ``offload_optimizer_for_refit`` defaulting to true in
``nemo_rl/models/megatron/setup.py``) and its parameters after it (``offload_after_refit``), both
back before training (``RunConfig.engine_weights_offload``, ``switch_offload``). Assumed: the
"average sequence length" counts the prompt, taken as 150 tokens (OpenMathInstruct-2 problems in the
CoT prompt template), and each response stops where its own prompt leaves the maximum sequence (NeMo
RL sets vLLM's ``max_model_len`` and ``max_new_tokens`` to ``max_total_sequence_length``):
``--lengths total=``.
"""

from __future__ import annotations

from dataclasses import dataclass

from polytrace.stepmodel.frameworks import apply_framework

PAGE = "https://github.com/NVIDIA-NeMo/RL/blob/main/docs/about/performance-summary.md"
# verl's "Training DeepSeek 671b" page (last updated 08/20/2025), its Benchmark table: DeepSeek-V3
# on 96 GPUs (H20 96 GB, the page's minimum), mean response 1,960, rollout 1,050 s, step 1,700 s;
# the script it names, examples/grpo_trainer/run_deepseek671b_math_megatron_96gb.sh at bd756c15
VERL_DPSK = "https://github.com/volcengine/verl/blob/main/docs/perf/dpsk.md"
TABLES = {"v0.4": f"{PAGE} (Nemo RL v0.4 table, DGX-H100; commit 06beed91, read 2026-12-01)",
          "v0.5": f"{PAGE} (Nemo RL v0.5 H100 BF16 table; commit 9dbd9adc, read 2026-12-02)",
          "v0.5-fp8": f"{PAGE} (Nemo RL v0.5 H100 FP8 table; commit 9dbd9adc, read 2026-12-02)",
          "v0.5-gb200": f"{PAGE} (Nemo RL v0.5 GB200 BF16 table; commit 9dbd9adc, read 2026-12-02)",
          "v0.6": f"{PAGE} (NeMo RL v0.6 H100 BF16 table; commit 7ea279ab, read 2026-12-01)",
          "v0.6-fp8": f"{PAGE} (NeMo RL v0.6 H100 FP8 table; commit 7ea279ab, read 2026-12-02)",
          "v0.6-gb200": f"{PAGE} (NeMo RL v0.6 GB200 BF16 table; commit 7ea279ab, read 2026-12-01)",
          "verl-dpsk": f"{VERL_DPSK} (verl's DeepSeek-V3 benchmark; commit 4c7812c4, read 2026-12-02)"}
SOURCE = PAGE
RECIPES = "https://github.com/NVIDIA-NeMo/RL/tree/7ea279ab/examples/configs/recipes/llm/performance"
PROMPT_MEAN = 150  # assumed (module docstring)
GENERATIONS_PER_PROMPT = 32  # the performance recipes' num_generations_per_prompt


@dataclass(frozen=True)
class PublishedRun:
    name: str
    model: str
    mode: str  # "sync" (on-policy, colocated), "one-step-off" or "fully-async" (NeMo RL's K-step-off stream)
    gpus: int
    max_seq: int
    avg_seq: int  # "G-Average Seq len"
    responses_per_step: int  # G-GBS
    train_batch: int  # T-GBS, responses per optimizer step
    rollout_tp: int
    train_tp: int
    train_cp: int
    train_ep: int
    train_pp: int
    checkpointing: bool
    step_s: float  # "Total Step time(s)"
    table: str = "v0.6"  # TABLES key
    recipe: str = ""  # the performance recipe the table links (RECIPES folder), read for what the table omits
    gen_memory: float = 0.6  # the recipe's vllm_cfg.gpu_memory_utilization (grpo_math_1B.yaml's 0.6 unless it sets one)
    gpu: str = "h100"  # the table's system: DGX-H100 or GB200-NVL72
    n: int = GENERATIONS_PER_PROMPT  # the recipe's num_generations_per_prompt
    # the FP8 tables: generation FP8 (vLLM precision "fp8") and training FP8 (Transformer Engine,
    # blockwise e4m3), each recipe's ``fp8_cfg`` and ``vllm_cfg.precision``
    fp8: bool = False
    # A run of another framework (verl's published benchmarks): its settings in verl's key names as
    # its script sets them (``--set``), estimate keywords with no verl key, and its lengths as its
    # table states them (verl's: the mean response, the response cap, prompts of PROMPT_MEAN).
    framework: str = "nemo-rl"
    settings: tuple = ()  # ("verl key", value) pairs
    extra: tuple = ()  # ("estimate keyword", value) pairs
    stated_lengths: str = ""

    @property
    def response_mean(self) -> float:
        """The mean response the table states: NeMo RL's average sequence counts the prompt
        (PROMPT_MEAN assumed), verl's mean response length does not."""
        return self.avg_seq - PROMPT_MEAN if self.framework == "nemo-rl" else self.avg_seq

    def lengths(self) -> str:
        """The run's ``--lengths``: the table's mean (less the assumed prompt) under its sequence
        cap, each response within what its own prompt leaves (vLLM's ``max_model_len``: NeMo RL
        sets it and ``max_new_tokens`` to ``max_total_sequence_length``)."""
        if self.stated_lengths:
            return self.stated_lengths
        return f"mean={self.avg_seq - PROMPT_MEAN},total={self.max_seq},prompt={PROMPT_MEAN}"

    def estimate_kw(self, max_prompt: int, max_response: int) -> dict:
        """The keywords of ``polytrace.stepmodel.modes.mode_estimate`` for this run, with prompts
        of at most ``max_prompt`` tokens and responses of at most ``max_response`` (the longest
        any prompt's share of the sequence cap allows)."""
        kw = dict(mode=self.mode, n=self.n, responses_per_step=self.responses_per_step,
                  train_batch=self.train_batch, rollout_tp=self.rollout_tp, strategy="megatron",
                  train_tp=self.train_tp, train_pp=self.train_pp, train_cp=self.train_cp, train_ep=self.train_ep,
                  micro_batch_tokens=self.max_seq, max_prompt_len=max_prompt, max_response_len=max_response,
                  mem_fraction=self.gen_memory, gradient_checkpointing=self.checkpointing,
                  rollout_precision="fp8" if self.fp8 else "bf16", train_precision="fp8" if self.fp8 else "bf16")
        if self.mode == "one-step-off":  # the async recipes: engines of their own on half the GPUs
            kw.update(rollout_gpus=self.gpus // 2)
        if self.settings:  # the script's verl settings, as ``estimate --set`` reads them
            from polytrace.calibrate.settings import estimate_arguments, parse_settings

            args, fields = estimate_arguments(parse_settings([f"{k}={v}" for k, v in self.settings]))
            kw.update(args)
            kw["run_fields"] = {**(kw.get("run_fields") or {}), **fields}
        kw.update(dict(self.extra))
        # the framework's mechanics (module docstring), as ``estimate --framework`` applies them;
        # NeMo RL's: colocated, the switch's offloads; one-step-off, in-flight updates and the
        # pipelined sync
        apply_framework(self.framework, self.mode, kw, kw)
        return kw


RUNS = (
    PublishedRun("llama3.1-8b on-policy", "llama-3.1-8b", "sync", 16, 4096, 1019, 2048, 512, 1, 1, 1, 1, 2, True,
                 92.8, "v0.5", recipe="grpo-llama3.1-8b-instruct-2n8g", gen_memory=0.6),
    # v0.4's one-step-off run trained at PP 2; v0.5's (below) at PP 1: two configurations
    PublishedRun("llama3.1-8b 1-step-off pp2", "llama-3.1-8b", "one-step-off", 16, 4096, 1129, 2048, 512, 1, 1, 1, 1,
                 2, True, 74.6, "v0.4", recipe="grpo-llama3.1-8b-instruct-2n8g-async-1off", gen_memory=0.8),
    PublishedRun("llama3.1-8b 1-step-off", "llama-3.1-8b", "one-step-off", 16, 4096, 1123, 2048, 512, 1, 1, 1, 1, 1,
                 True, 64.8, "v0.5", recipe="grpo-llama3.1-8b-instruct-2n8g-async-1off", gen_memory=0.8),
    PublishedRun("llama3.1-8b 1-step-off fp8", "llama-3.1-8b", "one-step-off", 16, 4096, 1128, 2048, 512, 1, 1, 1,
                 1, 1, True, 53.0, "v0.5-fp8", recipe="grpo-llama3.1-8b-instruct-2n8g-fp8-async-1off",
                 gen_memory=0.8, fp8=True),
    PublishedRun("qwen3-32b on-policy", "qwen3-32b", "sync", 32, 4096, 3251, 2048, 512, 4, 4, 1, 1, 4, False, 376.0,
                 "v0.5", recipe="grpo-qwen3-32b-4n8g", gen_memory=0.6),
    PublishedRun("qwen3-32b 1-step-off", "qwen3-32b", "one-step-off", 64, 4096, 3252, 2048, 512, 4, 4, 1, 1, 4, False,
                 200.0, "v0.5", recipe="grpo-qwen3-32b-8n8g-async-1off", gen_memory=0.8),
    PublishedRun("qwen3-30b-a3b on-policy", "qwen3-30b-a3b", "sync", 32, 4096, 3203, 2048, 512, 2, 1, 1, 8, 1, False,
                 192.0,
                 recipe="grpo-qwen3-30ba3b-4n8g", gen_memory=0.6),
    PublishedRun("qwen3-30b-a3b 1-step-off", "qwen3-30b-a3b", "one-step-off", 32, 4096, 3201, 2048, 512, 2, 1, 1, 8,
                 2, False, 152.0,
                 recipe="grpo-qwen3-30ba3b-4n8g-async-1off", gen_memory=0.8),
    # the 8-step-off recipe: 24 nodes, generation on 8 (64 GPUs, TP 2 engines), training on 16 at
    # EP 8, its trajectories up to 8 weight versions old (module docstring)
    PublishedRun("qwen3-30b-a3b 8-step-off", "qwen3-30b-a3b", "fully-async", 192, 4096, 3206, 2048, 512, 2, 1, 1, 8,
                 1, False, 34.5, recipe="grpo-qwen3-30ba3b-24n8g-async-8off", gen_memory=0.8,
                 extra=(("rollout_gpus", 64), ("staleness", 7.0))),
    PublishedRun("qwen3-235b on-policy 128", "qwen3-235b-a22b", "sync", 128, 8192, 5698, 512, 512, 16, 2, 2, 16, 8,
                 True, 395.0,
                 recipe="grpo-qwen3-235b-16n8g", gen_memory=0.6),
    PublishedRun("qwen3-235b on-policy 256", "qwen3-235b-a22b", "sync", 256, 8192, 5713, 512, 512, 16, 2, 2, 16, 8,
                 True, 312.0,
                 recipe="grpo-qwen3-235b-32n8g", gen_memory=0.6),
    PublishedRun("qwen3-235b 1-step-off", "qwen3-235b-a22b", "one-step-off", 256, 8192, 5721, 512, 512, 8, 4, 1, 16,
                 8, True, 231.0,
                 recipe="grpo-qwen3-235b-32n8g-async-1off", gen_memory=0.88),
    # DeepSeek-V3 (671B, MLA, 3 dense layers, 256 routed experts + 1 shared): 32 prompts x 16, the recipes
    # as they stood when the v0.6 table was published (commit 69c7ca11: no speculative decoding, MTP off in
    # training); the 512-GPU recipe sets EP 32 where the table states EP 16 (the table's layout is priced)
    PublishedRun("deepseek-v3 on-policy 256", "deepseek-v3", "sync", 256, 1536, 701, 512, 512, 32, 1, 1, 16, 16,
                 True, 134.0, recipe="grpo-deepseek-v3-32n8g", gen_memory=0.6, n=16),
    PublishedRun("deepseek-v3 on-policy 512", "deepseek-v3", "sync", 512, 1536, 697, 512, 512, 32, 1, 1, 16, 16,
                 True, 111.0, recipe="grpo-deepseek-v3-64n8g", gen_memory=0.6, n=16),
    PublishedRun("deepseek-v3 1-step-off", "deepseek-v3", "one-step-off", 512, 1536, 710, 512, 512, 32, 1, 1, 16, 16,
                 True, 64.1, recipe="grpo-deepseek-v3-64n8g-async-1off", gen_memory=0.8, n=16),
    PublishedRun("deepseek-v3 1-step-off fp8", "deepseek-v3", "one-step-off", 512, 1536, 721, 512, 512, 16, 1, 1, 16,
                 16, True, 59.2, "v0.6-fp8", recipe="grpo-deepseek-v3-64n8g-fp8-async-1off", gen_memory=0.8, n=16,
                 fp8=True),
    # GB200-NVL72 (4 GPUs a compute tray, one NVLink domain of 72): the "n4g" recipes; the dense runs
    # from the v0.5 table (v0.6 lists none)
    PublishedRun("gb200 llama3.1-8b on-policy", "llama-3.1-8b", "sync", 8, 4096, 1066, 2048, 512, 1, 1, 1, 1, 1, True,
                 91.0, "v0.5-gb200", recipe="grpo-llama3.1-8b-instruct-2n4g", gen_memory=0.6, gpu="gb200"),
    PublishedRun("gb200 llama3.1-8b 1-step-off", "llama-3.1-8b", "one-step-off", 8, 4096, 1107, 2048, 512, 1, 1, 1, 1,
                 1, True, 71.1, "v0.5-gb200", recipe="grpo-llama3.1-8b-instruct-2n4g-async-1off", gen_memory=0.8,
                 gpu="gb200"),
    PublishedRun("gb200 qwen3-32b on-policy", "qwen3-32b", "sync", 16, 4096, 3253, 2048, 512, 1, 2, 1, 1, 1, False,
                 381.0, "v0.5-gb200", recipe="grpo-qwen3-32b-4n4g", gen_memory=0.6, gpu="gb200"),
    PublishedRun("gb200 qwen3-32b 1-step-off", "qwen3-32b", "one-step-off", 32, 4096, 3258, 2048, 512, 1, 2, 1, 1, 1,
                 False, 210.0, "v0.5-gb200", recipe="grpo-qwen3-32b-8n4g-async-1off", gen_memory=0.8, gpu="gb200"),
    PublishedRun("gb200 deepseek-v3 on-policy 128", "deepseek-v3", "sync", 128, 1536, 711, 512, 512, 32, 1, 1, 16, 8,
                 True, 108.0, "v0.6-gb200", recipe="grpo-deepseek-v3-32n4g", gen_memory=0.3, gpu="gb200", n=16),
    PublishedRun("gb200 deepseek-v3 on-policy 256", "deepseek-v3", "sync", 256, 1536, 700, 512, 512, 32, 1, 1, 16, 8,
                 True, 98.7, "v0.6-gb200", recipe="grpo-deepseek-v3-64n4g", gen_memory=0.3, gpu="gb200", n=16),
    PublishedRun("gb200 deepseek-v3 1-step-off", "deepseek-v3", "one-step-off", 256, 1536, 708, 512, 512, 16, 1, 1,
                 16, 8, True, 61.7, "v0.6-gb200", recipe="grpo-deepseek-v3-64n4g-async-1off", gen_memory=0.8,
                 gpu="gb200", n=16),
    PublishedRun("gb200 qwen3-235b on-policy 64", "qwen3-235b-a22b", "sync", 64, 8192, 5709, 512, 512, 8, 2, 2, 16, 4,
                 True, 286.0, "v0.6-gb200", recipe="grpo-qwen3-235b-16n4g", gen_memory=0.4, gpu="gb200"),
    PublishedRun("gb200 qwen3-235b on-policy 128", "qwen3-235b-a22b", "sync", 128, 8192, 5693, 512, 512, 8, 2, 2, 16,
                 4, True, 345.0, "v0.6-gb200", recipe="grpo-qwen3-235b-32n4g", gen_memory=0.6, gpu="gb200"),
    PublishedRun("gb200 qwen3-235b 1-step-off", "qwen3-235b-a22b", "one-step-off", 128, 8192, 5705, 512, 512, 8, 4, 1,
                 16, 4, True, 278.0, "v0.6-gb200", recipe="grpo-qwen3-235b-32n4g-async-1off", gen_memory=0.88,
                 gpu="gb200"),
    PublishedRun("gb200 qwen3-30b-a3b on-policy", "qwen3-30b-a3b", "sync", 16, 4096, 3199, 2048, 512, 1, 1, 1, 16, 1,
                 False, 221.0, "v0.6-gb200", recipe="grpo-qwen3-30ba3b-4n4g", gpu="gb200"),
    # the table prints training EP 16 for this row; its trainer has 8 GPUs: the recipe's EP 8 is priced
    PublishedRun("gb200 qwen3-30b-a3b 1-step-off", "qwen3-30b-a3b", "one-step-off", 16, 4096, 3197, 2048, 512, 1, 1, 1,
                 8, 1, False, 301.0, "v0.6-gb200", recipe="grpo-qwen3-30ba3b-4n4g-async-1off", gen_memory=0.8,
                 gpu="gb200"),
    # verl's DeepSeek-V3 benchmark (VERL_DPSK): 96 H20s at the docs' recommended settings for 96 GPUs
    # (TP 8, PP 12, EP 8, optimizer offload fraction 1, the CPU optimizer), the rest from the script:
    # 96 prompts x 8, mini-batch 32 prompts, response cap 1204 x 8 = 9,632 tokens (prompt cap 2,048),
    # dynamic batches of 11,680 tokens, full recomputation, a KL-loss reference, vLLM at TP 32 in eager
    # mode with gpu_memory_utilization 0.6, actor parameters, gradients and optimizer and the
    # reference offloaded between stages; the table's mean response 1,960 tokens (its "avg / max"
    # column: the response's mean and cap, prompts of PROMPT_MEAN assumed)
    PublishedRun("verl deepseek-v3 on-policy 96", "deepseek-v3", "sync", 96, 9632, 1960, 768, 256, 32, 8, 1, 8, 12,
                 True, 1700.0, "verl-dpsk", recipe="run_deepseek671b_math_megatron_96gb.sh", gen_memory=0.6,
                 gpu="h20", n=8, framework="verl", stated_lengths=f"mean=1960,max=9632,prompt={PROMPT_MEAN}",
                 settings=(("actor_rollout_ref.rollout.enforce_eager", "true"),
                           ("actor_rollout_ref.ref.megatron.param_offload", "true"),
                           ("actor_rollout_ref.actor.megatron.param_offload", "true"),
                           ("actor_rollout_ref.actor.megatron.optimizer_offload", "true"),
                           ("actor_rollout_ref.actor.optim.override_optimizer_config.optimizer_cpu_offload", "true"),
                           ("actor_rollout_ref.actor.optim.override_optimizer_config.optimizer_offload_fraction",
                            "1.0"),
                           ("actor_rollout_ref.actor.optim.override_optimizer_config.overlap_cpu_optimizer_d2h_h2d",
                            "true")),
                 extra=(("micro_batch_tokens", 2048 + 9632), ("max_prompt_len", 2048))),
)


# **The development set.** Every row above shaped the model: 28 commits before issue 36 cite how
# they moved these rows (the refit price was introduced to pull the MoE rows inside 2x; the
# colocated switch, the TP all-reduce latency, the stream's mechanics each were checked on them),
# so their agreement is in-sample, never validation of the model. Constants derived from a row:
# ``Efficiency.refit_s_per_expert_tensor`` is the median of published refits three of which are
# NeMo RL's own (``efficiency.REFIT_EXPERT_TENSOR_MEASUREMENTS``: the GB200/B200 MoE refits of pull
# request #3294 and the DeepSeek-V3 NCCL benchmark, the same framework and systems as the table's
# MoE rows); ``Efficiency.refit_s_per_expert_tensor_bucketed`` comes from verl's checkpoint-engine
# ablation's Qwen3-30B-A3B row (4.38 s), which ``tests/stepmodel/test_compose_modes.py`` therefore no longer
# tests it against. The logs the priors are fitted on (``calibrate/folds.py``) are the only held-out
# evidence: their group-held-out scores (docs/step-model.md) are the model's accuracy.
DEVELOPMENT_SET = frozenset(r.name for r in RUNS)
# Rows whose step carries a constant derived from NeMo RL's own measurements: every NeMo RL MoE run,
# the colocated ones through their refit and the separated ones through their weight sync (both
# price the routed-expert tensors one at a time: ``refit.expert_tensor_seconds``; 9.7-23.4 s a sync
# for these models). They stay in the table, marked and scored, but no test asserts on them
# (``ASSERTED``): the constant keeps NeMo RL's own figures (0.32-0.52 ms a tensor) rather than
# verl's two (0.67 and 0.88 ms, H20, its sync less our price of its bytes), which would price
# NeMo RL's Megatron-Bridge export with another framework's weight loader only to make these rows
# look held out. verl's DeepSeek-V3 row also pays the constant but none of its sources is that run.
REFIT_SOURCED = ("Efficiency.refit_s_per_expert_tensor (in the refit or the weight sync): a median three of whose "
                 "five refits are NeMo RL's own")
MOE_PREFIXES = ("qwen3-30b", "qwen3-235b", "deepseek")
DERIVED_FROM = {r.name: REFIT_SOURCED for r in RUNS if r.framework == "nemo-rl" and r.model.startswith(MOE_PREFIXES)}
# the rows the pass/fail tests assert on: those no constant was derived from
ASSERTED = tuple(r for r in RUNS if r.name not in DERIVED_FROM)


def estimate_run(run: PublishedRun, steps=range(2)) -> dict:
    """The zero-shot estimate of ``run`` (no calibration, no measured timings: the shared priors
    of ``polytrace.stepmodel.efficiency`` through the estimate's defaults)."""
    from polytrace.stepmodel.efficiency import PRIORS
    from polytrace.stepmodel.modes import mode_estimate
    from polytrace.stepmodel.workloads import stated_lengths_profile

    prof = stated_lengths_profile(run.lengths(), model=run.model)
    kw = run.estimate_kw(prof.config.max_prompt_len, prof.config.max_response_len)
    return mode_estimate(prof, run.model, run.gpu, run.gpus, steps=steps, results_root="/nonexistent",
                         calibration=PRIORS, **kw)


def markdown_table(steps=range(2)) -> str:
    """The docs/step-model.md table of the runs and their zero-shot estimates (every row is in the
    development set, ``DEVELOPMENT_SET``; those a constant was derived from are marked * and scored,
    not asserted), then the counts within 30% of the asserted rows and of the marked ones."""
    lines = ["| run (development set; * a constant derived from it: scored, not asserted) | table | GPUs "
             "| responses / step / optimizer step | avg / max sequence | layout | published s | "
             "estimate s | ratio | error |", "|---|---|---|---|---|---|---|---|---|---|"]
    within = {True: [], False: []}
    for r in RUNS:
        est = estimate_run(r, steps).summary["mean_step_s"]
        layout = f"gen TP{r.rollout_tp}; train TP{r.train_tp} CP{r.train_cp} EP{r.train_ep} PP{r.train_pp}"
        ratio = est / r.step_s
        mark = " *" if r.name in DERIVED_FROM else ""
        lines.append(f"| {r.name}{mark} | {r.table} | {r.gpus} | {r.responses_per_step} / {r.train_batch} | "
                     f"{r.avg_seq} / {r.max_seq} | {layout} | {r.step_s:g} | {est:.0f} | {ratio:.2f} | "
                     f"{100 * (ratio - 1):+.0f}% |")
        within[r.name in DERIVED_FROM].append(abs(ratio - 1) <= 0.30)
    lines += ["", f"Within 30%: {sum(within[False])} of the {len(within[False])} asserted rows; "
                  f"{sum(within[True])} of the {len(within[True])} marked * (scored, not asserted)."]
    return "\n".join(lines)


if __name__ == "__main__":  # PYTHONPATH=.:tests python tests/published_runs.py (after the priors change)
    import warnings

    warnings.simplefilter("ignore")
    print(markdown_table())
