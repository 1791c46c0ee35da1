"""polytrace: the RLVR workload model (PolyTrace traces, fitted profiles, sampled batches), the
composition layer, results, gating and the CLI. Importing it is fast and needs no GPU."""

from .errors import PolytraceError
from .trace import Batch, Trace, load_trace, save_trace

__version__ = "0.1.0"


def get_profile(name_or_path):
    """A built-in profile by name, or a fitted profile from a JSON file."""
    from .profiles import get_profile as _get

    return _get(name_or_path)


__all__ = ["Batch", "PolytraceError", "Trace", "get_profile", "load_trace", "save_trace", "__version__"]
