"""`python -m mcphost.facts.listing`: write `tools.json`, the facts tools as `tools/list` shows them.

Run it after changing a facts tool, its description, or its argument or answer model; a test fails while
the committed listing differs from a fresh build (`mcphost.facts._tools`).
"""

from __future__ import annotations

import sys

from mcphost.facts._tools import LISTING, write_listing

if __name__ == "__main__":
    write_listing()
    sys.stdout.write(f"wrote {LISTING}\n")
