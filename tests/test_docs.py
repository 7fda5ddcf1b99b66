"""docs/protocol.md and docs/architecture.md name everything the code defines that they are the reference for.

A tool, result type, error code, stdio method, tool argument, limit, table, layer or `[host]` key added
to the code without its documentation fails here, so the docs change in the same commit as the code.
What the architecture says of the code cannot drift either: its layer diagram is the import-linter
layers contract, every module it names exists, the modules it lists as past the size limit are those
that are, and each constant it quotes with a value has that value in the code.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import cast

import pytest
from pydantic import BaseModel

from mcphost import delivery, orchestrator, recording, retention, schedules
from mcphost.config import DELIVERY_LEASE_S, DELIVERY_SETTLE_S, HostSettings, WebhookConfig
from mcphost.errors import HostError
from mcphost.facts._args import MAX_READ_BYTES
from mcphost.facts._tools import FACTS_TOOLS
from mcphost.plugins.process import LIVENESS_PROBE
from mcphost.protocol import (
    ERROR_CODES,
    MAX_INLINE_ARTIFACT_BYTES,
    MAX_JSON_DEPTH,
    MAX_RESULT_BYTES,
    RESULT_ADAPTER,
    RESULT_TYPES,
    STRICT_CONTEXT,
    AgentRunContext,
    AgentRunnerManifest,
    json_schemas,
)
from mcphost.protocol.facts import (
    FACTS_ANSWERS,
    ArtifactChunk,
    EventRecord,
    FactsAnswer,
    HistoryPage,
    KnowledgeHits,
)
from mcphost.protocol.stdio import (
    MAX_LINE_BYTES,
    METHOD_CANCEL,
    METHOD_INITIALIZE,
    METHOD_RESULT,
    METHOD_RUN,
    METHOD_SHUTDOWN,
    InitializeResult,
)
from mcphost.stores import wakeups
from mcphost.stores.engine import SQLITE_BUSY_TIMEOUT_S
from mcphost.stores.hosts import LIVENESS_CHECK_S
from mcphost.stores.state import MAX_VALUE_BYTES as MAX_STATE_BYTES
from mcphost.stores.state import SNAPSHOT_MAX_BYTES
from mcphost.stores.storage import MAX_VALUE_BYTES as MAX_STORAGE_BYTES
from mcphost.stores.tables import metadata
from tests._json import obj, obj_or_none
from tests.test_layout import LIMIT

ROOT = Path(__file__).resolve().parents[1]
PROTOCOL = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
ARCHITECTURE = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
PACKAGES = ("mcphost", "mcphost_runners", "mcphost_bridge")


def _missing(names: object, text: str) -> list[str]:
    assert isinstance(names, (set, frozenset, list, tuple, dict))
    """The names that appear in `text` neither as `name` nor, for optional arguments, as `name?`."""
    return sorted(
        str(n) for n in cast(Iterable[object], names) if f"`{n}`" not in text and f"`{n}?`" not in text
    )


def _size(value: int) -> str:
    for unit, factor in (("MiB", 1024 * 1024), ("KiB", 1024)):
        if value % factor == 0:
            return f"{value // factor} {unit}"
    return str(value)


def test_every_facts_tool_is_documented_in_the_protocol() -> None:
    assert _missing(list(FACTS_TOOLS), PROTOCOL) == []
    for name in FACTS_TOOLS:
        assert re.search(rf"^#### .*`{name}`", PROTOCOL, re.MULTILINE), f"no section for tool {name!r}"


def test_every_argument_of_every_facts_tool_is_documented() -> None:
    missing = {
        name: _missing(list(spec.args.model_fields), PROTOCOL)
        for name, spec in FACTS_TOOLS.items()
        if _missing(list(spec.args.model_fields), PROTOCOL)
    }
    assert missing == {}


def test_every_result_type_and_error_code_is_documented() -> None:
    assert _missing(RESULT_TYPES, PROTOCOL) == []
    assert _missing(ERROR_CODES, PROTOCOL) == []


def test_every_stdio_method_is_documented() -> None:
    methods = [METHOD_INITIALIZE, METHOD_RUN, METHOD_RESULT, METHOD_CANCEL, METHOD_SHUTDOWN, LIVENESS_PROBE]
    assert _missing(methods, PROTOCOL) == []


@pytest.mark.parametrize(
    ("what", "value"),
    [
        ("stdio line", MAX_LINE_BYTES),
        ("result", MAX_RESULT_BYTES),
        ("inline artifact", MAX_INLINE_ARTIFACT_BYTES),
        ("artifacts_read", MAX_READ_BYTES),
        ("state value", MAX_STATE_BYTES),
        ("state snapshot", SNAPSHOT_MAX_BYTES),
        ("storage value", MAX_STORAGE_BYTES),
    ],
)
def test_the_protocol_states_each_size_limit_as_the_code_has_it(what: str, value: int) -> None:
    assert _size(value) in PROTOCOL, f"the {what} limit ({_size(value)}) is not in docs/protocol.md"


def test_every_table_is_in_the_architectures_data_model() -> None:
    assert _missing(list(metadata.tables), ARCHITECTURE) == []


def _data_model_rows() -> list[str]:
    """The first cell of each row of the architecture's data-model table (`| table | holds | ...`)."""
    lines = ARCHITECTURE.split("\n")
    start = lines.index("| table | holds | keys and indexes |") + 2
    rows: list[str] = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append(line.split("|")[1].strip().strip("`"))
    return rows


