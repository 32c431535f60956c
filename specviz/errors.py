"""Errors specviz raises on bad input (docs/design.md §6): each a `SpecvizError` whose message says
what went wrong and what to do instead. The decoder checks before it mutates, so after any of these
errors its state is exactly what it was before the call.
"""


class SpecvizError(Exception):
    """Base class: anything specviz reports to the user as a clear, recoverable error."""


class ConfigError(SpecvizError, ValueError):
    """A DecodeConfig value is out of range (K, temperature, top-k, top-p, page size...)."""


class PromptError(SpecvizError, ValueError):
    """The prompt is empty, contains invalid token ids, or does not fit the context."""


class CacheCapacityError(SpecvizError):
    """A KV cache has no room for the positions asked for (contiguous buffer full)."""


class PoolExhaustedError(CacheCapacityError):
    """The paged cache's BlockPool has fewer free blocks than an append needs."""


class ContextFullError(SpecvizError):
    """The sequence reached the model's (or the configured) maximum context."""


class DecodingFinishedError(SpecvizError):
    """step() was called after the sequence ended (EOS, max new tokens or full context)."""


class ModelLoadError(SpecvizError):
    """A model or tokenizer could not be loaded (not found offline, unreadable, ...)."""


class IncompatiblePairError(SpecvizError):
    """The draft and target cannot be paired (vocabulary mismatch, unsupported attention)."""


class RunFileError(SpecvizError, ValueError):
    """A run file cannot be read: not JSON, not a specviz run, too new, too large, incomplete or damaged
    (specviz.runfile; what its schema checks: specviz.run_schema)."""
