"""Test plugins (real subprocesses speaking the stdio protocol) and helpers to drive them."""