def test_the_data_model_has_one_row_per_table() -> None:
    rows = _data_model_rows()
    assert sorted({r for r in rows if rows.count(r) > 1}) == []
    assert set(rows) >= set(metadata.tables)


def _layers_contract() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts: list[dict[str, object]] = config["tool"]["importlinter"]["contracts"]
    layers = next(c["layers"] for c in contracts if c.get("type") == "layers")
    assert isinstance(layers, list)
    return [str(layer) for layer in cast(list[object], layers)]


def _layer_row(row: str) -> list[str]:
    return [name.strip() for name in row.split("|")]


def test_the_architectures_layer_diagram_is_the_import_linter_layers_contract() -> None:
    """The same layers in the same order, each with the same modules (their order within a row is free)."""
    section = ARCHITECTURE.split("### Dependency direction", 1)[1]
    diagram = re.search(r"```\n(.*?)```", section, re.DOTALL)
    assert diagram is not None
    drawn = [sorted(_layer_row(row)) for row in diagram.group(1).splitlines() if row.strip()]
    assert drawn == [sorted(_layer_row(layer)) for layer in _layers_contract()]


def _names_a_module(dotted: str) -> bool:
    """`dotted` is a module of the product, or an attribute of one (`mcphost.common.lines`,
    `mcphost.protocol.RESULT_ADAPTER`)."""
    first, *rest = dotted.split(".")
    module = first
    for index, part in enumerate(rest):
        if importlib.util.find_spec(f"{module}.{part}") is None:  # its parent exists: no import error
            value: object = importlib.import_module(module)
            for name in rest[index:]:
                if not hasattr(value, name):
                    return False
                value = getattr(value, name)
            return True
        module = f"{module}.{part}"
    return True


def test_every_module_path_the_architecture_names_exists() -> None:
    """Paths (`mcphost/stores/_direct.py`, `stores/_retry.py`, `mcphost_bridge/_lines.py`, `tests/...`)
    and dotted names (`mcphost.common.lines`): a renamed or removed module fails here. A dotted name that
    is no module is a string the code itself uses (a span or attribute name, `mcphost.toml`)."""
    source = "\n".join(
        p.read_text(encoding="utf-8") for package in PACKAGES for p in (ROOT / package).rglob("*.py")
    )
    roots = "|".join((*PACKAGES, "tests", "bench", "examples", "docs"))
    paths = set(re.findall(rf"(?<![\w./-])((?:{roots})/[\w./-]*\w)", ARCHITECTURE))
    relative = set(re.findall(r"(?<![\w./-])([a-z_]+/[\w./]*\.py)\b", ARCHITECTURE)) - paths  # under mcphost/
    dotted = set(re.findall(r"(?<![\w./-])(mcphost(?:_runners|_bridge)?(?:\.[a-z_]\w*)+)", ARCHITECTURE))
    assert len(paths) > 20  # the patterns still match the doc
    assert len(relative) > 20
    assert len(dotted) > 10
    assert sorted(p for p in paths if not (ROOT / p).exists()) == []
    assert sorted(p for p in relative if not (ROOT / "mcphost" / p).exists()) == []
    assert sorted(d for d in dotted if not _names_a_module(d) and f'"{d}' not in source) == []


