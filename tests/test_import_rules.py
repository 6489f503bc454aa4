"""Import rules the package keeps, read from the source (no import runs):

* nothing in ``app/``, ``coordinator/`` or ``storage/`` imports a private name of
  another module, or reaches one through an imported module (``ui._call``);
* the Kafka handlers (``app/kafka/*`` but the listener and the package) never import
  the listener ``app/kafka/server.py``: what a handler needs of it lives in ``api.py``;
* the engine (``app/engine/``) and the coordinators (``coordinator/``) never import
  the embedded clients (``app/client/``): the consumer protocol they decode lives in
  ``coordinator/consumer_protocol.py``;
* the console's views share helpers through ``app/http/ui_blueprint.py``: only the
  app factory imports the views module ``app/http/ui.py``.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("app", "coordinator", "storage")

pytestmark = pytest.mark.timeout(60)


def modules() -> Iterator[tuple[str, ast.Module]]:
    """``(dotted name, tree)`` of every module of the package."""
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            name = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
            yield name, ast.parse(path.read_text(), str(path))


def imported(tree: ast.Module) -> Iterator[tuple[str, str | None, str]]:
    """``(module, name or None, bound as)`` of every import, anywhere in the module
    (``TYPE_CHECKING`` blocks and function bodies included)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None, alias.asname or alias.name.partition(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                yield node.module, alias.name, alias.asname or alias.name


def imports_of(tree: ast.Module) -> set[str]:
    """Every module a module imports (``from a import b`` counts as ``a`` and ``a.b``)."""
    found = set()
    for module, name, _ in imported(tree):
        found.add(module)
        if name is not None:
            found.add(f"{module}.{name}")
    return found


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


MODULES = dict(modules())


def ours(module: str) -> bool:
    return module.partition(".")[0] in PACKAGES


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_private_name_of_another_module_is_imported(module: str) -> None:
    tree = MODULES[module]
    modules_bound = set()
    for source, name, bound in imported(tree):
        if not ours(source):
            continue  # the standard library's and the dependencies' own business (os._exit)
        if name is None or f"{source}.{name}" in MODULES:
            modules_bound.add(bound)
        else:
            assert not private(name), f"{module} imports the private {source}.{name}"
    reached = {f"{node.value.id}.{node.attr}" for node in ast.walk(tree)
               if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
               and node.value.id in modules_bound and private(node.attr)}
    assert not reached, f"{module} reaches private names of other modules: {sorted(reached)}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES
                                          if m.startswith("app.kafka.") and m != "app.kafka.server"))
def test_kafka_handlers_never_import_the_listener(module: str) -> None:
    assert "app.kafka.server" not in imports_of(MODULES[module])


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith(("app.engine", "coordinator"))))
def test_the_engine_and_the_coordinators_never_import_the_clients(module: str) -> None:
    reached = {m for m in imports_of(MODULES[module]) if m == "app.client" or m.startswith("app.client.")}
    assert not reached, f"{module} imports {sorted(reached)}"


def test_only_the_app_factory_imports_the_console_views() -> None:
    importers = {m for m, tree in MODULES.items() if "app.http.ui" in imports_of(tree)}
    assert importers == {"app.http"}
