"""State and storage tools: `state_get/set/delete/list`, `storage_get/set/delete/list`.

Owns the rule that maps a (scope or area, run grant) to the owner key a run reads and writes, so runners
never see each other's values. Does not own keys, sizes or SQL (`stores/state.py`, `stores/storage.py`).

Invariants:
- State: the scope must be in the grant's readable (or, for set/delete, writable) scopes, else
  `unauthorized`; the owner is `RunGrant.state_scope_id(scope)` and a scope whose id the event lacks is
  `invalid_argument`. Arguments never name an owner, so another runner's or binding's state cannot be
  addressed at all.
- Storage: the area must be in `grant.storage_areas`, else `unauthorized`. Owners (PROTOCOL §7 leaves
  them to the host): `plugin` → (plugin,), shared by the plugin's runners everywhere; `workspace` →
  (workspace_id, plugin); `binding` → (binding_id,). A missing id is `invalid_argument`.
- Every check happens before the store is called, and the stores check sizes before writing, so a
  refused call changes nothing.
- `state_list` returns values inline until `LIST_VALUE_BYTES` of them are in the page; later entries
  carry `value_omitted: true` (read them with `state_get`). `storage_list` returns sizes only.
- A stored state value that cannot be served (nested deeper than `MAX_JSON_DEPTH`) is a tool error
  for `state_get` (`runtime_error`, not retryable, saying how to delete it) and an entry with `error`
  instead of `value` in `state_list`; it never fails the call as a JSON-RPC error.
"""

from __future__ import annotations

import base64

from mcphost.facts._args import (
    StateKeyArgs,
    StateListArgs,
    StateSetArgs,
    StorageKeyArgs,
    StorageListArgs,
    StorageSetArgs,
)
from mcphost.facts._call import Call
from mcphost.facts._results import ToolCallError
from mcphost.grants import refusal
from mcphost.models import RunGrant
from mcphost.protocol import MAX_JSON_DEPTH
from mcphost.protocol.facts import (
    Deleted,
    StateList,
    StateListItem,
    StateValue,
    StateWritten,
    StorageList,
    StorageListItem,
    StorageValue,
    StorageWritten,
)
from mcphost.stores.state import unservable_message

LIST_VALUE_BYTES = 64 * 1024


def _state_owner(call: Call, scope: str, *, write: bool) -> tuple[str, ...]:
    grant = call.grant
    allowed = grant.state_write if write else grant.state_read
    if scope not in allowed:
        what = "write" if write else "read"
        message, details = refusal(grant, f"state:{scope}:{what}", f"{what} {scope!r} state")
        raise ToolCallError("unauthorized", message, details=details)
    owner = grant.state_scope_id(scope)
    if owner is None:
        raise ToolCallError(
            "invalid_argument",
            f"This run's event has no {scope} id, so {scope!r} state is not available to it.",
            details={"field": "scope"},
        )
    return owner


async def state_get(call: Call, args: StateKeyArgs) -> StateValue:
    entry = await call.stores.state.get(args.scope, _state_owner(call, args.scope, write=False), args.key)
    if entry is None:
        return StateValue(scope=args.scope, key=args.key, found=False, value=None)
    if entry.unservable:
        raise ToolCallError(
            "runtime_error",
            unservable_message(args.scope, args.key),
            retryable=False,
            details={"scope": args.scope, "key": args.key, "max_depth": MAX_JSON_DEPTH},
        )
    return StateValue(
        scope=args.scope,
        key=args.key,
        found=True,
        value=entry.value,
        size=entry.size,
        updated_at=entry.updated_at,
    )


async def state_set(call: Call, args: StateSetArgs) -> StateWritten:
    owner = _state_owner(call, args.scope, write=True)
    entry = await call.stores.state.set(args.scope, owner, args.key, args.value)
    return StateWritten(scope=args.scope, key=args.key, size=entry.size, updated_at=entry.updated_at)


