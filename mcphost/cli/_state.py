"""`mcphost state get | list | delete`: an operator's view of run-visible state, straight on the database.

Owns turning the owner flags (`--runner-id`, `--conversation-id`, …) into a scope's owner through
`stores.state.owner_from_ids` (the same rule as `DELETE /v1/state/{scope}/{key}`) and showing values.
Does not own state itself (`stores/state.py`) or what runs may read and write (the grant).

Invariants: `delete` removes a value whatever it holds, also one nested too deep to be served, so a
value that breaks runs can always be removed without a running server; `get` of such a value fails with
exit 1 and says how to delete it; `list` shows it as unservable instead of failing.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from mcphost.app import open_database
from mcphost.cli._common import EXIT_OK, dump, fail, short
from mcphost.config import Settings
from mcphost.errors import NotFoundError
from mcphost.stores.state import STATE_OWNER_IDS, owner_from_ids, unservable_message

OWNER_FLAGS: tuple[str, ...] = tuple(dict.fromkeys(name for ids in STATE_OWNER_IDS.values() for name in ids))
"""Every owner id, as `--runner-id`, `--conversation-id`, …"""


def _owner(args: argparse.Namespace) -> tuple[str, ...]:
    return owner_from_ids(args.scope, {name: getattr(args, name) for name in OWNER_FLAGS})


async def cmd_state(args: argparse.Namespace, settings: Settings) -> int:
    owner = _owner(args)
    async with open_database(settings) as stores:
        match args.state_command:
            case "get":
                entry = await stores.state.get(args.scope, owner, args.key)
                if entry is None:
                    raise NotFoundError(
                        f"No {args.scope!r} state value {args.key!r} for owner {list(owner)!r}."
                    )
                if entry.unservable:
                    return fail(unservable_message(args.scope, args.key))
                if args.json:
                    dump(entry.model_dump(mode="json", exclude={"unservable"}))
                else:
                    dump(entry.value)
                return EXIT_OK
            case "list":
                page = await stores.state.list(
                    args.scope, owner, prefix=args.prefix, limit=args.limit, cursor=args.cursor
                )
                if args.json:
                    items: list[dict[str, Any]] = [e.model_dump(mode="json") for e in page.items]
                    dump({"owner": list(owner), "items": items, "next_cursor": page.next_cursor})
                    return EXIT_OK
                if not page.items:
                    print("no values", file=sys.stderr)
                for e in page.items:
                    shown = "<unservable: nested too deep; delete it>" if e.unservable else short(e.value)
                    print(f"{e.key}  {e.size} B  {shown}")
                if page.has_more and page.next_cursor:
                    print(f"more: --cursor {page.next_cursor}", file=sys.stderr)
                return EXIT_OK
            case _:
                if not await stores.state.delete(args.scope, owner, args.key):
                    raise NotFoundError(
                        f"No {args.scope!r} state value {args.key!r} for owner {list(owner)!r}; "
                        "`mcphost state list` shows what an owner holds."
                    )
                if args.json:
                    dump({"scope": args.scope, "key": args.key, "owner": list(owner), "deleted": True})
                else:
                    print(f"deleted {args.scope} {args.key} of {list(owner)}", file=sys.stderr)
                return EXIT_OK
