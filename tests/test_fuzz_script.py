"""``scripts/fuzz_inputs.py`` still runs: one mutated run per command over the shared files.

The fuzzer is not part of CI (a real run takes minutes); this smoke run (about 10 s) keeps it from
rotting as commands change, and holds every command to the fuzzer's own verdict on that run: a
clean one-line error or a finite result, never a traceback, hang or crash.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SMALL_LOGS = ("verl_gemma-2-2b_ppo_2gpu_p1024_r512.log", "verl_qwen2.5-0.5b_ppo_8gpu_b2048.log")


def test_one_run_per_command_is_clean(polytrace_data, validation_logs, tmp_path):
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        from fuzz_inputs import COMMANDS
    finally:
        sys.path.remove(str(REPO / "scripts"))
    out = tmp_path / "outcomes.json"
    # The two smallest top-level logs (160 KB each; the nine run to 1 MB) as the pool the log
    # commands' one run draws from: the same parse, validate and calibrate steps, on less text
    # (gemma's is also the one the fuzzer calibrates its seed from).
    shared = tmp_path / "shared"
    (shared / "validation-logs").mkdir(parents=True)
    (shared / "polytrace-data").symlink_to(polytrace_data.resolve(), target_is_directory=True)
    for name in SMALL_LOGS:
        (shared / "validation-logs" / name).symlink_to((validation_logs / name).resolve())
    env = {**os.environ, "POLYTRACE_SHARED": str(shared)}
    run = subprocess.run([sys.executable, str(REPO / "scripts" / "fuzz_inputs.py"), "--runs", str(len(COMMANDS)),
                          "--seed", "1", "--json", str(out)], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    outcomes = json.loads(out.read_text())
    assert sorted(o["command"] for o in outcomes) == sorted(COMMANDS)
    unclean = [o for o in outcomes if o["kind"] not in ("ok", "error")]
    assert not unclean, unclean
    assert any(o["kind"] == "ok" for o in outcomes)  # not every input refused: the seeds themselves still read
