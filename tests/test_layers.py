"""The house's import rules (docs/architecture.md, "Layers"), read from the code's own imports.

Every import counts, also those under ``TYPE_CHECKING`` or inside a function: a circle that only the
type checker walks is still a circle a reader has to untangle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("controlplane", "agent_image", "launchers", "provisioners", "infra")

# controlplane/master, top to bottom: a part may import its own layer and those below it, never above.
MASTER_LAYERS: list[set[str]] = [
    {"app", "serving", "main"},  # builds the app and wires the parts
    {"webui"},  # pages: render what the API answers (its serializers and parameter types)
    {"api"},  # REST handlers
    {"services", "runtime"},  # what handlers do; MasterRuntime holds the parts for them
    {"autoscaling"},  # the cloud reconciler
    {"orchestration"},  # the one writer of states, and its helpers
    {"checkpoint_gc"},  # the checkpoint GC loop and what it collects
    # the ground every part stands on
    {"runtime_core", "background", "http_types", "agent_hub", "agent_inbox", "proxy_sessions", "token_cache",
     "checkpoint_files", "browser_session", "db", "settings", "pools", "authz", "errors", "principals",
     "redaction", "stream_slots", "log_ring", "file_modes", "task_hosts"},
]
# Outside the master: the domain and the clients never import it (the CLI speaks REST only).
NOT_THE_MASTER = ("controlplane.config", "controlplane.searchers", "controlplane.scheduler", "controlplane.state",
                  "controlplane.autoscaler", "controlplane.pai", "controlplane.storage", "controlplane.common",
                  "controlplane.wire", "controlplane.checkpoint_gc", "controlplane.cli", "controlplane.core",
                  "controlplane.exec", "controlplane.pytorch", "agent_image", "launchers", "provisioners")


def module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> Iterator[str]:
    """The modules ``path`` imports, as dotted names (``from a import b``: ``a.b`` when b is a module, else ``a``)."""
    package = module_of(path) if path.name == "__init__.py" else module_of(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            for alias in node.names:  # a submodule by its own name; any other name is the module's
                sub = f"{base}.{alias.name}"
                yield sub if _is_module(sub) else base


def _is_module(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def product_files() -> list[Path]:
    return [p for top in PRODUCT for p in sorted((ROOT / top).rglob("*.py"))]


def master_layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[:2] != ["controlplane", "master"] or len(parts) < 3:
        return None
    return next((i for i, layer in enumerate(MASTER_LAYERS) if parts[2] in layer), None)


def layer_breaks(files: list[Path]) -> list[str]:
    breaks = []
    for path in files:
        module = module_of(path)
        own = master_layer(module)
        for target in set(imports(path)):
            if not target.startswith("controlplane.master"):
                continue
            if module.startswith(NOT_THE_MASTER):
                breaks.append(f"{module} imports {target}: the master is not for it to import")
                continue
            theirs = master_layer(target)
            if own is not None and theirs is not None and theirs < own:
                breaks.append(f"{module} imports {target}, a layer above it")
    return sorted(set(breaks))


def circles(files: list[Path]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    modules = {module_of(p): p for p in files}
    edges = {m: sorted({t for t in imports(p) if t in modules and t != m}) for m, p in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for m in edges:
        if m not in index:
            visit(m)
    return found


def test_every_master_module_has_a_layer():
    modules = {module_of(p).split(".")[2] for p in (ROOT / "controlplane" / "master").rglob("*.py")
               if module_of(p).count(".") >= 2}
    assert sorted(m for m in modules if master_layer(f"controlplane.master.{m}") is None) == []


def test_layers_import_one_way():
    assert layer_breaks(product_files()) == []


def test_no_import_circle_in_the_product():
    assert circles(product_files()) == []


def test_a_wrong_import_is_caught(tmp_path):
    """The rules above fail on what they forbid: a foundation module importing a service, and a
    service and an orchestration module importing each other."""
    (tmp_path / "controlplane" / "master" / "services").mkdir(parents=True)
    (tmp_path / "controlplane" / "master" / "orchestration").mkdir(parents=True)
    bad = {
        "controlplane/master/errors.py": "from controlplane.master.services import jobs\n",
        "controlplane/master/services/jobs.py": "from controlplane.master.orchestration import gang\n",
        "controlplane/master/orchestration/gang.py": "from controlplane.master.services import jobs\n",
    }
    for name, text in bad.items():
        (tmp_path / name).write_text(text)
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        files = sorted(tmp_path.rglob("*.py"))
        assert layer_breaks(files) == [
            "controlplane.master.errors imports controlplane.master.services.jobs, a layer above it",
            "controlplane.master.orchestration.gang imports controlplane.master.services.jobs, a layer above it",
        ]
        assert circles(files) == [["controlplane.master.orchestration.gang", "controlplane.master.services.jobs"]]
    finally:
        ROOT = saved


# What builds SQL: the query constructors of sqlalchemy (types such as Select and AsyncSession are fine).
SQL_BUILDERS = frozenset({"select", "update", "insert", "delete", "func", "and_", "or_", "case", "text", "exists"})


def sql_builders_in(path: Path) -> list[str]:
    """The SQL constructors ``path`` imports from sqlalchemy."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sqlalchemy"):
            found += [a.name for a in node.names if a.name in SQL_BUILDERS]
    return found


def test_api_and_webui_build_no_sql_services_do():
    """API handlers and web UI pages call ``services/`` for their reads; neither builds a query."""
    master = ROOT / "controlplane" / "master"
    files = [*sorted((master / "api").glob("*.py")), *sorted((master / "webui").rglob("*.py"))]
    assert {str(p.relative_to(master)): sql_builders_in(p) for p in files if sql_builders_in(p)} == {}


def test_a_handler_building_sql_is_caught(tmp_path):
    handler = tmp_path / "handler.py"
    handler.write_text("from sqlalchemy import Select, func, select\n")
    assert sql_builders_in(handler) == ["func", "select"]