def test_the_modules_past_the_size_limit_are_the_ones_the_architecture_lists() -> None:
    paragraph = ARCHITECTURE.split("These modules keep", 1)[1].split("\n\n", 1)[0]
    listed = {
        name if name.startswith(PACKAGES[1:]) else f"mcphost/{name}"
        for name in re.findall(r"`([\w/]+\.py)`", paragraph)
    }
    large = {
        str(path.relative_to(ROOT))
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if "migrations" not in path.parts and path.read_text(encoding="utf-8").count("\n") > LIMIT
    }
    assert sorted(listed) == sorted(large)


_FLAT = " ".join(ARCHITECTURE.split())
"""The architecture with every run of whitespace one space: a quoted phrase may wrap."""


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else str(value)


@pytest.mark.parametrize(
    ("phrase", "value"),
    [
        ("every {} s (`LIVENESS_CHECK_S`)", LIVENESS_CHECK_S),
        ("`TERMINAL_RETRY_S` = {} s", orchestrator.TERMINAL_RETRY_S),
        ("retried with back-off for {} s", orchestrator.TERMINAL_RETRY_S),
        ("every `SWEEP_S` = {} s", orchestrator.SWEEP_S),
        ("cancel: runner/cancel, {} s grace", orchestrator.CANCEL_GRACE_S),
        ("polls every {} s (`QUEUE_POLL_S`)", orchestrator.QUEUE_POLL_S),
        ("every {} s (`NOTIFIED_RECHECK_S`)", orchestrator.NOTIFIED_RECHECK_S),
        ("`LISTEN` (checked every {} s", wakeups.CHECK_S),
        ("a {} s busy timeout", SQLITE_BUSY_TIMEOUT_S),
        ("`MAX_FIRES_PER_TICK` = {} due schedules", schedules.MAX_FIRES_PER_TICK),
        ("`RELOAD_S` = {} s", schedules.RELOAD_S),
        ("`MISFIRE_GRACE_S` = {} s", schedules.MISFIRE_GRACE_S),
        ("`MAX_JSON_DEPTH` = {} with", MAX_JSON_DEPTH),
        ("`MAX_DOCUMENT_DEPTH` ({}:", recording.MAX_DOCUMENT_DEPTH),
        ("a lease ({} s, `config.DELIVERY_LEASE_S`", DELIVERY_LEASE_S),
        ("more than the lease less {} s", DELIVERY_SETTLE_S),
        ("at most {} rows of one URL at once (`delivery.PER_URL`", delivery.PER_URL),
        ("sends in flight) and {} in all", delivery.MAX_IN_FLIGHT),
        ("`timeout_s` (default {} s", WebhookConfig.model_fields["timeout_s"].default),
        ("run_timeout_s ({})", HostSettings.model_fields["run_timeout_s"].default),
        ("the `retention` lease ({} min", retention.LEASE_TERM_S / 60),
    ],
)
def test_a_constant_the_architecture_quotes_has_the_codes_value(phrase: str, value: float) -> None:
    expected = phrase.format(_number(value))
    assert expected in _FLAT, f"docs/architecture.md does not say {expected!r}"


def test_every_host_setting_is_in_the_architecture() -> None:
    assert sorted(k for k in HostSettings.model_fields if k not in ARCHITECTURE) == []


def test_the_readme_links_both_documents() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "docs/architecture.md" in readme
    assert "docs/protocol.md" in readme


# -- the examples are true -------------------------------------------------------------------------


def _json_blocks(text: str) -> list[object]:
    return [json.loads(block) for block in re.findall(r"```json\n(.*?)```", text, re.DOTALL)]


def _unknown_keys(example: object, actual: object, path: str = "") -> list[str]:
    """Keys of `example` (recursively) that the model's own dump of it does not have."""
    example_object, actual_object = obj_or_none(example), obj_or_none(actual)
    if example_object is not None and actual_object is not None:
        found: list[str] = []
        for key, value in example_object.items():
            if key not in actual_object:
                found.append(f"{path}{key}")
            else:
                found += _unknown_keys(value, actual_object[key], f"{path}{key}.")
        return found
    if isinstance(example, list) and isinstance(actual, list):
        pairs = zip(cast(list[object], example), cast(list[object], actual), strict=False)
        return [k for e, a in pairs for k in _unknown_keys(e, a, path)]
    return []


