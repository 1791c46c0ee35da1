"""Traces: the data model, format detection and readers, and the native format."""

from .batch import Batch, TurnTable
from .model import PromptGroup, Response, Step, ToolCall, Trace, Turn, concat_batches
from .native import dumps as dumps_trace
from .native import save_trace
from .readers import load_trace

__all__ = ["Batch", "TurnTable", "PromptGroup", "Response", "Step", "ToolCall", "Trace", "Turn",
           "concat_batches", "dumps_trace", "load_trace", "save_trace"]
