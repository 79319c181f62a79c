"""Figures of the code's shape, read from the source of a tree (no import of it): how big the command line is,
how the engine reaches an instrument, how settings are read, which modules import each other in a circle,
and how long the scan path's parameter lists are. One run prints them; nothing is timed.

Figures, each by a stated heuristic over the AST of every module of the package's parts (``grid``,
``analysis``, ``actors``, ``instruments``, ``cluster``, ``results``, ``jobs``):

1. **lines in jobs/** — physical lines of every ``jobs/**/*.py`` (as ``wc -l`` counts them).
2. **getattr/hasattr checks on instruments** — calls ``getattr(x, …)`` / ``hasattr(x, …)`` whose first
   argument ``x`` is an instrument object, judged by its text: a name or attribute chain whose last part
   is ``instrument`` or ``inst`` (``instrument``, ``spec.instrument``, ``ref.instrument``,
   ``self.instrument``), or a call of ``resolve(…)`` or ``instrument_ref(…).instrument``.
3. **import cycles** — strongly connected components of more than one module in the module import graph
   (statement imports at any depth, lazy imports inside functions included, and
   ``importlib.import_module("…")`` with a constant string); each printed as a chain ``a → b → a``.
4. **string-key settings lookups** — ``x["key"]`` and ``x.get("key", …)`` with a constant string key
   where ``x`` (after peeling off such lookups: ``settings["a"]["b"]`` counts two) is a name or attribute
   whose last part is ``settings``, ``frozen``, ``values``, ``spec``, ``raw``, ``section``, ``config`` or
   ``execution``, or ends in ``_`` and one of those (``frozen_settings``, ``old_spec``).
5. **longest parameter list on the scan path** — parameters of each function (positional, keyword-only,
   ``*args`` and ``**kwargs`` each one; ``self``/``cls`` not counted) in ``jobs/scan*.py``,
   ``jobs/dry_run.py``, ``jobs/plan.py``, ``cluster/scan/sweep.py``, ``cluster/scan/stages.py``,
   ``cluster/scan/pipeline.py`` and every ``cluster/*run*.py``; the five longest are listed.

A tree whose modules import the parts as top-level packages (``import grid.spec``, a release before the
one package) and one that imports them as ``mirrorscan.grid.spec`` give the same module names: the
``mirrorscan.`` prefix is dropped. The import graph read here is also the one the layer test checks
(``tests/test_layers.py`` loads this file by its path).

Run: ``.venv/bin/python bench/architecture.py [TREE] [--lookups]`` (TREE: a checkout's root; default this repository).
"""

from __future__ import annotations

import argparse
import ast
from dataclasses import dataclass
from pathlib import Path

PARTS = ("grid", "analysis", "actors", "instruments", "cluster", "results", "jobs")
"""The package's parts: folders at the top of a tree, installed as ``mirrorscan.<part>``."""

ROOT_PACKAGE = "mirrorscan"
"""The installed package's name; a leading ``mirrorscan.`` in an import is dropped (see the module docstring)."""

INSTRUMENT_NAMES = frozenset({"instrument", "inst"})
"""Last parts of a name or attribute chain that hold an instrument object (figure 2)."""

SETTINGS_NAMES = ("settings", "frozen", "values", "spec", "raw", "section", "config", "execution")
"""Last parts of a name or attribute chain that hold settings read by string key (figure 4)."""

SCAN_PATH = ("jobs/scan*.py", "jobs/dry_run.py", "jobs/plan.py", "jobs/preflight.py", "jobs/reproduce.py",
             "cluster/scan/sweep.py", "cluster/scan/stages.py", "cluster/scan/pipeline.py", "cluster/*run*.py", "cluster/scan_*.py",
             "cluster/scan/preflight.py", "cluster/scan/progress.py", "cluster/scan/journal.py", "results/reproduce.py")
"""Globs (relative to a tree) of the modules on the scan path (figure 5)."""


@dataclass(frozen=True)
class Import:
    """One import statement (or ``import_module`` call) of a module, resolved to a module of the tree."""

    source: str
    """The importing module's dotted name without the ``mirrorscan.`` prefix (``grid.spec``)."""
    target: str
    """The imported module of the tree (``cluster.home``; a package is named by its folder: ``grid``)."""
    path: Path
    """The importing module's file."""
    line: int
    """Line of the import in ``path`` (1-based)."""


