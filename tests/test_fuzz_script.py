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


def test_one_run_per_command_is_clean(polytrace_data, validation_logs, tmp_path):
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        from fuzz_inputs import COMMANDS
    finally:
        sys.path.remove(str(REPO / "scripts"))
    out = tmp_path / "outcomes.json"
    env = {**os.environ, "POLYTRACE_SHARED": str(polytrace_data.parent)}
    run = subprocess.run([sys.executable, str(REPO / "scripts" / "fuzz_inputs.py"), "--runs", str(len(COMMANDS)),
                          "--seed", "1", "--json", str(out)], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    outcomes = json.loads(out.read_text())
    assert sorted(o["command"] for o in outcomes) == sorted(COMMANDS)
    unclean = [o for o in outcomes if o["kind"] not in ("ok", "error")]
    assert not unclean, unclean
    assert any(o["kind"] == "ok" for o in outcomes)  # not every input refused: the seeds themselves still read
