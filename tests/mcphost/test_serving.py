"""`serving.py` without a server: listen addresses, the refusal to listen openly without a key, URLs."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcphost.config import Settings
from mcphost.errors import ConfigError, InvalidArgumentError
from mcphost.guard import check_listen, parse_listen
from mcphost.serving import advertised_url, local_url, redact_query


def test_a_listen_address_is_host_and_port_with_ipv6_in_brackets() -> None:
    assert parse_listen("127.0.0.1:8787") == ("127.0.0.1", 8787)
    assert parse_listen("[::1]:0") == ("::1", 0)
    assert parse_listen("localhost:65535") == ("localhost", 65535)
    for bad in ["8787", ":8787", "127.0.0.1:", "127.0.0.1:http", "127.0.0.1:65536"]:
        with pytest.raises(InvalidArgumentError, match="HOST:PORT"):
            parse_listen(bad)


def test_only_loopback_addresses_are_served_without_an_api_key() -> None:
    for host in ["127.0.0.1", "localhost", "::1", "127.0.0.5"]:
        check_listen(host, False)
    for host in ["0.0.0.0", "::", "10.0.0.1", "agents.example.com"]:
        with pytest.raises(ConfigError, match="without an API key"):
            check_listen(host, False)
        check_listen(host, True)


def test_clients_on_this_machine_reach_wildcard_addresses_through_loopback(tmp_path: Path) -> None:
    assert local_url("0.0.0.0", 80) == "http://127.0.0.1:80"
    assert local_url("::", 80) == "http://[::1]:80"
    assert local_url("10.0.0.1", 80) == "http://10.0.0.1:80"

    def settings(**host: str) -> Settings:
        return Settings.model_validate({"host": {"data_dir": str(tmp_path), **host}})

    assert advertised_url(settings(listen="0.0.0.0:9000")) == "http://127.0.0.1:9000"
    assert advertised_url(settings(public_url="https://agents.example.com")) == "https://agents.example.com"


def test_secrets_in_query_strings_are_redacted_for_the_access_log() -> None:
    assert redact_query("/runs/x/mcp?access_token=abc&limit=5") == "/runs/x/mcp?access_token=***&limit=5"
    assert redact_query("/v1/runs?API%5FKEY=k&Token") == "/v1/runs?API%5FKEY=***&Token=***"
    assert redact_query("/healthz") == "/healthz"
