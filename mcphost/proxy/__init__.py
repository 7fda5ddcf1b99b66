"""The per-run model endpoints: a run's provider clients call the host's models through its grant.

`ModelProxy` serves `/runs/{run_id}/models/anthropic/v1/...` (Anthropic Messages) and
`/runs/{run_id}/models/openai/v1/...` (OpenAI Chat Completions and Responses) for unmodified clients,
authenticated by the run's token; `server.py` owns it, `_body.py` reading and checking a request body.
"""

from mcphost.proxy.server import MODELS_PATH, ModelProxy

__all__ = ["MODELS_PATH", "ModelProxy"]
