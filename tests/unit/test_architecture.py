"""Rules of the code's shape that import-linter cannot express.

kopf's private modules (``kopf._cogs``, ``kopf._core``) and the private fields the hooks reach into are named in
one module only, the seam ``kopf_hooks.py`` (import-linter sees ``kopf`` as one package, private or not).

The framework dispatches to plugins through their hooks (``events_to_register``, the extension-point
interfaces); it must not know in-tree plugins by name, or adding a plugin would mean editing the framework.
The one list allowed to name them is upstream's default profile (``builder.DEFAULT_MULTI_POINT``).

Every module stays under 800 lines (a longer one bundles several concerns), and every ``type: ignore`` the
type checker is told names its error code and says why.
"""

from __future__ import annotations

import ast
import re
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


# -- kopf's internals behind one seam ---------------------------------------------------------------------------
PACKAGE_DIR = FRAMEWORK_DIR.parent
SEAM = PACKAGE_DIR / "kopf_hooks.py"
#: A private kopf module, in code, a string or a comment: ``kopf._cogs...``, ``kopf._core...``.
PRIVATE_KOPF = re.compile(r"\bkopf\._")
#: What the hooks reach into besides kopf's private modules: the registry's per-purpose sub-registries, and
#: aiohttp's keyword defaults.
PRIVATE_ATTRIBUTES = {"_changing", "_spawning", "_indexing", "_webhooks", "_watching", "_activities", "__kwdefaults__"}


def _private_kopf_uses(path: Path) -> list[str]:
    source = path.read_text()
    found = [f"{line}: {text.strip()}" for line, text in enumerate(source.splitlines(), 1) if PRIVATE_KOPF.search(text)]
    tree = ast.parse(source, filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE_ATTRIBUTES:
            found.append(f"{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kopf._"):
            found.append(f"{node.lineno}: from {node.module} import")
    return found


def test_no_module_but_the_seam_imports_or_names_a_private_kopf_module() -> None:
    offenders = {
        str(path.relative_to(PACKAGE_DIR)): uses
        for path in sorted(PACKAGE_DIR.rglob("*.py"))
        if path != SEAM and (uses := _private_kopf_uses(path))
    }
    assert offenders == {}
    assert _private_kopf_uses(SEAM), "the seam itself holds the hooks"


def test_the_check_sees_private_kopf_in_code_strings_and_registry_fields(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        'import kopf._cogs.clients.api\nNAME = "kopf._core.engines.peering"\nx = registry._changing\n'
        "y = f.__kwdefaults__\nfrom kopf._core import reactor\n"
    )
    assert sorted(use.split(":")[0] for use in _private_kopf_uses(sample)) == ["1", "2", "3", "4", "5", "5"]


#: The size a module may reach: beyond it, it bundles several concerns (split it by cohesion, as upstream's files).
MAX_MODULE_LINES = 800


def _oversized_modules(root: Path) -> list[str]:
    return sorted(
        f"{path.relative_to(root)}: {lines} lines"
        for path in root.rglob("*.py")
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) >= MAX_MODULE_LINES
    )


def test_every_module_is_under_the_size_limit() -> None:
    assert _oversized_modules(PACKAGE_DIR) == []


def test_the_size_check_sees_a_long_module(tmp_path: Path) -> None:
    (tmp_path / "small.py").write_text("x = 1\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "long.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    assert _oversized_modules(tmp_path) == [f"pkg/long.py: {MAX_MODULE_LINES} lines"]


#: ``# type: ignore[code]`` followed by ``# why``.
EXPLAINED_IGNORE = re.compile(r"# type: ignore\[[\w, -]+\]\s+#\s*\S")


def _unexplained_ignores(root: Path) -> list[str]:
    return [
        f"{path.relative_to(root)}:{number}"
        for path in sorted(root.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "# type: ignore" in line and not EXPLAINED_IGNORE.search(line)
    ]


def test_every_type_ignore_names_its_code_and_says_why() -> None:
    assert _unexplained_ignores(PACKAGE_DIR) == []


def test_the_ignore_check_sees_a_bare_or_unexplained_ignore(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        "a = 1  # type: ignore\nb = 2  # type: ignore[assignment]\nc = 3  # type: ignore[assignment]  # the reason\n"
    )
    assert _unexplained_ignores(tmp_path) == ["m.py:1", "m.py:2"]
