"""`GET /v1/deliveries` and `POST /v1/deliveries/{delivery_id}/redeliver`: the outbound webhook outbox.

Owns listing deliveries (newest first, cursor pages, by status — `dead` is the dead-letter list — or
run) and manual redelivery. Does not own the outbox rows or sending (`stores/deliveries.py`,
`delivery.py`).

Invariants:
- A redelivery puts the row back to `pending`, due now (this host's sender is woken to claim it), with the same `webhook-id`, retried for its
  receiver's `max_age_s` (a day when the receiver is no longer configured: the sender then ends it
  `dead` again without a request).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mcphost.api._http import parse_query, path_id
from mcphost.api._models import DeliveriesPage, DeliveriesQuery, QueryModel
from mcphost.api._state import api_state
from mcphost.delivery import redelivery_age


async def list_deliveries(request: Request) -> Response:
    state = api_state(request)
    query = parse_query(request, DeliveriesQuery)
    page = await state.stores.deliveries.list(
        status=query.status, run_id=query.run_id, limit=query.limit, cursor=query.cursor
    )
    answer = DeliveriesPage(items=page.items, next_cursor=page.next_cursor, has_more=page.has_more)
    return JSONResponse(answer.model_dump(mode="json"))


async def redeliver(request: Request) -> Response:
    state = api_state(request)
    parse_query(request, QueryModel)
    delivery_id = path_id(request, "delivery_id")
    current = await state.stores.deliveries.get(delivery_id)
    max_age_s = redelivery_age(state.webhooks, current.url)
    delivery = await state.stores.deliveries.redeliver(delivery_id, max_age_s=max_age_s)
    if state.wake_deliveries is not None:
        state.wake_deliveries()
    return JSONResponse(delivery.model_dump(mode="json"), status_code=202)
