"""Host-provided models: the `[models.<id>]` catalog, their prices, and calling them upstream.

The host calls models with its own keys for its runs (the per-run model endpoints, `mcphost.proxy`);
this package is the part that needs nothing of the stores or the HTTP app: the config entries and
their checks (`catalog.py`), the providers' wire formats as the host reads them — usage, error shapes,
streams (`wire.py`) — and the upstream client with its fallbacks and bounded waits (`upstream.py`).
"""

from mcphost.llm.catalog import (
    MODEL_KINDS,
    ModelConfig,
    ModelFacts,
    ModelKind,
    ModelProvider,
    WireFormat,
    check_models,
    fallback_chain,
    host_model_infos,
    model_facts,
)

__all__ = [
    "MODEL_KINDS",
    "ModelConfig",
    "ModelFacts",
    "ModelKind",
    "ModelProvider",
    "WireFormat",
    "check_models",
    "fallback_chain",
    "host_model_infos",
    "model_facts",
]