async def state_delete(call: Call, args: StateKeyArgs) -> Deleted:
    owner = _state_owner(call, args.scope, write=True)
    deleted = await call.stores.state.delete(args.scope, owner, args.key)
    return Deleted(scope=args.scope, key=args.key, deleted=deleted)


async def state_list(call: Call, args: StateListArgs) -> StateList:
    owner = _state_owner(call, args.scope, write=False)
    page = await call.stores.state.list(
        args.scope, owner, prefix=args.prefix, limit=args.limit, cursor=args.cursor
    )
    items: list[StateListItem] = []
    inline = 0
    for entry in page.items:
        if entry.unservable:
            error = {"code": "runtime_error", "message": unservable_message(args.scope, entry.key)}
            item = StateListItem(key=entry.key, size=entry.size, updated_at=entry.updated_at, error=error)
        elif inline + entry.size <= LIST_VALUE_BYTES:
            inline += entry.size
            item = StateListItem(
                key=entry.key, size=entry.size, updated_at=entry.updated_at, value=entry.value
            )
        else:
            item = StateListItem(
                key=entry.key, size=entry.size, updated_at=entry.updated_at, value_omitted=True
            )
        items.append(item)
    return StateList(scope=args.scope, items=items, next_cursor=page.next_cursor, has_more=page.has_more)


def storage_owner(grant: RunGrant, area: str) -> tuple[str, ...] | None:
    """The owner key of a storage area for this run, or None when the run lacks its id."""
    match area:
        case "plugin":
            return None if grant.plugin is None else (grant.plugin,)
        case "workspace":
            if grant.workspace_id is None or grant.plugin is None:
                return None
            return (grant.workspace_id, grant.plugin)
        case "binding":
            return None if grant.binding_id is None else (grant.binding_id,)
        case _:
            raise ValueError(f"unknown storage area {area!r}")


def _storage_owner(call: Call, area: str) -> tuple[str, ...]:
    if area not in call.grant.storage_areas:
        message, details = refusal(call.grant, f"storage:{area}", f"use {area!r} storage")
        raise ToolCallError("unauthorized", message, details=details)
    owner = storage_owner(call.grant, area)
    if owner is None:
        raise ToolCallError(
            "invalid_argument",
            f"This run has no {area} id, so {area!r} storage is not available to it.",
            details={"field": "area"},
        )
    return owner


async def storage_get(call: Call, args: StorageKeyArgs) -> StorageValue:
    value = await call.stores.storage.get(args.area, _storage_owner(call, args.area), args.key)
    if value is None:
        return StorageValue(area=args.area, key=args.key, found=False, value_base64=None)
    return StorageValue(
        area=args.area,
        key=args.key,
        found=True,
        value_base64=base64.b64encode(value.value).decode(),
        size=value.size,
        updated_at=value.updated_at,
    )


async def storage_set(call: Call, args: StorageSetArgs) -> StorageWritten:
    owner = _storage_owner(call, args.area)
    item = await call.stores.storage.set(args.area, owner, args.key, args.value())
    return StorageWritten(area=args.area, key=args.key, size=item.size, updated_at=item.updated_at)


async def storage_delete(call: Call, args: StorageKeyArgs) -> Deleted:
    owner = _storage_owner(call, args.area)
    deleted = await call.stores.storage.delete(args.area, owner, args.key)
    return Deleted(area=args.area, key=args.key, deleted=deleted)


async def storage_list(call: Call, args: StorageListArgs) -> StorageList:
    owner = _storage_owner(call, args.area)
    page = await call.stores.storage.list(
        args.area, owner, prefix=args.prefix, limit=args.limit, cursor=args.cursor
    )
    return StorageList(
        area=args.area,
        items=[StorageListItem(key=i.key, size=i.size, updated_at=i.updated_at) for i in page.items],
        next_cursor=page.next_cursor,
        has_more=page.has_more,
    )
