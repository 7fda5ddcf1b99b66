"""Handlers of the model tools: `models_list`, `models_invoke`, `models_rerank`, `models_embed` (PROTOCOL §7).

Owns handing an admitted call to the host's `ModelCaller` with the run's grant, and the stream of text
deltas to the call's progress notifications when the client asked for them. Does not check which model
or way of calling the grant allows, call upstreams or count usage: the `ModelCaller`
(`mcphost.proxy.calls`) does all three, through the same path as the per-run model endpoints.
"""

from __future__ import annotations

from mcphost.errors import NotFoundError
from mcphost.facts._call import Call
from mcphost.facts.providers import ModelCaller
from mcphost.protocol.inference import (
    EmbeddingAnswer,
    ModelInvocation,
    ModelsEmbedArgs,
    ModelsInvokeArgs,
    ModelsList,
    ModelsListArgs,
    ModelsRerankArgs,
    RerankAnswer,
)


def _caller(call: Call) -> ModelCaller:
    if call.models is None:
        raise NotFoundError("This host serves no models ([models] is empty in its config).")
    return call.models


async def models_list(call: Call, args: ModelsListArgs) -> ModelsList:
    return ModelsList(models=[]) if call.models is None else call.models.listed(call.grant)


async def models_invoke(call: Call, args: ModelsInvokeArgs) -> ModelInvocation:
    return await _caller(call).invoke(call.run_id, call.grant, args, call.progress)


async def models_rerank(call: Call, args: ModelsRerankArgs) -> RerankAnswer:
    return await _caller(call).rerank(call.run_id, call.grant, args)


async def models_embed(call: Call, args: ModelsEmbedArgs) -> EmbeddingAnswer:
    return await _caller(call).embed(call.run_id, call.grant, args)
