"""Plumbing shared by the host, the runners and their tests: a leaf that imports nothing of mcphost.

`procgroup.py` (a child in its own process group: signals, liveness, bounded stop). Runners may import
this package and `mcphost.protocol`, nothing else of the host.
"""
