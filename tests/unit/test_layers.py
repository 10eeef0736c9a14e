"""Layering, checked on the source (AST, no imports run).

1. The package import rule: each package of gitray/ imports only the packages below it.

       core, parsing  <-  plans  <-  engine  <-  daemon, cli
       core  <-  k8s, git, hosts, ray, render    (the adapters: one external system each)

   ``parsing`` builds on ``core`` (diagnostics point at source locations). ``engine`` uses the
   adapters; ``daemon`` and ``cli`` may use everything below them, and ``cli`` reaches the
   daemon only from inside the ``sync`` command (never at import time), so ``gitray plan``
   does not load it. No package imports one above it, so there are no cycles.
2. ``gitray.plans`` (and ``gitray.parsing``) stay pure: no I/O imports or calls; so do the pure
   modules of ``gitray.engine`` (``PURE_ENGINE``: each says "Pure" or "No I/O" in its
   docstring, and each that says so is listed), which may import one another. Every engine
   module that imports nothing doing I/O (directly, or through an engine module that does) is
   listed: a module that could be held pure is.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

GITRAY = Path(__file__).parents[2] / "gitray"

# package -> the gitray packages it may import (besides itself)
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "parsing": {"core"},
    "plans": {"core", "parsing"},
    "k8s": {"core"},
    "git": {"core"},
    "hosts": {"core"},
    "ray": {"core"},
    "render": {"core"},
    "engine": {"core", "parsing", "plans", "k8s", "git", "ray", "render"},
    "daemon": {"core", "parsing", "plans", "engine", "k8s", "git", "hosts", "ray", "render"},
    "cli": {"core", "parsing", "plans", "engine", "k8s", "git", "hosts", "ray", "daemon",
            "render"},
}
# What ``gitray --help`` and ``gitray plan`` load (the parser, then the commands module) may
# import these only inside the command that needs them, never at import time.
HEAVY = {"gitray.daemon", "gitray.k8s", "gitray.engine", "gitray.hosts", "gitray.ray",
         "gitray.git", "kubernetes", "apscheduler", "prometheus_client", "httpx", "git"}
LAZY_ONLY: dict[str, set[str]] = {
    "cli/__init__.py": HEAVY, "cli/app.py": HEAVY | {"gitray.plans", "gitray.parsing"},
    "cli/commands.py": HEAVY,
}
# the top-level modules of gitray/ (the entry points) may import anything
TOP_LEVEL = {"__init__", "__main__"}

PURE = {"plans", "parsing"}
# the engine's pure modules: judging, deciding and encoding, no I/O
# (their paths under gitray/engine/, without ``.py``; package ``__init__`` files hold no code)
PURE_ENGINE = {"deadlines", "fence", "ownership", "record", "shards", "shardview",
               "incremental/checks",
               "incremental/gatewaymetrics", "incremental/servemetrics",
               "incremental/upgradecontrol", "gates"}
FORBIDDEN_MODULES = {
    "kubernetes", "git", "httpx", "subprocess", "socket", "os", "pathlib", "shutil", "time",
    "urllib", "requests", "apscheduler", "asyncio", "threading", "random", "tempfile", "io",
    "gitray.k8s", "gitray.git", "gitray.hosts", "gitray.ray", "gitray.engine",
    "gitray.daemon", "gitray.cli",
}
FORBIDDEN_CALLS = {"open", "input", "print", "exec", "eval", "__import__"}
FORBIDDEN_ATTRS = {("datetime", "now"), ("datetime", "utcnow"), ("date", "today")}


def packages() -> list[str]:
    return sorted(p.name for p in GITRAY.iterdir()
                  if p.is_dir() and (p / "__init__.py").exists())


def package_modules(package: str) -> list[Path]:
    return sorted((GITRAY / package).rglob("*.py"))


def imports(tree: ast.AST) -> Iterator[tuple[ast.stmt, str, bool]]:
    """(node, imported module, at module level) for every absolute import."""
    nested: set[int] = set()  # inside a function, or only for the type checker
    for node in ast.walk(tree):
        typing_only = isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or typing_only:
            nested.update(id(n) for n in ast.walk(node) if n is not node)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node, alias.name, id(node) not in nested
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "gitray":  # from gitray import plans / __version__
                for alias in node.names:
                    sub = GITRAY / alias.name
                    yield node, f"gitray.{alias.name}" if sub.is_dir() else "gitray", \
                        id(node) not in nested
            else:
                yield node, node.module, id(node) not in nested


def _under(name: str, prefixes: set[str]) -> bool:
    return any(name == m or name.startswith(m + ".") for m in prefixes)


def rule_violations(path: Path, package: str, lazy: set[str] | None = None) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    inside = path.is_relative_to(GITRAY)
    where = path.relative_to(GITRAY.parent) if inside else path.name
    if lazy is None:
        lazy = LAZY_ONLY.get(path.relative_to(GITRAY).as_posix(), set()) if inside else set()
    found = []
    for node, name, top in imports(tree):
        if name.startswith("gitray."):
            target = name.split(".")[1]
            if target != package and target not in ALLOWED[package]:
                found.append(f"{where}:{node.lineno}: {package} imports {name} "
                             f"({package} may import only {sorted(ALLOWED[package])})")
        if top and _under(name, lazy):
            found.append(f"{where}:{node.lineno}: {package} imports {name} at import time "
                         f"(import it inside the command that needs it)")
    return found


def purity_violations(path: Path, allowed: frozenset[str] = frozenset()) -> list[str]:
    """I/O imports and calls in ``path``; ``allowed``: modules it may import all the same."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        for name in names:
            if _under(name, FORBIDDEN_MODULES) and name not in allowed:
                found.append(f"{path.name}:{node.lineno}: imports {name}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in FORBIDDEN_CALLS:
            found.append(f"{path.name}:{node.lineno}: calls {node.func.id}()")
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and (node.value.id, node.attr) in FORBIDDEN_ATTRS:
            found.append(f"{path.name}:{node.lineno}: reads the clock")
    return found


def test_every_package_has_a_rule() -> None:
    assert set(packages()) == set(ALLOWED)
    loose = sorted(p.stem for p in GITRAY.glob("*.py") if p.stem not in TOP_LEVEL)
    assert loose == [], "every module belongs to a package"


def test_the_rule_has_no_cycles() -> None:
    done: set[str] = set()

    def visit(package: str, path: tuple[str, ...]) -> None:
        assert package not in path, " -> ".join((*path, package))
        if package in done:
            return
        for below in ALLOWED[package]:
            visit(below, (*path, package))
        done.add(package)

    for package in ALLOWED:
        visit(package, ())


def module_imports() -> dict[str, set[str]]:
    """gitray module -> the gitray modules it imports anywhere (lazily and for the type
    checker too); ``from gitray.x import y`` names the submodule ``y`` when there is one."""
    modules = {}
    for path in GITRAY.rglob("*.py"):
        parts = path.relative_to(GITRAY.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    found: dict[str, set[str]] = {}
    for name, path in modules.items():
        found[name] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = {f"{node.module}.{a.name}" for a in node.names} & modules.keys()
                found[name] |= subs or ({node.module} & modules.keys())
            elif isinstance(node, ast.Import):
                found[name] |= {a.name for a in node.names} & modules.keys()
    return found


def circles(imported: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted({(a, b) for a, targets in imported.items() for b in targets
                   if a < b and a in imported.get(b, set())})


def test_no_two_modules_import_each_other() -> None:
    assert circles(module_imports()) == []


def test_the_circle_check_catches_a_two_file_circle() -> None:
    assert circles({"a": {"b"}, "b": {"a", "c"}, "c": set()}) == [("a", "b")]


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_what_the_rule_allows(package: str) -> None:
    found = [v for path in package_modules(package) for v in rule_violations(path, package)]
    assert found == []


@pytest.mark.parametrize("path", [p for pkg in sorted(PURE) for p in package_modules(pkg)],
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_pure_module_does_no_io(path: Path) -> None:
    assert purity_violations(path) == []


ENGINE = GITRAY / "engine"


def engine_name(path: Path) -> str:
    """``gitray/engine/incremental/checks.py`` -> ``incremental/checks``."""
    return path.relative_to(ENGINE).with_suffix("").as_posix()


def engine_modules() -> list[Path]:
    """The engine's modules with code (a package's ``__init__`` holds only its docstring)."""
    return [p for p in package_modules("engine") if p.stem != "__init__"]


def engine_siblings(names: set[str]) -> frozenset[str]:
    return frozenset("gitray.engine." + name.replace("/", ".") for name in names)


def pure_engine_modules() -> list[Path]:
    return [ENGINE / f"{name}.py" for name in sorted(PURE_ENGINE)]


@pytest.mark.parametrize("path", pure_engine_modules(), ids=lambda p: f"engine/{engine_name(p)}")
def test_pure_engine_module_does_no_io(path: Path) -> None:
    assert purity_violations(path, engine_siblings(PURE_ENGINE)) == []


def test_every_engine_module_that_says_it_is_pure_is_checked() -> None:
    said = set()
    for path in engine_modules():
        doc = (ast.get_docstring(ast.parse(path.read_text())) or "").split("\n\n")[0]
        if "Pure" in doc or "No I/O" in doc:
            said.add(engine_name(path))
    assert said == PURE_ENGINE


def could_be_pure(paths: list[Path]) -> set[str]:
    """The engine modules that import nothing doing I/O, directly or through another engine
    module: the largest set whose members pass the purity check importing only one another."""
    pure = {engine_name(p): p for p in paths}
    while True:
        impure = {name for name, path in pure.items()
                  if purity_violations(path, engine_siblings(set(pure)))}
        if not impure:
            return set(pure)
        pure = {name: path for name, path in pure.items() if name not in impure}


def test_every_engine_module_without_io_is_held_pure() -> None:
    assert could_be_pure(engine_modules()) == PURE_ENGINE


def test_package_init_files_of_the_engine_hold_no_code() -> None:
    for path in package_modules("engine"):
        if path.stem == "__init__":
            body = ast.parse(path.read_text()).body
            assert all(isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
                       for n in body), f"{path}: a package's __init__ holds only its docstring"


def test_a_module_importing_an_impure_engine_module_is_not_pure() -> None:
    room = ENGINE / "incremental"
    chain = [room / "gatewaymetrics.py", room / "checks.py", room / "probes.py",
             room / "traffic.py"]
    # traffic imports probes (httpx): neither is pure; checks and gatewaymetrics still are
    assert could_be_pure(chain) == {"incremental/checks", "incremental/gatewaymetrics"}


def test_the_purity_check_refuses_an_impure_engine_sibling(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from gitray.engine.record import Record\n"
                   "from gitray.engine.progress import ProgressStore\n")
    assert purity_violations(bad, engine_siblings(PURE_ENGINE)) == [
        "bad.py:2: imports gitray.engine.progress"]


def test_there_are_planner_modules_to_check() -> None:
    assert len(package_modules("plans")) >= 8


def test_the_checker_catches_a_package_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from gitray.engine.executor import Executor\n"
                   "from gitray.k8s.client import Kube\n"
                   "import kubernetes\n"
                   "def f() -> None:\n    from gitray.daemon.daemon import Daemon\n")
    # plans may import neither engine, k8s nor daemon; cli may, but not at import time
    assert len(rule_violations(bad, "plans")) == 3
    early = [v.split(": ")[1].split()[2] for v in rule_violations(bad, "cli", HEAVY)]
    assert early == ["gitray.engine.executor", "gitray.k8s.client", "kubernetes"]


def test_the_checker_catches_io(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import subprocess\nfrom datetime import datetime\nx = datetime.now()\n"
                   "open('f')\n")
    assert len(purity_violations(bad)) == 3
