"""Import and encapsulation rules of the rlxpy package, checked on the source with ``ast`` (nothing is
imported):

- the graph of module-level imports between rlxpy's modules has no cycle, and neither has the
  graph between its subpackages (ir, wgpu_backend, frontends, models, ...). A function's imports
  and ``if TYPE_CHECKING:`` blocks do not count: they run later or never;
- in rlxpy/wgpu_backend a function-level import has a comment on its line or the line above
  saying why (an optional or slow dependency, a cycle that cannot be broken);
- no module reads another object's private attribute: ``x._name`` where ``x`` is not ``self`` or
  ``cls`` and ``_name`` is not a dunder, ``getattr(x, "_name")``, ``from m import _name`` or an
  import from a private module, except for the third-party internals listed in ALLOWED_PRIVATE.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "rlxpy"

#: Private names of other libraries that rlxpy must use, and why.
ALLOWED_PRIVATE = {
    "_internal": "wgpu-py objects' wgpu-native handle: the raw encode path calls wgpu-native directly "
                 "(three C calls per dispatch), and the queue's timestamp period has no wrapper",
    "_ffi": "wgpu-py's cffi binding of wgpu-native (wgpu.backends.wgpu_native._ffi), for the same calls",
    "_schema": "torch: an OpOverload's schema (op name, argument names and defaults) has no public accessor",
    "_overloadname": "torch: an OpOverload's overload name, for messages",
    "_version": "torch: a tensor's in-place update counter (detects weights mutated between calls)",
    "_dynamo_static_input_type": "torch.compile marks static (weight) inputs with it",
    "_guards": "torch: TracingContext, aot_autograd's record of which inputs are weights",
    "_dynamo": "torch.compile's backend registry and aot_autograd (torch._dynamo is its public home)",
    "_decomp": "torch's core-aten decomposition table (torch._decomp is its public home)",
    "_subclasses": "torch: leaving fake-tensor mode to read real constants while tracing",
}
#: ``aten._softmax`` and friends: aten ops whose real names begin with an underscore.
OP_NAMESPACES = {"aten"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
TREES = {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


def _is_type_checking(node: ast.If) -> bool:
    return "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(tree: ast.AST, in_function: bool = False) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """(import statement, inside a function) for every import that runs (not under TYPE_CHECKING)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, in_function
        elif isinstance(node, ast.If) and _is_type_checking(node):
            yield from (item for child in node.orelse for item in _imports(child, in_function))
        else:
            function = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            yield from _imports(node, in_function or function)


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    """The rlxpy modules an import statement loads, parent packages included (``import a.b.c`` runs
    a/__init__ and a/b/__init__ first), except packages that contain ``module`` itself."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = module.split(".") if MODULES[module].name == "__init__.py" else module.split(".")[:-1]
            package = package[: len(package) - node.level + 1]
            base = ".".join(package + ([base] if base else []))
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
    found = set()
    for name in names:
        parts = name.split(".")
        for end in range(1, len(parts) + 1):
            prefix = ".".join(parts[:end])
            if prefix in MODULES and prefix != module and not module.startswith(prefix + "."):
                found.add(prefix)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the rlxpy modules its module-level imports load."""
    graph: dict[str, set[str]] = {}
    for module, tree in TREES.items():
        graph[module] = set()
        for node, in_function in _imports(tree):
            if not in_function:
                graph[module] |= _targets(module, node)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (as a path that returns to its start), or None."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for succ in sorted(graph.get(node, ())):
            if state.get(succ) == 1:
                return path[path.index(succ):] + [succ]
            if succ not in state:
                found = visit(succ)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return None


def _subpackage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def test_find_cycle_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_module_imports_are_acyclic():
    graph = import_graph()
    assert len(graph) > 100 and "rlxpy.ir.graph" in graph["rlxpy.ir.reference.core"]
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_subpackage_imports_are_acyclic():
    packages: dict[str, set[str]] = {}
    for module, targets in import_graph().items():
        packages.setdefault(_subpackage(module), set()).update(
            _subpackage(t) for t in targets if _subpackage(t) != _subpackage(module))
    assert "models" in packages["frontends"]  # frontends load files into models, never the reverse
    assert find_cycle(packages) is None, " -> ".join(find_cycle(packages) or [])


def test_function_level_imports_in_wgpu_backend_say_why():
    unexplained = []
    for module, tree in TREES.items():
        if not module.startswith("rlxpy.wgpu_backend"):
            continue
        lines = MODULES[module].read_text().splitlines()
        for node, in_function in _imports(tree):
            said = "#" in lines[node.lineno - 1] or lines[node.lineno - 2].strip().startswith("#")
            if in_function and not said:
                unexplained.append(f"{MODULES[module].relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert not unexplained, "hoist these imports, or say why they stay:\n" + "\n".join(unexplained)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _walk(tree: ast.AST, classes: frozenset[str] = frozenset()) -> Iterator[tuple[ast.AST, frozenset[str]]]:
    """Every node, with the names of the classes it sits in (a class may use its own private names)."""
    for node in ast.iter_child_nodes(tree):
        yield node, classes
        yield from _walk(node, classes | {node.name} if isinstance(node, ast.ClassDef) else classes)


def private_reads(tree: ast.AST) -> Iterator[tuple[int, str, str]]:
    """(line, private name, the expression) for every read of another object's private name."""
    for node, classes in _walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in ({"self", "cls"} | OP_NAMESPACES | classes):
                continue
            yield node.lineno, node.attr, ast.unparse(node)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) >= 2:
            first, name = node.args[0], node.args[1]
            if isinstance(name, ast.Constant) and isinstance(name.value, str) and _private(name.value) \
                    and not (isinstance(first, ast.Name) and first.id in ("self", "cls")):
                yield node.lineno, name.value, ast.unparse(node)
        elif isinstance(node, ast.ImportFrom):
            for part in (node.module or "").split("."):
                if _private(part):
                    yield node.lineno, part, ast.unparse(node)
            for alias in node.names:
                if _private(alias.name):
                    yield node.lineno, alias.name, ast.unparse(node)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                for part in alias.name.split("."):
                    if _private(part):
                        yield node.lineno, part, ast.unparse(node)


def test_private_reads_are_caught():
    source = ("self._a; cls._b; x.__len__; aten._softmax; x._c; getattr(y, '_d'); from m import _e\n"
              "from m._f import g\nclass K:\n    def f(self): K._g; J._h")
    assert sorted(name for _, name, _ in private_reads(ast.parse(source))) == ["_c", "_d", "_e", "_f", "_h"]


def test_no_module_reads_another_objects_private_attributes():
    found = []
    for module, tree in TREES.items():
        for line, name, text in private_reads(tree):
            if name not in ALLOWED_PRIVATE:
                found.append(f"{MODULES[module].relative_to(ROOT)}:{line}: {text}")
    assert not found, "use (or add) a public method or property instead:\n" + "\n".join(found)
