"""``Profile``: a fitted, seeded model of one workload's RL batches.

Three generative models, chosen by the profile file's ``model`` field:

``copula`` (fitted from a trace by ``fit_profile``; single- and multi-turn)
    Response lengths follow the trace's own quantile table (with the exact point mass at the
    length cap). The n responses of a prompt are tied by a Gaussian copula: the normal score of
    response j of prompt i is ``sqrt(rho) * g_i + sqrt(1 - rho) * e_ij``, so ``rho`` (the
    intra-class correlation of normal scores) sets how alike a group's lengths are: the
    within-group spread that GRPO's advantage and the packer both see. Prompt lengths follow their
    own table, correlated with the group factor ``g_i`` by ``prompt_corr``. Multi-turn profiles add
    turn counts (conditioned on the response-length decile), per-turn completion and tool-output
    tokens (rescaled so a trajectory's turns add up to its response length), tool calls and tool
    latency.
``gmm`` (Model B math, from PolyTrace's fitted parameters)
    A Gaussian mixture over (prompt, response) lengths. A prompt draws a component and its
    length; its n responses draw from that component's conditional distribution given the prompt
    length. Responses are clipped to the cap.
``tooluse`` (Model B tool use)
    Per trajectory a call count from the recorded distribution, then per-call (input, output)
    lengths from the per-count Gaussian mixtures (counts 2-5) or single Gaussians (other counts).

Sampling is vectorised numpy. The random stream is ``SeedSequence([seed, step, crc32(name)])``
into PCG64: the same (profile, step, seed) gives the same batch on any machine.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from ...errors import PolytraceError
from ..trace.batch import Batch, TurnTable
from ..trace.fields import MAX_TOKENS, read_regular_file
from .drift import DriftCurve
from .quantiles import QuantileTable

FORMAT = "polytrace.profile"
VERSION = 1
# Bounds of a profile file's batch config: lengths as in traces (``MAX_TOKENS``, int32), and at
# most 4M sequences a step (2,000x the largest built-in profile's 2,048), so a sampled step fits in
# memory.
MAX_SEQUENCES_PER_STEP = 1 << 22


@dataclass(frozen=True)
class BatchConfig:
    prompts_per_step: int
    n: int  # responses per prompt
    max_prompt_len: int
    max_response_len: int

    def __post_init__(self):
        for k in ("prompts_per_step", "n", "max_prompt_len", "max_response_len"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise PolytraceError(f"batch config {k} must be a positive integer, got {str(v)[:40]!r}")
            if v > MAX_TOKENS:
                raise PolytraceError(f"batch config {k} of {v} is above the limit of {MAX_TOKENS:,}")
        if self.prompts_per_step * self.n > MAX_SEQUENCES_PER_STEP:
            raise PolytraceError(f"batch config of {self.prompts_per_step} prompts x {self.n} responses is above "
                                 f"the limit of {MAX_SEQUENCES_PER_STEP:,} sequences per step")

    def to_json(self) -> dict:
        return {k: int(getattr(self, k)) for k in ("prompts_per_step", "n", "max_prompt_len", "max_response_len")}


@dataclass
class Profile:
    name: str
    description: str
    kind: str  # "single" | "multiturn"
    model: str  # "copula" | "gmm" | "tooluse"
    config: BatchConfig
    params: dict
    drift: DriftCurve | None = None
    source: str = ""
    fit_stats: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.model not in _SAMPLERS:
            raise PolytraceError(f"profile {self.name[:80]!r}: unknown model {str(self.model)[:40]!r}")
        if self.kind not in ("single", "multiturn"):
            raise PolytraceError(f"profile {self.name[:80]!r}: kind must be 'single' or 'multiturn', "
                                 f"got {str(self.kind)[:40]!r}")
        self._compiled = None

    # ------------------------------------------------------------------ sampling

    def sample(self, step: int = 0, seed: int = 0, prompts: int | None = None) -> Batch:
        """One step's batch: ``prompts`` prompt groups (default: the profile's prompts per step)
        of ``config.n`` responses each."""
        if prompts is None:
            prompts = self.config.prompts_per_step
        if isinstance(prompts, bool) or not isinstance(prompts, (int, np.integer)) or prompts < 0:
            raise PolytraceError(f"prompts must be a non-negative integer, got {prompts!r}")
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0:
            raise PolytraceError(f"step must be a non-negative integer, got {step!r}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise PolytraceError(f"seed must be a non-negative integer, got {seed!r}")
        if prompts * self.config.n > MAX_SEQUENCES_PER_STEP:  # refused before anything is allocated
            raise PolytraceError(f"{prompts} prompts x {self.config.n} responses is above the limit of "
                                 f"{MAX_SEQUENCES_PER_STEP:,} sequences per step")
        rng = np.random.Generator(np.random.PCG64(
            np.random.SeedSequence([int(seed), int(step), zlib.crc32(self.name.encode())])))
        scale = self.drift.at(step) if self.drift is not None else 1.0
        batch = _SAMPLERS[self.model](self, rng, int(prompts), scale)
        batch.step = int(step)
        batch.meta = {"profile": self.name, "seed": int(seed), "step": int(step), "drift_scale": scale}
        return batch

    def sample_steps(self, steps, seed: int = 0, prompts: int | None = None) -> list[Batch]:
        return [self.sample(s, seed, prompts) for s in steps]

    def with_drift(self, drift: DriftCurve | None) -> Profile:
        return replace(self, drift=drift)

    @property
    def compiled(self) -> dict:
        """Parsed parameter tables, built once per profile object."""
        if self._compiled is None:
            self._compiled = _COMPILERS[self.model](self.params)
        return self._compiled

    # ------------------------------------------------------------------ persistence

    def to_json(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "name": self.name, "description": self.description,
                "kind": self.kind, "model": self.model, "config": self.config.to_json(),
                "drift": self.drift.to_json() if self.drift is not None else None,
                "source": self.source, "fit_stats": self.fit_stats, "params": self.params}

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1) + "\n"

    @classmethod
    def from_json(cls, obj: dict, where: str = "profile") -> Profile:
        if not isinstance(obj, dict) or obj.get("format") != FORMAT:
            raise PolytraceError(f"{where}: not a polytrace profile (missing \"format\": \"{FORMAT}\")")
        try:
            profile = cls(
                name=str(obj["name"]), description=str(obj.get("description", "")), kind=obj["kind"],
                model=obj["model"], config=BatchConfig(**obj["config"]), params=obj["params"],
                drift=DriftCurve.from_json(obj.get("drift")), source=obj.get("source", ""),
                fit_stats=obj.get("fit_stats", {}))
            profile.compiled  # noqa: B018 - validate the tables now, not at first sample
        except PolytraceError as exc:
            raise PolytraceError(f"{where}: {exc}") from None
        except KeyError as exc:  # str(KeyError) is the key's repr in quotes: say what is missing
            raise PolytraceError(f"{where}: malformed profile: missing field {str(exc.args[0])[:80]!r}") from None
        except (TypeError, ValueError, IndexError, OverflowError) as exc:
            raise PolytraceError(f"{where}: malformed profile: {str(exc)[:200]}") from None
        return profile

    @classmethod
    def load(cls, path) -> Profile:
        p = Path(path)
        return cls.loads(read_regular_file(p), where=str(p))

    @classmethod
    def loads(cls, text: str, where: str = "profile") -> Profile:
        """A profile from its JSON text. NaN and infinities are refused (no field may hold one)."""
        try:
            obj = json.loads(text, parse_constant=_refuse_constant)
        except RecursionError:
            raise PolytraceError(f"{where}: JSON nested too deeply") from None
        except ValueError as exc:
            line = f":{exc.lineno}" if isinstance(exc, json.JSONDecodeError) else ""
            raise PolytraceError(f"{where}{line}: invalid JSON: {getattr(exc, 'msg', exc)}") from None
        return cls.from_json(obj, where=where)


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a valid value in a profile")


# ====================================================================== copula model


def _compile_copula(params: dict) -> dict:
    c = {
        "response": QuantileTable.from_json(params["response"]),
        "prompt": QuantileTable.from_json(params["prompt"]),
        "rho": float(params["rho"]),
        "prompt_corr": float(params.get("prompt_corr", 0.0)),
    }
    if not 0.0 <= c["rho"] < 1.0 or not -1.0 < c["prompt_corr"] < 1.0:
        raise ValueError("rho must be in [0, 1) and prompt_corr in (-1, 1)")
    mt = params.get("multiturn")
    if mt is not None:
        pmf = _pmf(mt["turns_pmf_by_decile"], "turns_pmf_by_decile", ndim=2)
        c["turn_cdf"] = np.cumsum(pmf / pmf.sum(axis=1, keepdims=True), axis=1)
        c["decile_z"] = np.asarray(mt["decile_z"], dtype=np.float64)
        if c["decile_z"].shape != (pmf.shape[0] - 1,) or not np.all(np.isfinite(c["decile_z"])) \
                or np.any(np.diff(c["decile_z"]) < 0):
            raise ValueError("decile_z must hold one finite, sorted score fewer than the rows of turns_pmf_by_decile")
        c["completion"] = QuantileTable.from_json(mt["completion_tokens"])
        c["tool_tokens"] = QuantileTable.from_json(mt["tool_tokens"])
        c["tool_latency"] = QuantileTable.from_json(mt["tool_latency_s"])
        calls = _pmf(mt["calls_per_tool_turn_pmf"], "calls_per_tool_turn_pmf", ndim=1)
        c["calls_cdf"] = np.cumsum(calls / calls.sum())
    return c


def _pmf(value, what: str, ndim: int) -> np.ndarray:
    """Probabilities as read from a profile file: finite, non-negative, each row summing above 0."""
    p = np.asarray(value, dtype=np.float64)
    if p.ndim != ndim or p.size == 0 or not np.all(np.isfinite(p)) or np.any(p < 0) \
            or np.any(p.sum(axis=-1) <= 0):
        raise ValueError(f"{what} must be a non-empty {ndim}-d table of finite, non-negative weights, each row "
                         f"summing above 0")
    return p


def _sample_copula(profile: Profile, rng: np.random.Generator, prompts: int, scale: float) -> Batch:
    c = profile.compiled
    cfg = profile.config
    n = cfg.n
    g = rng.standard_normal(prompts)
    e = rng.standard_normal((prompts, n))
    ep = rng.standard_normal(prompts)
    rho = c["rho"]
    z = (np.sqrt(rho) * g[:, None] + np.sqrt(1.0 - rho) * e).ravel()
    resp = c["response"].sample(z)
    if scale != 1.0:
        resp = resp * scale
    resp = np.clip(np.rint(resp), 1, cfg.max_response_len).astype(np.int64)
    r = c["prompt_corr"]
    zp = r * g + np.sqrt(1.0 - r * r) * ep
    prompt = np.clip(np.rint(c["prompt"].sample(zp)), 1, cfg.max_prompt_len).astype(np.int64)
    group_ids = np.repeat(np.arange(prompts, dtype=np.int64), n)
    batch = Batch(prompt_lens=np.repeat(prompt, n), response_lens=resp, group_ids=group_ids,
                  capped=resp >= cfg.max_response_len, max_response_len=cfg.max_response_len)
    if "turn_cdf" in c:
        _add_turns(batch, c, rng, z)
    return batch


def _add_turns(batch: Batch, c: dict, rng: np.random.Generator, z: np.ndarray) -> None:
    """Turns, tool calls and latencies for a multi-turn batch whose response lengths are set.

    A trajectory draws its turn count given its response-length decile, then per turn a
    completion length and (all but the last turn) tool calls, each with appended tokens and a
    latency. The drawn parts are scaled to add up to the response length exactly (floors, with
    the rounding remainder going to the last turn's completion)."""
    n_seq = len(batch)
    decile = np.searchsorted(c["decile_z"], z, side="right")
    u = rng.random(n_seq)
    n_turns = 1 + (u[:, None] > c["turn_cdf"][decile, :-1]).sum(axis=1)
    m = int(n_turns.sum())
    seq = np.repeat(np.arange(n_seq, dtype=np.int64), n_turns)
    ends = np.cumsum(n_turns)
    starts = ends - n_turns
    is_first = np.zeros(m, dtype=bool)
    is_first[starts] = True
    has_tool = np.ones(m, dtype=bool)
    has_tool[ends - 1] = False
    completion = c["completion"].sample(rng.standard_normal(m))
    k = int(has_tool.sum())
    calls = np.zeros(m, dtype=np.int64)
    calls[has_tool] = np.minimum(1 + np.searchsorted(c["calls_cdf"], rng.random(k), side="right"),
                                 len(c["calls_cdf"]))
    tool = np.zeros(m)
    latency = np.zeros(m)
    tool[has_tool] = c["tool_tokens"].sample(rng.standard_normal(k)) * calls[has_tool]
    latency[has_tool] = c["tool_latency"].sample(rng.standard_normal(k)) * calls[has_tool]
    totals = np.bincount(seq, weights=completion + tool, minlength=n_seq)
    factor = (batch.response_lens / np.maximum(totals, 1e-9))[seq]
    comp_tok = np.floor(completion * factor).astype(np.int64)
    tool_tok = np.floor(tool * factor).astype(np.int64)
    step_tok = comp_tok + tool_tok
    remainder = batch.response_lens - np.bincount(seq, weights=step_tok, minlength=n_seq).astype(np.int64)
    comp_tok[ends - 1] += remainder
    step_tok[ends - 1] += remainder
    # Context before each turn: the prompt plus everything earlier turns added.
    running = np.cumsum(step_tok) - step_tok
    context_before = running - running[starts][seq]
    prompt_tokens = batch.prompt_lens[seq] + context_before
    # The prefix cache holds the previous turn's context and completion (minus the last token,
    # which is re-fed), as recorded by SGLang in the Search-R1 trace.
    cached = np.zeros(m, dtype=np.int64)
    cached[1:] = prompt_tokens[:-1] + comp_tok[:-1] - 1
    cached[is_first] = 0
    batch.turns = TurnTable(seq=seq, prompt_tokens=prompt_tokens, cached_tokens=np.maximum(cached, 0),
                            completion_tokens=comp_tok, tool_latency_s=latency, tool_tokens=tool_tok)
    batch.loss_lens = np.bincount(seq, weights=comp_tok, minlength=n_seq).astype(np.int64)


# ====================================================================== Model B: Gaussian mixtures

# Bounds on a mixture read from a file: a mean or standard deviation of 2**31 tokens is past any
# length a trace may hold; 1,000 calls per session is 100x the most in the fitted Model B data (10).
_MAX_MOMENT = float(2 ** 31)
_MAX_CALLS = 1000


def _check_moments(mu: np.ndarray, cov: np.ndarray, what: str) -> None:
    if not (np.all(np.isfinite(mu)) and np.all(np.isfinite(cov))) or np.abs(mu).max() > _MAX_MOMENT \
            or np.abs(cov).max() > _MAX_MOMENT ** 2:
        raise ValueError(f"{what} must be finite and below {_MAX_MOMENT:g} tokens")


def _compile_gmm(params: dict) -> dict:
    w = _pmf(params["weights"], "gmm weights", ndim=1)
    mu = np.asarray(params["means"], dtype=np.float64)
    cov = np.asarray(params["covariances"], dtype=np.float64)
    if mu.shape != (w.size, 2) or cov.shape != (w.size, 2, 2):
        raise ValueError("gmm needs weights [k], means [k, 2], covariances [k, 2, 2]")
    _check_moments(mu, cov, "gmm means and covariances")
    var_in = cov[:, 0, 0]
    # Checked before dividing: a zero input variance (a 0 or a JSON false in the file) would print
    # numpy's divide-by-zero warning ahead of the one-line error.
    if np.any(var_in <= 0):
        raise ValueError("gmm covariances must be positive definite")
    slope = cov[:, 0, 1] / var_in
    cond_var = cov[:, 1, 1] - cov[:, 0, 1] ** 2 / var_in
    if np.any(cond_var <= 0):
        raise ValueError("gmm covariances must be positive definite")
    return {"cdf": np.cumsum(w / w.sum()), "mu": mu, "sd_in": np.sqrt(var_in), "slope": slope,
            "cond_sd": np.sqrt(cond_var)}


def _sample_gmm(profile: Profile, rng: np.random.Generator, prompts: int, scale: float) -> Batch:
    c = profile.compiled
    cfg = profile.config
    n = cfg.n
    comp = np.minimum(np.searchsorted(c["cdf"], rng.random(prompts), side="right"), len(c["cdf"]) - 1)
    dev_in = c["sd_in"][comp] * rng.standard_normal(prompts)
    prompt = np.clip(np.rint(c["mu"][comp, 0] + dev_in), 1, cfg.max_prompt_len).astype(np.int64)
    mean_out = c["mu"][comp, 1] + c["slope"][comp] * dev_in
    out = mean_out[:, None] + c["cond_sd"][comp][:, None] * rng.standard_normal((prompts, n))
    out = out.ravel() * scale
    resp = np.clip(np.rint(out), 1, cfg.max_response_len).astype(np.int64)
    return Batch(prompt_lens=np.repeat(prompt, n), response_lens=resp,
                 group_ids=np.repeat(np.arange(prompts, dtype=np.int64), n),
                 capped=resp >= cfg.max_response_len, max_response_len=cfg.max_response_len)


def _compile_tooluse(params: dict) -> dict:
    counts = {int(k): float(v) for k, v in params["call_counts"].items()}
    if not counts or min(counts) < 1 or max(counts) > _MAX_CALLS:
        raise ValueError(f"call_counts must name call counts from 1 to {_MAX_CALLS}")
    ks = np.asarray(sorted(counts), dtype=np.int64)
    p = _pmf([counts[k] for k in ks], "call_counts", ndim=1)
    models = {}
    for k in ks:
        spec = params["per_count"][str(int(k))]
        w = _pmf(spec["weights"], f"tool-use weights for {k} calls", ndim=1)
        mu = np.asarray(spec["means"], dtype=np.float64)
        cov = np.asarray(spec["covariances"], dtype=np.float64)
        if mu.shape != (w.size, 2 * k) or cov.shape != (w.size, 2 * k, 2 * k):
            raise ValueError(f"tool-use model for {k} calls needs means [m, {2 * k}] and covariances")
        _check_moments(mu, cov, f"tool-use means and covariances for {k} calls")
        # Fitted covariances can be slightly indefinite; the nearest PSD factor keeps sampling total.
        chol = []
        for cv in cov:
            vals, vecs = np.linalg.eigh((cv + cv.T) / 2)
            chol.append(vecs * np.sqrt(np.clip(vals, 0, None)))
        models[int(k)] = (np.cumsum(w / w.sum()), mu, np.asarray(chol))
    return {"ks": ks, "cdf": np.cumsum(p / p.sum()), "models": models,
            "feature_order": params.get("feature_order", "interleaved")}


def _sample_tooluse(profile: Profile, rng: np.random.Generator, prompts: int, scale: float) -> Batch:
    """Call i of a session: ``input_i`` tokens enter the context (call 1: the prompt; later calls:
    the previous tool's output) and ``output_i`` tokens are generated. The response is everything
    after the prompt: all outputs plus the tool outputs between them."""
    c = profile.compiled
    cfg = profile.config
    n_seq = prompts * cfg.n
    k_idx = np.minimum(np.searchsorted(c["cdf"], rng.random(n_seq), side="right"), len(c["ks"]) - 1)
    n_calls = c["ks"][k_idx]
    m = int(n_calls.sum())
    ends = np.cumsum(n_calls)
    starts = ends - n_calls
    inputs = np.empty(m)
    outputs = np.empty(m)
    for k in c["ks"]:
        rows = np.flatnonzero(n_calls == k)
        if rows.size == 0:
            continue
        cdf, mu, chol = c["models"][int(k)]
        # Sessions with k calls are exchangeable: draw how many take each mixture component,
        # shuffle the sessions and hand out components in blocks (no per-row gathers).
        sizes = rng.multinomial(rows.size, np.diff(cdf, prepend=0.0))
        rows = rng.permutation(rows)
        x = np.empty((rows.size, 2 * k))
        at = 0
        for j, nj in enumerate(sizes):
            if nj:
                x[at:at + nj] = rng.standard_normal((nj, 2 * k)) @ chol[j].T + mu[j]
                at += nj
        pos = (starts[rows][:, None] + np.arange(k)).ravel()
        if c["feature_order"] == "interleaved":  # input_1, output_1, input_2, output_2, ...
            inputs[pos], outputs[pos] = x[:, 0::2].ravel(), x[:, 1::2].ravel()
        else:  # input_1..input_k, output_1..output_k
            inputs[pos], outputs[pos] = x[:, :k].ravel(), x[:, k:].ravel()
    inputs = np.maximum(np.rint(inputs), 1).astype(np.int64)
    comp_tok = np.maximum(np.rint(outputs * scale), 1).astype(np.int64)
    seq = np.repeat(np.arange(n_seq, dtype=np.int64), n_calls)
    # The n sessions of a prompt share it: the group's first draw sets its prompt length.
    first_input = inputs[starts] if m else np.zeros(n_seq, dtype=np.int64)
    prompt = np.repeat(np.clip(first_input[::cfg.n], 1, cfg.max_prompt_len), cfg.n)
    tool_tok = np.zeros(m, dtype=np.int64)
    tool_tok[:-1] = inputs[1:]
    tool_tok[ends - 1] = 0  # the last call's output ends the session
    step_tok = comp_tok + tool_tok
    resp = np.clip(np.bincount(seq, weights=step_tok, minlength=n_seq).astype(np.int64), 1, cfg.max_response_len)
    running = np.cumsum(step_tok) - step_tok
    prompt_tokens = prompt[seq] + running - running[starts][seq]
    cached = np.zeros(m, dtype=np.int64)
    cached[1:] = prompt_tokens[:-1] + comp_tok[:-1] - 1
    cached[starts] = 0
    turns = TurnTable(seq=seq, prompt_tokens=prompt_tokens, cached_tokens=np.maximum(cached, 0),
                      completion_tokens=comp_tok, tool_latency_s=np.zeros(m), tool_tokens=tool_tok)
    loss = np.minimum(np.bincount(seq, weights=comp_tok, minlength=n_seq).astype(np.int64), resp)
    return Batch(prompt_lens=prompt, response_lens=resp,
                 group_ids=np.repeat(np.arange(prompts, dtype=np.int64), cfg.n),
                 capped=resp >= cfg.max_response_len, max_response_len=cfg.max_response_len,
                 turns=turns, loss_lens=loss)


_SAMPLERS = {"copula": _sample_copula, "gmm": _sample_gmm, "tooluse": _sample_tooluse}
_COMPILERS = {"copula": _compile_copula, "gmm": _compile_gmm, "tooluse": _compile_tooluse}
