"""Field descriptions come from the docstrings under the fields, read on a model's first schema build."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys
from typing import Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from pydantic._internal._docs_extraction import extract_docstrings_from_cls  # the rules we follow

import mcphost
import mcphost_runners
from mcphost.common.fielddocs import DocumentedModel
from tests.examples.clikit import cli_env

T = TypeVar("T")


class Parent(DocumentedModel):
    model_config = ConfigDict(defer_build=True)

    a: int = 0
    """The parent's a."""
    b: int = 0
    """The parent's b."""
    explicit: int = Field(default=0, description="given")
    """Not used: an explicit description wins."""


class Child(Parent):
    b: int = 1  # annotated again without a docstring: no description, as with pydantic
    c: str = ""
    """The child's c."""


class Page(DocumentedModel, Generic[T]):
    model_config = ConfigDict(defer_build=True)

    items: list[T]
    """The page's items."""


def _descriptions(model: type[BaseModel]) -> dict[str, str | None]:
    model.model_json_schema()  # builds the schema, and so reads the docstrings
    return {name: field.description for name, field in model.model_fields.items()}


def test_a_class_built_later_is_described_when_its_schema_is_first_built() -> None:
    assert Parent.model_fields["a"].description is None  # nothing read at class creation
    assert _descriptions(Child) == {
        "a": "The parent's a.",
        "b": None,
        "explicit": "given",
        "c": "The child's c.",
    }
    assert _descriptions(Parent) == {"a": "The parent's a.", "b": "The parent's b.", "explicit": "given"}


def test_a_parametrized_generic_takes_the_docstrings_of_its_origin() -> None:
    schema = Page[int].model_json_schema()
    assert schema["properties"]["items"]["description"] == "The page's items."


def test_a_nested_model_is_described_when_the_model_holding_it_is_built() -> None:
    class Inner(DocumentedModel):
        model_config = ConfigDict(defer_build=True)

        x: int
        """Inner x."""

    class Outer(DocumentedModel):
        inner: Inner
        """Outer's inner."""

    schema = Outer.model_json_schema()
    assert schema["$defs"]["Inner"]["properties"]["x"]["description"] == "Inner x."
    assert schema["properties"]["inner"]["description"] == "Outer's inner."


def _documented_models() -> list[type[DocumentedModel]]:
    for package in (mcphost, mcphost_runners):
        for module in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if not module.name.endswith("__main__") and ".migrations" not in module.name:
                importlib.import_module(module.name)
    found: list[type[DocumentedModel]] = []
    todo: list[type[DocumentedModel]] = [DocumentedModel]
    while todo:
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            if sub.__module__.startswith(("mcphost.", "mcphost_runners.")):
                found.append(sub)
    return found


def test_every_model_has_the_descriptions_pydantics_own_reading_gives() -> None:
    models = _documented_models()
    assert len(models) > 200  # the protocol, host, config, store and API models
    for model in models:
        _descriptions(model)
        docs = extract_docstrings_from_cls(model, use_inspect=True)
        for name in inspect.get_annotations(model):
            if name in docs and name in model.model_fields:
                assert model.model_fields[name].description == docs[name], (model, name)


def test_importing_the_protocol_reads_no_source_for_docstrings() -> None:
    code = (
        "import mcphost.protocol, mcphost.models\n"
        "from mcphost.common import fielddocs\n"
        "print(fielddocs._module_docs.cache_info().currsize)\n"  # pyright: ignore[reportPrivateUsage]
        "print(fielddocs._statement_docs.cache_info().currsize)"  # pyright: ignore[reportPrivateUsage]
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=cli_env(), capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["0", "0"]
