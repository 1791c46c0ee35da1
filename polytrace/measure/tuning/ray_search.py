"""``polytrace tune KERNEL --ray ...``: a tuning session's trials spread over a Ray cluster.

One Ray actor per GPU (``num_gpus=1``; on a cluster without GPUs and ``--allow-cpu``, one per CPU
in the Triton interpreter) builds the profile's buckets on its own device, like the serial session.
Buckets are tuned one after another: one worker times the bucket's built-in default while every
worker takes candidates in the session's seeded order; no candidate starts after the bucket's
share of the budget is spent (the serial rule). The winner is chosen from the trials in candidate
order by ``measure.choose_best``, the serial session's rule, so on the same measurements the
cluster writes the serial session's configs. Every worker must hold the same GPU model (the file
is keyed by the device name); a worker that dies is restarted and its trial retried
(``max_retries``). One progress bar for the whole cluster.

The actors import polytrace: every node needs this checkout on its path (or polytrace installed).
"""

from __future__ import annotations

import math
import os
import socket
import time

from ...errors import PolytraceError
from ..bench.cluster import ClusterSpec, await_start, connect, one_line_error
from .measure import (
    BucketRunner,
    Search,
    Timer,
    TuneTarget,
    build_workload,
    candidate_configs,
    make_timer,
    tune_buckets,
    versions,
)
from .tunables import Tunable


class TuneWorker:
    """A tuning worker on one device (wrapped with ``ray.remote`` by ``search_on_ray``)."""

    def __init__(self, tunable: Tunable, profile: str, model: str | None, seed: int, timer: Timer | None,
                 interpret: str | None = None):
        if interpret is not None:  # before triton is first imported here (it reads it when a kernel is defined)
            os.environ["TRITON_INTERPRET"] = interpret
        import torch

        on_gpu = bool(torch.cuda.is_available())
        self.device = torch.device("cuda" if on_gpu else "cpu")
        name = torch.cuda.get_device_name(self.device) if on_gpu else "cpu"
        self.tunable = tunable
        self.work = build_workload(tunable, profile, model, seed, on_gpu, name)
        self.timer = timer or make_timer(on_gpu)
        self.bucket: str | None = None
        self.runner: BucketRunner | None = None

    def describe(self) -> dict:
        torch_version, triton_version = versions()
        return {"device_name": self.work.device_name, "on_gpu": self.work.on_gpu, "profile": self.work.profile,
                "model": self.work.model, "buckets": list(self.work.buckets), "node": socket.gethostname(),
                "torch_version": torch_version, "triton_version": triton_version}

    def _runner(self, bucket: str) -> BucketRunner:
        if bucket != self.bucket:
            self.runner = None  # free the last bucket's inputs before building the next
            self.runner = BucketRunner(self.tunable, self.work.buckets[bucket], self.device, self.timer)
            self.bucket = bucket
        return self.runner

    def default_time(self, bucket: str) -> tuple[float, list[str]]:
        runner = self._runner(bucket)
        return runner.default_time(), runner.labels

    def trial(self, bucket: str, cfg: dict) -> float:
        return self._runner(bucket).trial(cfg)


def search_on_ray(tunable: Tunable, target: TuneTarget, budget_s: float, progress: bool, spec: ClusterSpec,
                  timer: Timer | None = None) -> Search:
    cluster = connect(spec.address, workers=spec.workers, allow_cpu=spec.allow_cpu)
    try:
        return _search(cluster, tunable, target, budget_s, progress, spec.max_retries, timer)
    finally:
        cluster.shutdown()


def _search(cluster, tunable: Tunable, target: TuneTarget, budget_s: float, progress: bool, max_retries: int,
            timer: Timer | None) -> Search:
    profile, model, seed, max_buckets = target.profile, target.model, target.seed, target.max_buckets
    ray = cluster.ray
    options = {"num_gpus": cluster.num_gpus, "num_cpus": cluster.num_cpus, "max_restarts": max_retries,
               "max_task_retries": max_retries}
    # The interpreter switch travels as an argument, not as a runtime_env: Ray starts a worker with a
    # runtime_env through `bash -c` with the interpreter's path unquoted, which a folder named "new
    # user" splits at the space (every worker then dies at start and Ray retries for minutes).
    interpret = os.environ.get("TRITON_INTERPRET", "1") if cluster.on_cpu else None
    actor_class = ray.remote(TuneWorker).options(**options)
    actors = [actor_class.remote(tunable, profile, model, seed, timer, interpret) for _ in range(cluster.slots)]
    try:
        describe = [a.describe.remote() for a in actors]
        await_start(cluster, describe, "tune --ray")
        infos = ray.get(describe)
    except ray.exceptions.RayError as exc:
        raise PolytraceError(f"tune --ray: a worker could not build the buckets: {one_line_error(exc)}") from None
    names = {i["device_name"] for i in infos}
    if len(names) > 1:
        where = ", ".join(sorted(f"{i['node']}: {i['device_name']}" for i in infos))
        raise PolytraceError(f"tune --ray: the workers hold different GPU models ({where}); a tuning file is per "
                             "model: start the cluster over one GPU model")
    info = infos[0]
    space = tunable.space()
    candidates = candidate_configs(space, seed)
    buckets = info["buckets"][: max_buckets or None]
    try:
        found = tune_buckets(buckets, len(candidates), budget_s, tunable.name, progress,
                             lambda bucket, deadline, bar: _bucket(ray, actors, candidates, bucket, deadline, bar))
    finally:
        for a in actors:
            ray.kill(a)
    return Search(*found, info["profile"], info["model"], info["on_gpu"], info["device_name"], space,
                  info["torch_version"], info["triton_version"], workers=len(actors))


def _bucket(ray, actors: list, candidates: list[dict], bucket: str, deadline: float, bar):
    """(default time, shape labels, [(candidate, time) tried, in candidate order]) of one bucket
    (``measure.MeasureBucket``)."""
    idle = list(actors)
    default_ref = idle.pop(0).default_time.remote(bucket)
    busy_default = actors[0]
    in_flight: dict = {}  # ref -> (actor, candidate index)
    times: dict[int, float] = {}
    default = None
    submitted = 0
    while default is None or in_flight:
        while idle and submitted < len(candidates) and not (time.monotonic() > deadline and submitted > 0):
            actor = idle.pop(0)
            in_flight[actor.trial.remote(bucket, dict(candidates[submitted]))] = (actor, submitted)
            submitted += 1
        waiting = list(in_flight) + ([default_ref] if default is None else [])
        done, _ = ray.wait(waiting, num_returns=1)
        for ref in done:
            if default is None and ref == default_ref:
                try:
                    default = ray.get(ref)
                except ray.exceptions.RayError as exc:
                    raise PolytraceError(f"tune --ray: timing the default of bucket {bucket} failed: "
                                         f"{one_line_error(exc)}") from None
                idle.append(busy_default)
            else:
                actor, index = in_flight.pop(ref)
                try:
                    times[index] = float(ray.get(ref))
                except ray.exceptions.RayError:  # the worker was lost past max_retries: a rejected trial
                    times[index] = math.inf
                idle.append(actor)
            bar.update(1)
    bar.update(len(candidates) - submitted)
    return default[0], default[1], [(candidates[i], times[i]) for i in range(submitted)]

