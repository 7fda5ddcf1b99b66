"""`python -m mcphost.cli ARGS...`: the same as the `mcphost` console script."""

import sys

from mcphost.cli import main

if __name__ == "__main__":
    sys.exit(main())
