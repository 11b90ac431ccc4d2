"""Rules of the code's shape that import-linter cannot express.

The framework dispatches to plugins through their hooks (``events_to_register``, the extension-point
interfaces); it must not know in-tree plugins by name, or adding a plugin would mean editing the framework.
The one list allowed to name them is upstream's default profile (``builder.DEFAULT_MULTI_POINT``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import kopf_scheduler.framework as framework_package
from kopf_scheduler.plugins.registry import in_tree_registry

FRAMEWORK_DIR = Path(framework_package.__file__).parent


def _code_strings(tree: ast.AST) -> list[tuple[int, str]]:
    """String constants that are code, not docstrings (a docstring may describe upstream's plugins)."""
    docstrings: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def _default_list_lines(tree: ast.Module) -> range:
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "DEFAULT_MULTI_POINT":
            return range(node.lineno, (node.end_lineno or node.lineno) + 1)
    return range(0)


def test_no_framework_module_names_an_in_tree_plugin_outside_the_default_profile() -> None:
    names = set(in_tree_registry())
    assert "NodeResourcesFit" in names  # the registry really holds the in-tree plugins
    offenders = []
    for path in sorted(FRAMEWORK_DIR.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        allowed = _default_list_lines(tree) if path.name == "builder.py" else range(0)
        offenders += [
            f"{path.relative_to(FRAMEWORK_DIR)}:{line}: {value!r}"
            for line, value in _code_strings(tree)
            if value in names and line not in allowed
        ]
    assert offenders == []


def test_the_check_sees_a_plugin_name_in_code() -> None:
    tree = ast.parse('"""Mentions NodePorts."""\nTABLE = {"NodePorts": 1}\n')
    assert _code_strings(tree) == [(2, "NodePorts")]
