"""Plumbing shared by the host, the runners, the bridge and their tests: a leaf that imports nothing of mcphost.

`procgroup.py` (a child in a session of its own: spawn, zombie-aware liveness, shielded bounded stop of
the group and its strays); `lines.py` (the one bounded line reader); `excgroups.py` (the one walk over
nested exception groups); `challenge.py` (the `WWW-Authenticate` value of a 401); `validation.py` (a ValidationError as "where: what"); `backoff.py` (jittered exponential waits between attempts, by tenacity). Runners may import this
package and `mcphost.protocol`, nothing else of the host; the bridge may import this package alone (it
uses none of it today: it keeps to the standard library to start fast), which is why nothing here imports the rest of mcphost and `mcphost/__init__.py` imports
nothing at all.
"""