def _check(model: type[BaseModel], example: object) -> None:
    dumped = model.model_validate(example).model_dump(mode="json")
    assert _unknown_keys(example, dumped) == [], f"{model.__name__} example has fields the model lacks"
    if issubclass(model, FactsAnswer):  # a tool answer's example is a whole answer, exactly as sent
        assert model.model_validate(example, context=STRICT_CONTEXT).model_dump(mode="json") == example


def test_every_json_example_of_the_protocol_parses_and_fits_its_model() -> None:
    checked: set[str] = set()
    for block in _json_blocks(PROTOCOL):
        example = obj(block)
        if str(example.get("id", "")).startswith("plugin:"):
            _check(AgentRunnerManifest, example)
            checked.add("manifest")
        elif "trigger" in example:
            _check(AgentRunContext, example)
            checked.add("context")
        elif "isError" in example:
            assert set(example["structuredContent"]) == {"code", "message", "retryable", "details"}  # pyright: ignore[reportArgumentType]
            checked.add("tool error")
        elif "items" in example and "prev_cursor" in example:
            _check(HistoryPage, example)
            checked.add("history_page")
        elif "data_truncated" in example:
            _check(EventRecord, example)
            checked.add("events_get")
        elif "encoding" in example:
            _check(ArtifactChunk, example)
            checked.add("artifacts_read")
        elif "chunks" in example:
            _check(KnowledgeHits, example)
            checked.add("knowledge_retrieve")
    assert checked == {
        "manifest",
        "context",
        "tool error",
        "history_page",
        "events_get",
        "artifacts_read",
        "knowledge_retrieve",
    }


def test_the_stdio_exchange_of_the_protocol_is_valid() -> None:
    section = PROTOCOL.split("## 11.", 1)[1]
    exchange = re.search(r"```\n(.*?)```", section, re.DOTALL)
    assert exchange is not None
    results = 0
    for line in exchange.group(1).splitlines():
        try:
            message = json.loads(line[2:])
        except ValueError:
            continue  # lines shortened with … outside strings
        assert message["jsonrpc"] == "2.0"
        if message.get("method") == METHOD_RESULT:
            result = RESULT_ADAPTER.validate_python(message["params"]["result"])
            assert result.run_id == message["params"]["run_id"]
            results += 1
        elif isinstance(message.get("result"), dict) and "plugin" in message["result"]:
            answer = InitializeResult.model_validate(message["result"])
            for manifest in answer.runners:
                AgentRunnerManifest.model_validate(manifest)
    assert results >= 2


def test_every_host_error_is_in_the_architectures_error_table() -> None:
    def tree(cls: type[HostError]) -> list[type[HostError]]:
        return [cls, *(sub for child in cls.__subclasses__() for sub in tree(child))]

    # Only the tree of errors.py: subclasses elsewhere exist only once their module is imported.
    errors = {cls.__name__: cls for cls in tree(HostError) if cls.__module__ == "mcphost.errors"}
    del errors["HostError"]
    assert _missing(list(errors), ARCHITECTURE) == []
    codes = {cls.code for cls in errors.values()}
    assert _missing(codes, ARCHITECTURE) == []


def test_every_exported_json_schema_is_named_in_the_protocol() -> None:
    assert _missing(list(json_schemas()), PROTOCOL) == []


def test_the_protocol_names_the_answer_model_and_schema_of_every_facts_tool() -> None:
    rows = re.findall(r"^\| `(\w+)` \| `(\w+)` \| `(\w+)` \|$", PROTOCOL, re.MULTILINE)
    documented = {tool: (model, schema) for tool, model, schema in rows if tool in FACTS_TOOLS}
    assert documented == {tool: (model.__name__, f"{tool}_answer") for tool, model in FACTS_ANSWERS.items()}


def test_every_module_and_package_of_the_host_and_every_public_runner_is_in_the_layout() -> None:
    """Top-level modules and packages of mcphost, and mcphost_runners' public modules; private modules inside a
    package are described with their package but not required here."""
    host = [p.name for p in (ROOT / "mcphost").iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()]
    runners = [p.name for p in (ROOT / "mcphost_runners").glob("[!_]*.py")]
    names = [n for n in host + runners if n != "__init__.py"]
    assert sorted(n for n in names if n.removesuffix(".py") not in ARCHITECTURE) == []
