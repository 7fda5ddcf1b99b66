"""The host tool gateway: upstream MCP servers re-exposed to runs as `<server>__<tool>`.

`host_tools.py` is the gateway the facts server calls (catalog, proxied calls, oversized results as
artifacts, telemetry); `upstream.py` is one supervised upstream server and its client.
"""
