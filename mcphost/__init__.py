"""mcphost: an MCP-native agent host server."""

__version__ = "0.1.0"
