"""Run an ahead-of-time Triton compile script in a subprocess (shared by the compile tests).

The test process runs kernels in the interpreter (``tests/conftest.py`` sets TRITON_INTERPRET),
so compiling for a GPU target happens in a child process without it. Triton's wheel ships ptxas,
so ``triton.compile`` lowers kernels to PTX and cubin on a CPU-only machine. The script receives
the repository root as ``sys.argv[1]`` (with ``tests/`` on its path, so it can import
``compile_kernel`` from here) and prints one line ``RESULT <json>``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


sys.path.insert(0, str(ROOT / "scripts"))
# one definition of the ahead-of-time compile, shared with scripts/static_report.py
from static_sass import DIVISIBLE_BY_16 as DIVISIBLE_BY_16  # noqa: E402
from static_sass import compile_kernel as compile_kernel  # noqa: E402
from static_sass import compile_with_log as compile_with_log  # noqa: E402
from static_sass import ptxas_facts as ptxas_facts  # noqa: E402


def run_compile_script(script: str, timeout_s: int = 600) -> dict:
    import pytest

    try:
        from triton.backends.compiler import GPUTarget  # noqa: F401
        from triton.compiler import ASTSource  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"this triton has no ahead-of-time compile API: {exc}")
    import triton

    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    if not ptxas.exists():
        pytest.skip(f"no ptxas in the triton wheel ({ptxas})")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.run([sys.executable, "-c", script, str(ROOT)], env=env, capture_output=True, text=True,
                          timeout=timeout_s)
    assert proc.returncode == 0, f"compile failed:\n{proc.stderr[-6000:]}"
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])
