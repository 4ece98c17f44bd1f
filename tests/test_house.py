"""The house rules a newcomer relies on, checked on every tracked file.

- Comments and docs stand on their own: no pointer to a document outside the repository (a section sign,
  a machine path, notes kept elsewhere) and no tracker number; what a comment relied on is said in it.
- Every module path (``controller.runtime.ratelimit.TokenBucket``, ``tfjob_sim.kubelet.EXIT_CODE``) and every file path
  (``docs/metrics.md``) a comment or a doc names exists, so a rename cannot leave stale statements behind.
- No import circle between the modules of the product, the simulator and the generators: every import counts,
  also one inside a function or under ``TYPE_CHECKING`` (a circle hidden that way is still two modules that
  cannot be understood, tested or replaced one without the other).
- The test command of ``.ci/run`` is README's, byte for byte.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()
PROFILES = ROOT / "docs" / "benchmarks" / "profiles"

# Text files: what a reader reads. Images, profiles' raw samples and the like are not prose.
TEXT_SUFFIXES = (".py", ".md", ".yaml", ".yml", ".toml", ".json", ".txt", ".cfg", ".ini", ".sh", ".j2")
TEXT_NAMES = ("Dockerfile", "run", ".gitignore", ".dockerignore")

# What must not appear, each with the reason a reader would be stuck.
FORBIDDEN = {
    "a machine path": (re.compile(r"/work/"), "a path on one machine; say the fact"),
    "notes outside the repository": (
        re.compile(
            r"shared/reference|\b(?:tfjob-upstream-spec|k8s-api-semantics|apiserver-logs-events-auth|gang-scheduling|tensorflow-and-real-pods)\.md"
        ),
        "notes that are not in the repository; say what they say",
    ),
    "a tracker number": (
        re.compile(r"\bissues? ?#?\d+|\bby the issue\b|\bthe issue's\b", re.IGNORECASE),
        "a tracker entry; say what was decided and why",
    ),
}

# Files pyproject.toml announces for work still under way (their extras are installed for them); each
# leaves this set when it is written, which the test below enforces.
ANNOUNCED: frozenset[str] = frozenset()

# Dotted paths into the product and the simulator, and repository-relative file paths.
MODULE_REFERENCE = re.compile(
    r"\b(?:controller\.(?:runtime|tfjob|ops|app|cli)|tfjob_sim|generators)(?:\.[A-Za-z_]\w*)*"
)
FILE_REFERENCE = re.compile(
    r"(?<![\w./-])((?:controller|sim|tests|docs|benchmarks|tools|grafana|manifests|examples|generators)/[\w./-]*"
    r"\.(?:py|md|ya?ml|json|txt|toml))\b"
)


@cache
def tracked_text_files() -> tuple[Path, ...]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    files = []
    for name in listed.decode().split("\0"):
        path = ROOT / name
        if not name or name == THIS or not path.is_file():
            continue
        if path.suffix in TEXT_SUFFIXES or path.name in TEXT_NAMES:
            files.append(path)
    assert len(files) > 100, "git ls-files found too few files: not run in a checkout?"
    return tuple(files)


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


@pytest.mark.parametrize("what", sorted(FORBIDDEN))
def test_no_comment_or_doc_points_outside_the_repository(what: str) -> None:
    pattern, why = FORBIDDEN[what]
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}"
        for path in tracked_text_files()
        for number, line in enumerate(read(path).splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, f"{what} ({why}):\n" + "\n".join(found)


SECTION = re.compile("\N{SECTION SIGN}" r" ?(\d+(?:\.\d+)*)")
DOC_NAME = re.compile(r"[\w./-]+\.md\b")


def _section_target(path: Path, line: str, start: int) -> Path | None:
    """The document a section sign at ``start`` of ``line`` refers to: the last ``*.md`` named before it on
    the line (relative to the file's directory or the checkout), else the Markdown file itself."""
    named = [m.group(0) for m in DOC_NAME.finditer(line, 0, start)]
    if named:
        for candidate in (path.parent / named[-1], ROOT / named[-1]):
            if candidate.is_file():
                return candidate
        return None
    return path if path.suffix == ".md" else None


def test_every_numbered_section_a_comment_or_doc_names_is_in_the_repository() -> None:
    """A section sign is fine when it names a numbered heading of a document in this repository; one that
    names a section of a document kept elsewhere (or of no document) leaves the reader stuck."""
    headings: dict[Path, str] = {}
    unresolved = []
    for path in tracked_text_files():
        for number, line in enumerate(read(path).splitlines(), 1):
            for match in SECTION.finditer(line):
                target = _section_target(path, line, match.start())
                if target is not None and target not in headings:
                    headings[target] = "\n".join(h for h in read(target).splitlines() if h.startswith("#"))
                section = match.group(1)
                if target is None or not re.search(rf"^#+ {re.escape(section)}[. ]", headings[target], re.MULTILINE):
                    where = target.relative_to(ROOT) if target is not None else "no document of this repository"
                    unresolved.append(f"{path.relative_to(ROOT)}:{number}: {match.group(0)} ({where})")
    assert not unresolved, "sections that are not headings of the document named:\n" + "\n".join(unresolved)


def _resolves(reference: str) -> bool:
    parts = reference.split(".")
    for split in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attribute in parts[split:]:
            if not hasattr(target, attribute):
                return False
            target = getattr(target, attribute)
        return True
    return False


def test_every_module_and_file_a_comment_or_doc_names_exists() -> None:
    stale = []
    for path in tracked_text_files():
        if path.parent == PROFILES and path.suffix == ".txt":
            continue  # raw stack samples of past runs: they name the files as they were then
        text = read(path)
        stale += [
            f"{path.relative_to(ROOT)}: {m.group(0)}"
            for m in MODULE_REFERENCE.finditer(text)
            if not _resolves(m.group(0))
        ]
        stale += [
            f"{path.relative_to(ROOT)}: {m.group(1)}"
            for m in FILE_REFERENCE.finditer(text)
            # relative to the checkout, or (links in docs) to the file's own directory
            if not (ROOT / m.group(1)).exists() and not (path.parent / m.group(1)).exists()
        ]
    stale = [entry for entry in stale if entry.split(": ", 1)[1] not in ANNOUNCED]
    assert not stale, "names that do not exist (renamed or moved?):\n" + "\n".join(sorted(set(stale)))
    written = sorted(name for name in ANNOUNCED if (ROOT / name).exists())
    assert not written, f"{written} exist now: take them out of ANNOUNCED"


def test_ci_runs_the_test_command_readme_gives() -> None:
    readme = read(ROOT / "README.md")
    ci = read(ROOT / ".ci" / "run").splitlines()
    command = next(line for line in readme.splitlines() if line.endswith("-m pytest -q"))
    assert command in ci, f"README's test command is not a line of .ci/run: {command}"


# -- import circles -------------------------------------------------------------------------------------------

# Where each top-level package lives (its parent directory is on the import path).
PACKAGES = {"controller": ROOT, "tfjob_sim": ROOT / "sim", "generators": ROOT}

# Circles tolerated for now (none left). It may shrink, not grow.
KNOWN_CIRCLES: list[set[str]] = []


def _modules() -> dict[str, Path]:
    modules = {}
    for package, parent in PACKAGES.items():
        for path in (parent / package).rglob("*.py"):
            parts = list(path.relative_to(parent).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of ``modules`` that ``name`` imports, anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    named: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            named.add(module)
            named.update(f"{module}.{alias.name}" for alias in node.names)  # `from pkg import module`
    found = set()
    for target in named:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)
    return found


def _circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(component)
    return circles


def test_circles_are_found() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _circles(graph) == [{"a", "b", "c"}]
    modules = _modules()
    assert "tfjob_sim.gang.common" in _imports("tfjob_sim.kubelet", modules["tfjob_sim.kubelet"], modules)
    assert "controller.runtime.clock" in _imports(
        "controller.runtime.ratelimit", modules["controller.runtime.ratelimit"], modules
    )


def test_no_import_circle_between_modules() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    circles = _circles(graph)
    new = [sorted(circle) for circle in circles if circle not in KNOWN_CIRCLES]
    assert not new, f"import circles: {new}"
    gone = [sorted(circle) for circle in KNOWN_CIRCLES if circle not in circles]
    assert not gone, f"{gone} is no longer a circle (or changed): update KNOWN_CIRCLES"


# -- one-way doors ----------------------------------------------------------------------------------------------

# Who may import whom, by top-level package of the importing file: the product stands alone; the simulator (and
# its own tests) builds on the product; benchmarks build on both; only the product's tests see everything.
FORBIDDEN_IMPORTS = {
    "controller": ("tfjob_sim", "tests", "benchmarks"),
    "tfjob_sim": ("tests", "benchmarks"),
    "sim/tests": ("tests", "benchmarks"),
    "benchmarks": ("tests",),
    "generators": ("tfjob_sim", "tests", "benchmarks"),
}
WHERE = {
    "controller": ROOT / "controller",
    "tfjob_sim": ROOT / "sim" / "tfjob_sim",
    "sim/tests": ROOT / "sim" / "tests",
    "benchmarks": ROOT / "benchmarks",
    "generators": ROOT / "generators",
}
DYNAMIC_IMPORTS = {"import_module", "__import__", "find_spec"}


def imported_names(path: Path) -> list[tuple[int, str]]:
    """Every module ``path`` imports, by statement or by a call of importlib with a literal name (line, name);
    relative imports name their own package, which never crosses a door."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in DYNAMIC_IMPORTS and isinstance(node.args[0].value, str):
                found.append((node.lineno, node.args[0].value))
    return found


def test_imports_go_one_way_only() -> None:
    wrong = []
    for origin, forbidden in FORBIDDEN_IMPORTS.items():
        files = sorted(WHERE[origin].rglob("*.py"))
        assert files, f"no Python files under {WHERE[origin]}"
        for path in files:
            for line, name in imported_names(path):
                top = name.split(".")[0]
                if top in forbidden:
                    wrong.append(f"{path.relative_to(ROOT)}:{line}: {origin} imports {name}")
    assert not wrong, "imports through a one-way door:\n" + "\n".join(wrong)


def test_the_door_check_sees_every_kind_of_import(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import tests.waiting\nfrom tfjob_sim import store\nfrom . import sibling\n"
        "import importlib\nimportlib.import_module('tfjob_sim.demo')\n__import__('benchmarks.scale')\n"
    )
    assert [name for _, name in imported_names(probe)] == [
        "tests.waiting",
        "tfjob_sim",
        "importlib",
        "tfjob_sim.demo",
        "benchmarks.scale",
    ]


# -- rooms a reader can hold in mind ---------------------------------------------------------------------------

SIZE_LIMITS = (
    # (where, the most lines of one module or None, the most lines of one class)
    (ROOT / "controller", 600, 400),
    (ROOT / "sim" / "tfjob_sim", None, 600),
)


def test_no_module_or_class_is_too_large_to_read() -> None:
    too_large = []
    for where, module_limit, class_limit in SIZE_LIMITS:
        for path in sorted(where.rglob("*.py")):
            text = path.read_text()
            lines = text.count("\n")
            if module_limit is not None and lines > module_limit:
                too_large.append(f"{path.relative_to(ROOT)}: {lines} lines (at most {module_limit})")
            for node in ast.walk(ast.parse(text, str(path))):
                if isinstance(node, ast.ClassDef):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > class_limit:
                        too_large.append(
                            f"{path.relative_to(ROOT)}: class {node.name}, {length} lines (at most {class_limit})"
                        )
    assert not too_large, "split by feature:\n" + "\n".join(too_large)


# -- contracts where callers read them ----------------------------------------------------------------------

CONTRACTED = (ROOT / "controller" / "runtime", ROOT / "controller" / "tfjob")


def public_callables(tree: ast.Module) -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Public functions of a module and public methods of its public classes (``__init__`` is the class's)."""
    found: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]] = []

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
                found.append((prefix + node.name, node))
            elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                visit(node.body, f"{prefix}{node.name}.")

    visit(tree.body, "")
    return found


def test_every_public_function_and_method_of_runtime_and_tfjob_has_a_contract() -> None:
    counted = 0
    missing = []
    for where in CONTRACTED:
        for path in sorted(where.rglob("*.py")):
            for name, node in public_callables(ast.parse(path.read_text(), str(path))):
                counted += 1
                if not ast.get_docstring(node):
                    missing.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
    assert counted > 250, f"only {counted} public functions and methods found: has the layout changed?"
    assert not missing, f"{len(missing)} of {counted} have no docstring:\n" + "\n".join(missing)


def test_the_contract_rule_sees_what_it_checks() -> None:
    # The walk finds public functions and the public methods of public classes and skips private names, so an
    # empty result above means documented, not unseen.
    tree = ast.parse(
        "def f(): pass\n"
        "def _g(): pass\n"
        "class A:\n    def m(self): pass\n    def _n(self): pass\n"
        "class _B:\n    def m(self): pass\n"
    )
    assert [name for name, _ in public_callables(tree)] == ["f", "A.m"]
    runtime = sorted((ROOT / "controller" / "runtime").rglob("*.py"))
    assert ROOT / "controller" / "runtime" / "rest.py" in runtime
    assert sum(len(public_callables(ast.parse(p.read_text()))) for p in runtime) > 150
