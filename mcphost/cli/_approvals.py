"""`mcphost approvals [--status S]`, `mcphost approvals approve|deny ID [--note TEXT]` and
`mcphost approvals answer ID TEXT` (a harness's question to the user): human approvals, straight on the
database (no server needed; a waiting run on any host reads the decision, and a parked run's
continuation is started by the host that sweeps decided approvals).
"""

from __future__ import annotations

import argparse
import json
import sys

from mcphost.app import open_database
from mcphost.cli._common import EXIT_OK, dump, fail
from mcphost.config import Settings
from mcphost.stores import ApprovalRecord


def approval_line(a: ApprovalRecord) -> str:
    what = json.dumps(a.request, separators=(",", ":"), ensure_ascii=False)
    if len(what) > 120:
        what = what[:117] + "..."
    note = f"  note={a.note!r}" if a.note else ""
    return f"{a.approval_id}  {a.status:<8}  {a.kind:<6}  run={a.run_id}  {what}{note}"


async def cmd_approvals(args: argparse.Namespace, settings: Settings) -> int:
    async with open_database(settings) as stores:
        if args.action in ("approve", "deny", "answer"):
            if not args.approval_id:
                return fail(
                    f"mcphost approvals {args.action} needs an APPROVAL_ID (see `mcphost approvals --status pending`)."
                )
            if args.answer is not None and args.action != "answer":
                return fail(f"mcphost approvals {args.action} takes no TEXT; give a reason with --note TEXT.")
            note = args.note
            if args.action == "answer":
                if not (args.answer or "").strip():
                    return fail(
                        "mcphost approvals answer needs the answer: `mcphost approvals answer APPROVAL_ID TEXT`."
                    )
                note = args.answer
            approval, changed = await stores.approvals.decide(args.approval_id, args.action, note=note)
            if args.json:
                dump(approval.model_dump(mode="json"))
            elif changed:
                print(f"{approval.approval_id} is {approval.status}")
            else:
                print(f"{approval.approval_id} was already {approval.status}; nothing changed")
            return EXIT_OK
        page = await stores.approvals.list(status=args.status, limit=args.limit, cursor=args.cursor)
    if args.json:
        dump({"approvals": [a.model_dump(mode="json") for a in page.items], "next_cursor": page.next_cursor})
        return EXIT_OK
    if not page.items:
        print("no approvals", file=sys.stderr)
    for item in page.items:
        print(approval_line(item))
    if page.has_more and page.next_cursor:
        print(f"more: mcphost approvals --cursor {page.next_cursor}", file=sys.stderr)
    return EXIT_OK
