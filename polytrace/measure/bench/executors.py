"""Where shards run: one after another from this process (no ``--ray``), or as Ray tasks that each
hold one GPU (``num_gpus=1``: Ray sets ``CUDA_VISIBLE_DEVICES``) or, for the CPU-interpreter path,
one CPU. Both run the same ``worker`` functions, so they write the same files.

Both yield each shard's result the moment it returns (the caller writes it at once). After Ctrl-C,
``drain`` gives the shards in flight a short grace to hand back what they measured; the rest are
cancelled and stay pending for the next run.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

from ...errors import PolytraceError
from . import worker
from .cluster import Cluster, await_start, one_line_error

# Shards in flight after Ctrl-C get this long to return (each pytest child writes its partial JSON
# within worker.SIGINT_GRACE_S when it saw the SIGINT, or is cancelled).
DRAIN_GRACE_S = 15.0


ANY = "any"  # the target of a run that takes whatever GPU comes


class SerialExecutor:
    label = "serial"
    slots = 1
    start_s = 0.0

    def targets(self, each_gpu_type: bool) -> list[tuple[str, dict, int]]:
        if each_gpu_type:
            raise PolytraceError("--each-gpu-type: only with --ray (this machine has one GPU model)")
        return [(ANY, {}, 1)]

    def collect(self, spec: dict) -> dict:
        return worker.collect(spec)

    def run(self, specs: list[dict]) -> Iterator[dict]:
        for spec in specs:
            result = worker.run_shard(spec)
            yield result
            if result["interrupted"]:
                raise KeyboardInterrupt

    def drain(self) -> Iterator[dict]:
        return iter(())

    def close(self) -> None:
        pass


class RayExecutor:
    """Shards as Ray tasks, at most ``cluster.slots`` in flight. A task whose worker dies (node
    lost, process killed, out of memory) is retried by Ray up to ``max_retries`` times; one that
    still fails comes back as ``{'lost': reason}`` and its cases stay pending."""

    def __init__(self, cluster: Cluster, *, max_retries: int = 3):
        ray = cluster.ray
        self.ray = ray
        self.cluster = cluster
        self.label = f"ray {cluster.address}"
        self.slots = cluster.slots
        self.start_s = cluster.start_s
        self.pending: dict = {}
        self.max_retries = max_retries
        # the worker module is standard library only: shipped by value, so a node needs the checkout
        # (or --ship-code) but not polytrace installed
        ray.cloudpickle.register_pickle_by_value(sys.modules[worker.__name__])
        options = {"num_gpus": cluster.num_gpus, "num_cpus": cluster.num_cpus, "max_retries": max_retries,
                   "retry_exceptions": False}
        self.options = options
        self._collect = ray.remote(worker.collect)
        self._run = ray.remote(worker.run_shard)
        self.start_log = ray.remote(worker.StartLog).options(num_cpus=0).remote()
        self.caps = {ANY: self.slots}

    def targets(self, each_gpu_type: bool) -> list[tuple[str, dict, int]]:
        """(label, Ray resources pinning a task to it, workers) per target: the whole cluster, or
        each GPU model (each runs every case: one complete result file per model)."""
        if not each_gpu_type:
            return [(ANY, {}, self.slots)]
        types = self.cluster.gpu_types()
        if not types:
            raise PolytraceError("--each-gpu-type: no node of the cluster names its GPU model (Ray's "
                                 "accelerator_type:<model> resource, or polytrace_gpu:<slug> given to `ray start "
                                 "--resources`)")
        # a node holds 1 of its model's resource whatever its GPU count: asking for a sliver pins
        # the task to such a node without limiting how many run there
        self.caps = dict(types)
        return [(key, {key: 0.001}, n) for key, n in types.items()]

    def _submit(self, remote, spec: dict):
        pinned = {"resources": spec["resources"]} if spec.get("resources") else {}
        return remote.options(**self.options, **pinned).remote(spec)

    def collect(self, spec: dict) -> dict:
        ref = self._submit(self._collect, spec)
        try:
            await_start(self.cluster, [ref], "bench --ray")  # the first task: a worker that cannot start
            return self.ray.get(ref)
        except self.ray.exceptions.RayError as exc:
            raise PolytraceError(f"collection on the cluster failed: {one_line_error(exc)}") from None
        except KeyboardInterrupt:
            self.ray.cancel(ref, force=True)
            raise

    def run(self, specs: list[dict]) -> Iterator[dict]:
        queue = list(specs)
        while queue or self.pending:
            for spec in list(queue):  # fill every target's free workers, in shard order
                target = spec.get("target", ANY)
                if sum(1 for s in self.pending.values() if s.get("target", ANY) == target) < self.caps[target]:
                    queue.remove(spec)
                    self.pending[self._submit(self._run, {**spec, "start_log": self.start_log})] = spec
            done, _ = self.ray.wait(list(self.pending), num_returns=1)
            for ref in done:
                yield self._result(ref, self.pending.pop(ref))

    def _result(self, ref, spec: dict) -> dict:
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayError as exc:
            return {"id": spec["id"], "node": self._node_of(spec["id"]),
                    "lost": f"worker lost or failed (max_retries={self.max_retries}): {one_line_error(exc)}"}

    def _node_of(self, shard_id: str) -> dict:
        try:
            return self.ray.get(self.start_log.node_of.remote(shard_id), timeout=10) or {}
        except Exception:  # noqa: BLE001 - the log's node may be gone too: the line then says '?'
            return {}

    def drain(self) -> Iterator[dict]:
        """After Ctrl-C: the shards that return within the grace, then cancel the rest."""
        if not self.pending:
            return
        try:
            done, _ = self.ray.wait(list(self.pending), num_returns=len(self.pending), timeout=DRAIN_GRACE_S)
        except (KeyboardInterrupt, Exception):  # noqa: BLE001 - a second Ctrl-C, or a local Ray already gone
            done = []
        for ref in done:  # the rest stay pending and are cancelled in close()
            spec = self.pending.pop(ref)
            result = self._result(ref, spec)
            if not result.get("lost"):
                yield result

    def close(self) -> None:
        try:  # after Ctrl-C a local Ray may already be gone: nothing left to cancel then
            for ref in list(self.pending):
                self.ray.cancel(ref, force=True)
            self.ray.kill(self.start_log)
        except Exception:  # noqa: BLE001
            pass
        self.pending.clear()
        self.cluster.shutdown()