def module_files(tree: Path, parts: tuple[str, ...] = PARTS) -> dict[str, Path]:
    """Dotted module name (``grid.spec``; a package's ``__init__`` by its folder: ``grid``) → file, for every
    ``*.py`` under the parts' folders of ``tree``."""
    found = {}
    for part in parts:
        for path in sorted((tree / part).rglob("*.py")):
            rel = path.relative_to(tree).with_suffix("").parts
            name = ".".join(rel[:-1] if rel[-1] == "__init__" else rel)
            found[name] = path
    return found


def _strip_root(name: str) -> str:
    return name[len(ROOT_PACKAGE) + 1:] if name.startswith(ROOT_PACKAGE + ".") else name


def _named_modules(node: ast.AST, package: str) -> list[str]:
    """The dotted names ``node`` imports (``from a import b`` gives ``a.b`` and ``a``: which of the two is a
    module is decided by the caller), relative imports resolved against ``package``."""
    if isinstance(node, ast.Import):
        return [_strip_root(a.name) for a in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
            module = ".".join(base + ([node.module] if node.module else []))
        else:
            module = _strip_root(node.module or "")
        return [f"{module}.{a.name}" for a in node.names] + [module]
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
            and isinstance(node.args[0].value, str) \
            and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module":
        return [_strip_root(node.args[0].value)]
    return []


def imports(tree: Path, parts: tuple[str, ...] = PARTS) -> list[Import]:
    """Every import of one module of ``tree`` by another (at any depth in the file), in file and line order.
    ``from a import b`` is an import of ``a.b`` when that is a module of the tree, else of ``a``."""
    modules = module_files(tree, parts)
    found = []
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            named = _named_modules(node, package)
            if isinstance(node, ast.ImportFrom):
                *members, module = named
                targets = [m if m in modules else module for m in members]
            else:
                targets = named
            for target in dict.fromkeys(targets):
                while target and target not in modules:   # `import grid.spec.x` of a name inside a module
                    target = target.rpartition(".")[0]
                if target and target != name:
                    found.append(Import(name, target, path, node.lineno))
    return sorted(found, key=lambda i: (str(i.path), i.line, i.target))


def graph(edges: list[Import]) -> dict[str, set[str]]:
    """Module → the modules it imports."""
    out: dict[str, set[str]] = {}
    for edge in edges:
        out.setdefault(edge.source, set()).add(edge.target)
        out.setdefault(edge.target, set())
    return out


def strongly_connected(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of ``g`` with more than one module, each sorted, in name order
    (Tarjan's algorithm, iterative)."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = 0
    for root in sorted(g):
        if root in index:
            continue
        work = [(root, iter(sorted(g[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(g.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return sorted(out)


def _shortest_cycle(g: dict[str, set[str]], start: str, within: set[str]) -> list[str]:
    """The shortest path ``start → … → start`` inside ``within`` (breadth first, names in sorted order)."""
    previous = {start: None}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(g[node] & within):
                if child == start:
                    path = [node]
                    while previous[path[-1]] is not None:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    return [start]


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Import cycles of ``g`` as chains ``[a, b, …, a]``: for each strongly connected component, the shortest
    cycle through its first module, then through each module no chain printed so far passes."""
    chains = []
    for component in strongly_connected(g):
        members, covered = set(component), set()
        for module in component:
            if module not in covered:
                chain = _shortest_cycle(g, module, members)
                covered |= set(chain)
                chains.append(chain)
    return chains


def chain_text(chain: list[str]) -> str:
    """``a → b → a``."""
    return " → ".join(chain)


def _chain_name(node: ast.AST) -> str | None:
    """The last part of a name or attribute chain (``spec.instrument`` → ``instrument``), else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def is_instrument_object(node: ast.AST) -> bool:
    """Whether an expression holds an instrument object by figure 2's heuristic."""
    if _chain_name(node) in INSTRUMENT_NAMES:
        return True
    return isinstance(node, ast.Call) and _chain_name(node.func) == "resolve"


def instrument_probes(tree: Path) -> list[tuple[Path, int, str]]:
    """(file, line, source text) of every getattr/hasattr call on an instrument object (figure 2)."""
    found = []
    for path in module_files(tree).values():
        source = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in ("getattr", "hasattr") and node.args and is_instrument_object(node.args[0]):
                found.append((path, node.lineno, ast.get_source_segment(source, node) or ""))
    return sorted(found, key=lambda f: (f[0], f[1]))


def _is_settings_name(name: str | None) -> bool:
    return name is not None and any(name == w or name.endswith("_" + w) for w in SETTINGS_NAMES)


def _string_key_base(node: ast.AST) -> ast.AST | None:
    """For ``x["key"]`` or ``x.get("key", …)`` with a constant string key: ``x``; else None."""
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
        return node.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
        return node.func.value
    return None


def settings_lookups(tree: Path) -> list[tuple[Path, int, str]]:
    """(file, line, source text) of every string-key settings lookup (figure 4)."""
    found = []
    for path in module_files(tree).values():
        source = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(source)):
            base = _string_key_base(node)
            while base is not None and _string_key_base(base) is not None:
                base = _string_key_base(base)
            if base is not None and _is_settings_name(_chain_name(base)):
                found.append((path, node.lineno, ast.get_source_segment(source, node) or ""))
    return sorted(found, key=lambda f: (f[0], f[1]))


def scan_path_parameters(tree: Path) -> list[tuple[int, str, Path, int]]:
    """(parameter count, function name, file, line) of every function of the scan path's modules, longest
    first (figure 5)."""
    files = sorted({p for pattern in SCAN_PATH for p in tree.glob(pattern) if p.is_file()})
    found = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                names = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
                count = len([n for n in names if n not in ("self", "cls")]) + bool(a.vararg) + bool(a.kwarg)
                found.append((count, node.name, path, node.lineno))
    return sorted(found, key=lambda f: (-f[0], str(f[2]), f[3]))


def jobs_lines(tree: Path) -> int:
    """Physical lines of every ``jobs/**/*.py`` of ``tree`` (figure 1)."""
    return sum(len(p.read_bytes().splitlines()) for p in sorted((tree / "jobs").rglob("*.py")))


def report(tree: Path, every_lookup: bool = False) -> str:
    """The figures of ``tree`` as printed text; ``every_lookup``: list each settings lookup too."""
    tree = tree.resolve()
    rel = lambda p: str(p.relative_to(tree))   # noqa: E731
    lines = [f"architecture figures of {tree}", "",
             f"lines in jobs/: {jobs_lines(tree)}"]
    probes = instrument_probes(tree)
    lines.append(f"getattr/hasattr checks on instruments: {len(probes)}")
    lines += [f"  {rel(p)}:{n}  {text}" for p, n, text in probes]
    chains = cycles(graph(imports(tree)))
    components = strongly_connected(graph(imports(tree)))
    lines.append(f"module import cycles: {len(components)} strongly connected group(s), {len(chains)} chain(s)")
    lines += [f"  {chain_text(c)}" for c in chains]
    lookups = settings_lookups(tree)
    by_part = {}
    for p, _, _ in lookups:
        by_part[p.relative_to(tree).parts[0]] = by_part.get(p.relative_to(tree).parts[0], 0) + 1
    lines.append(f"string-key settings lookups: {len(lookups)} ("
                 + ", ".join(f"{part} {n}" for part, n in sorted(by_part.items())) + ")")
    lines += [f"  {rel(p)}:{n}  {text}" for p, n, text in lookups] if every_lookup else []
    params = scan_path_parameters(tree)
    if params:
        count, name, path, line = params[0]
        lines.append(f"longest parameter list on the scan path: {count} ({name}, {rel(path)}:{line})")
        lines += [f"  {c:2d}  {n}  {rel(p)}:{ln}" for c, n, p, ln in params[:5]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Print the figures of the tree named on the command line (default: this repository)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tree", nargs="?", default=str(Path(__file__).resolve().parents[1]),
                        help="root of a checkout (default: this repository)")
    parser.add_argument("--lookups", action="store_true", help="list every string-key settings lookup")
    args = parser.parse_args(argv)
    print(report(Path(args.tree), args.lookups))


if __name__ == "__main__":
    main()
