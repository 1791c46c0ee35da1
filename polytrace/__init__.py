"""polytrace: the RLVR workload model (PolyTrace traces, fitted profiles, sampled batches), the
composition layer, results, gating and the CLI. Importing it is fast and needs no GPU."""

from .errors import PolytraceError

__version__ = "0.1.0"

# Loaded on first use (PEP 562): `import polytrace` stays free of numpy (0.29 s), so the command
# line installs its Ctrl-C handling before anything heavy is imported.
_LAZY = {"Batch": "workload.trace", "Trace": "workload.trace", "load_trace": "workload.trace",
         "save_trace": "workload.trace"}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'polytrace' has no attribute {name!r}")


def get_profile(name_or_path):
    """A built-in profile by name, or a fitted profile from a JSON file."""
    from .workload.profiles import get_profile as _get

    return _get(name_or_path)


__all__ = ["Batch", "PolytraceError", "Trace", "get_profile", "load_trace", "save_trace", "__version__"]
