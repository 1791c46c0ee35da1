"""Triton kernels for the hot paths of RL training, one family per folder.

Each family folder (``logprob/``, ``attention/``, ``packing/``) stands alone: ``kernel.py`` holds
the ``@triton.jit`` code, ``api.py`` validation, grid/block choice, autograd Functions and the
public functions (a family whose ``api.py`` grew large keeps launch configs in ``configs.py`` and
argument checks in ``validation.py``), ``reference.py`` pure-torch references and ``spec.py`` FLOP
and byte counts.
Nothing here imports ``polytrace``; importing a family compiles nothing and queries no device.

Shared by the families (each still works vendored alone, falling back to Triton's own knob):
``_interpreter.py`` (the one reading of ``TRITON_INTERPRET`` and the CPU-device gate),
``_tuning.py`` (tuned launch configs), ``_lazy.py`` (a family's ``__init__`` imports its torch and
Triton code on first use, so its ``spec.py`` imports without them). ``tolerance.py`` holds the
accuracy rule every kernel test and benchmark output check uses (bounds from an fp64 truth, by
output dtype).
"""
