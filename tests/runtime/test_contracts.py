"""House rules of the generic machinery (controller/runtime, controller/ops): modules and classes small enough
to read whole, and a contract on every public function and method of the runtime, because everything else
stands on it and its callers read the docstring, not the body."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
AREAS = [ROOT / "controller" / "runtime", ROOT / "controller" / "ops"]
MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 400


def _modules(*areas: Path) -> list[Path]:
    return sorted(path for area in areas for path in area.rglob("*.py"))


def _public_functions(tree: ast.Module) -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Module-level functions and the methods of public classes whose names do not start with ``_``."""
    found = []

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                visit(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
                found.append((f"{prefix}{node.name}", node))

    visit(tree.body, "")
    return found


def test_no_module_or_class_is_too_long_to_read_whole():
    too_long = []
    for path in _modules(*AREAS):
        text = path.read_text()
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            too_long.append(f"{path.relative_to(ROOT)}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                size = node.end_lineno - node.lineno + 1
                if size > MAX_CLASS_LINES:
                    too_long.append(f"{path.relative_to(ROOT)}: class {node.name}: {size} lines")
    assert not too_long, "\n".join(too_long)


def test_every_public_function_of_the_runtime_states_its_contract():
    missing = []
    for path in _modules(AREAS[0]):
        for name, node in _public_functions(ast.parse(path.read_text())):
            doc = ast.get_docstring(node)
            if not doc or not doc.strip():
                missing.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
    assert not missing, "public functions without a docstring:\n" + "\n".join(missing)


def test_the_rule_sees_what_it_checks():
    # The walk finds public methods of public classes and skips private names, so an empty result above
    # means documented, not unseen.
    tree = ast.parse(
        "def f(): pass\n"
        "def _g(): pass\n"
        "class A:\n    def m(self): pass\n    def _n(self): pass\n"
        "class _B:\n    def m(self): pass\n"
    )
    assert [name for name, _ in _public_functions(tree)] == ["f", "A.m"]
    runtime = _modules(AREAS[0])
    assert ROOT / "controller" / "runtime" / "rest.py" in runtime
    assert sum(len(_public_functions(ast.parse(p.read_text()))) for p in runtime) > 150
