"""``polytrace bench``: the suites sharded over workers (Ray tasks, or one after another here),
resumable, with nothing lost.

1. Collect the cases (``pytest --collect-only`` on a worker: the suites pick their shapes from the
   device they find).
2. Skip every case a shard record in ``<out>/shards`` already finished (resume).
3. Cut the rest into shards (``ledger.make_shards``) and run each in a fresh ``pytest
   --benchmark-json`` on a worker holding one GPU (``worker.run_shard``); a worker that dies is
   retried by Ray (``max_retries``).
4. Write each shard's record the moment it returns (``ledger.make_record``), whatever happens later.
5. Merge into ``<out>/<gpu-slug>/<suite>.json`` (``merge.merge_dir``): the schema and ids of a
   serial run, one file per GPU model.

Modules: ``run`` (the driver), ``ledger`` (records, resume, shard plan), ``merge``, ``executors``
(serial and Ray), ``cluster`` (joining or starting Ray), ``worker`` and ``pytest_plugin`` (what
runs on the nodes; standard library and pytest only). Nothing here is imported by
``import polytrace``; this package imports its modules on first use, so the plugin loads fast in
every shard.
"""

from __future__ import annotations

__all__ = ["merge_dir", "run_bench"]


def __getattr__(name: str):
    if name == "run_bench":
        from .run import run_bench

        return run_bench
    if name == "merge_dir":
        from .merge import merge_dir

        return merge_dir
    raise AttributeError(name)
