"""An import-linter contract type the built-in ones lack: "these modules may import only these of that package".

`only` is a `forbidden` contract with exceptions: `source_modules` may import none of `forbidden_modules`
(wildcards such as `mcphost.*` welcome) directly or indirectly, except `allowed_modules` and what is
inside them. import-linter's wildcards cannot exclude a module, and listing every forbidden module by
name lets a new package slip through unforbidden; with `mcphost.*` every new package is forbidden until
it is allowed here. Registered in `pyproject.toml` (`[tool.importlinter] contract_types`); `lint-imports`
puts the project root on `sys.path`, so this module is found as `tests.import_contracts`.
"""

from __future__ import annotations

from typing import cast

from grimp import ImportGraph
from importlinter.contracts.forbidden import ForbiddenContract
from importlinter.domain import fields
from importlinter.domain.contract import ContractCheck
from importlinter.domain.helpers import module_expressions_to_modules
from importlinter.domain.imports import ModuleExpression


class OnlyContract(ForbiddenContract):
    """`source_modules` import nothing of `forbidden_modules` but `allowed_modules` (and their insides)."""

    type_name = "only"

    allowed_modules = fields.SetField(subfield=fields.ModuleExpressionField())

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        # A field attribute holds its parsed value (a set of ModuleExpression) once the contract is built.
        expressions = cast("set[ModuleExpression]", self.allowed_modules)
        allowed = module_expressions_to_modules(graph, expressions, as_packages=True)
        matched = module_expressions_to_modules(graph, self.forbidden_modules)
        if not allowed or not matched:
            raise ValueError(
                f"Contract {self.name!r}: allowed_modules and forbidden_modules must each match a module."
            )
        self.forbidden_modules = {ModuleExpression(m.name) for m in matched if m not in allowed}
        return super().check(graph, verbose)
