"""The layering, checked on the source (AST, nothing imported or run).

``exactly/storage/`` knows nothing of ``exactly/coordinator/``, which knows nothing of ``exactly/app/``;
the engine (``exactly/app/engine/``) knows nothing of the faces that serve it, nor of the
embedded clients; the parts of the log (Kafka's split: validator, loader, segment
swap, cleaner) never import the log; the Kafka handlers never import their listener;
the faces reach the engine only through its named operations -- never its logs,
coordinators or loop --, a change every face offers (create a topic, grow it, alter
its configs) goes through the same engine operation from each, and no module imports or
reaches another's private names.
``docs/architecture.md`` says why. A new rule is one line in :data:`IMPORT_RULES` or
:data:`ENGINE_INTERNALS`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parent.parent
#: the production packages the rules are about (tests and benches may use internals)
PACKAGES = ("exactly",)


@dataclass(frozen=True)
class Forbid:
    """Modules under ``importer`` must not import anything under ``imported``."""

    importer: str
    imported: str
    why: str
    exempt: tuple[str, ...] = ()


LOG = "exactly.storage.partition_log"
#: the Spark face: the only modules that may import the ``spark`` extra's packages
SPARK_FACE = ("exactly.app.spark", *(f"exactly.app.spark.{p.stem}" for p in (REPO / "exactly" / "app" / "spark").glob("*.py")))
#: what `make run` leaves out (pyproject's ``spark`` extra): the broker never imports it
SPARK_EXTRA = ("pyspark", "confluent_kafka")
IMPORT_RULES = (
    *(Forbid(package, extra, "`make run` installs the broker alone (pip install -e .): only exactly/app/spark/ "
             "imports the spark extra", exempt=SPARK_FACE)
      for package in PACKAGES for extra in SPARK_EXTRA),
    Forbid("exactly.storage", "exactly.coordinator", "storage knows nothing of the coordinators"),
    Forbid("exactly.storage", "exactly.app", "storage knows nothing of the broker"),
    Forbid("exactly.coordinator", "exactly.app", "the coordinators know nothing of the broker"),
    Forbid("exactly.app.engine", "exactly.app.http", "the engine knows nothing of the HTTP face"),
    Forbid("exactly.app.engine", "exactly.app.kafka", "the engine knows nothing of the Kafka face"),
    Forbid("exactly.app.engine", "exactly.app.spark", "the engine knows nothing of the Spark face"),
    Forbid("exactly.app.engine", "exactly.app.client", "the engine knows nothing of the embedded clients"),
    Forbid("exactly.app.security", "exactly.app.engine", "the authorizer knows nothing of the engine that keeps it"),
    Forbid("exactly.app.security", "exactly.app.kafka", "the authorizer knows nothing of the faces that ask it"),
    Forbid("exactly.app.security", "exactly.app.http", "the authorizer knows nothing of the faces that ask it"),
    Forbid("exactly.app.listeners", "exactly.app.kafka", "listener names and sockets know nothing of the protocol served"),
    Forbid("exactly.app.cli.users", "exactly.app.engine", "exactly users reaches a running broker over the wire only"),
    Forbid("exactly.app.cli.admin_connection", "exactly.app.engine", "the admin commands reach a running broker over the wire only"),
    Forbid("exactly.app.http", "exactly.app.security.authorizer",
           "the HTTP face asks the engine (authorize, explain), as the Kafka port does: one decision path"),
    Forbid("exactly.app.engine.principals", "exactly.app.engine.engine", "the per-principal state knows nothing of the engine"),
    *(Forbid(f"exactly.app.engine.{service}", "exactly.app.engine.engine",
             "a service gets what it needs when the engine wires it, never the engine")
      for service in ("partitions", "topics", "transactions", "groups", "access", "jobs", "loop_bridge")),
    Forbid("exactly.app.engine.loop_bridge", "exactly.app.engine", "the loop bridge runs work; it knows no service",
           exempt=()),
    Forbid("exactly.app.engine.access", "exactly.app.engine.partitions", "the authorizer knows nothing of the logs"),
    Forbid("exactly.app.engine.jobs", "exactly.app.engine.partitions", "the periodic work is the logs' own"),
    Forbid("exactly.app.engine.groups", "exactly.app.engine.transactions", "one coordinator, one interface"),
    Forbid("exactly.app.engine.read_models", "exactly.app.engine.engine", "the read models take the services"),
    Forbid("exactly.app.faults.fault", "exactly.app.kafka", "the fault model and registry know nothing of the faces applying them"),
    Forbid("exactly.app.faults.events", "exactly.app.kafka", "the event presets are faults, whatever face applies them"),
    Forbid("exactly.app.engine", "exactly.app.kafka.fault_injection", "the engine keeps the faults; only the Kafka listener applies them"),
    Forbid("exactly.storage.log_cleaner", LOG, "the cleaner sees the log through its CleanableLog protocol"),
    Forbid("exactly.storage.log_loader", LOG, "the loader opens what the log then holds"),
    Forbid("exactly.storage.log_loader", "exactly.storage.log_cleaner", "loading knows nothing of cleaning"),
    Forbid("exactly.storage.log_validator", LOG, "the validator checks a batch, whatever log it goes to"),
    Forbid("exactly.storage.segment_swap", LOG, "the swap moves files; the log installs the result"),
    Forbid("exactly.storage.aborted_transactions", LOG, "one tracker for fetch, cleaner, lag and console"),
    Forbid("exactly.app.engine.audit", LOG, "the audit reads the logs off the loop, through views (exactly.storage.log_scan)"),
    Forbid("exactly.app.kafka", "exactly.app.kafka.server", "a handler takes what it needs from api.py, not the listener",
           exempt=("exactly.app.kafka", "exactly.app.kafka.server")),
    Forbid("exactly.app", "exactly.app.http.console.views", "the console views share helpers through ui_blueprint; only the "
           "app factory registers the views", exempt=("exactly.app.http",)),
    Forbid("exactly.app.http", "exactly.app.server", "the HTTP face finds the server that runs it in app.extensions"),
    Forbid("exactly.app.kafka", "exactly.app.server", "the Kafka face knows nothing of the server that attaches it"),
    Forbid("exactly.app.engine", "exactly.app.server", "the engine knows nothing of the server that runs it"),
    Forbid("exactly.app.broker", "exactly.app.server", "a Broker has no listeners; the Server adds them"),
    Forbid("exactly.app.testing", "exactly.app.engine", "a test's broker is a Server: the engine is reached through it"),
)

#: attributes of the engine no module outside ``exactly/app/engine/`` may touch (besides any
#: ``_name``): the faces call the services' operations instead
ENGINE_INTERNALS = frozenset({"logs", "loop", "transaction_coordinator", "group_coordinator"})
#: what the services offer only to the engine's own modules (read models, the audit, the
#: mirror's source): the logs themselves and the coordinators behind their interfaces
SERVICE_INTERNALS = frozenset({"log", "logs", "get", "items", "topic", "coordinator"})
#: the engine's services, as the faces reach them (``engine.partitions.fetch``)
SERVICES = frozenset({"partitions", "topics", "transactions", "groups", "access", "jobs"})
#: where the engine's internals may be touched
ENGINE_PACKAGE = "exactly.app.engine"
#: the one module that holds the engine's private state
ENGINE_MODULE = "exactly.app.engine.engine"
#: coordinator state read as a whole, outside the coordinators and the engine
COORDINATOR_DICTS = frozenset({"txns"})


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    tree: ast.Module

    def under(self, package: str) -> bool:
        return self.name == package or self.name.startswith(package + ".")

    def where(self, node: ast.AST) -> str:
        return f"{self.path.relative_to(REPO)}:{getattr(node, 'lineno', 0)}"


@cache
def modules() -> tuple[Module, ...]:
    found = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found.append(Module(name, path, ast.parse(path.read_text(), str(path))))
    return tuple(found)


def imports(module: Module) -> list[tuple[ast.AST, str, tuple[str, ...]]]:
    """``(node, imported module, names imported from it)`` for every import, relative
    ones resolved, including those inside functions and ``TYPE_CHECKING`` blocks."""
    found: list[tuple[ast.AST, str, tuple[str, ...]]] = []
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            found.extend((node, alias.name, ()) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.name.split(".")
                if module.path.name != "__init__.py":
                    package = package[:-1]
                package = package[:len(package) - node.level + 1]
                base = ".".join(package + ([base] if base else []))
            found.append((node, base, tuple(alias.name for alias in node.names)))
    return found


def _under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


@pytest.mark.parametrize("rule", IMPORT_RULES, ids=lambda r: f"{r.importer}-not-{r.imported}")
def test_no_import_across_a_forbidden_layer(rule: Forbid) -> None:
    wrong = [f"{m.where(node)} imports {name}"
             for m in modules() if m.under(rule.importer) and m.name not in rule.exempt
             for node, name, names in imports(m)
             if _under(name, rule.imported) or any(_under(f"{name}.{n}", rule.imported) for n in names)]
    assert not wrong, f"{rule.why}:\n" + "\n".join(wrong)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_module_imports_another_modules_private_names() -> None:
    wrong = [f"{m.where(node)} imports {n} from {name}"
             for m in modules() for node, name, names in imports(m)
             if name != m.name for n in names if _private(n)]
    assert not wrong, "a private name is its module's own:\n" + "\n".join(wrong)


def test_no_module_reaches_another_modules_private_names() -> None:
    """``from exactly.app.http import ui`` then ``ui._call``: a private name reached through the module."""
    ours = {m.name for m in modules()}
    wrong = []
    for m in modules():
        bound = {alias.asname or alias.name for node, name, names in imports(m) if isinstance(node, ast.ImportFrom)
                 for alias in node.names if f"{name}.{alias.name}" in ours}
        wrong += [f"{m.where(node)} reaches {node.value.id}.{node.attr}" for node in ast.walk(m.tree)
                  if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                  and node.value.id in bound and _private(node.attr)]
    assert not wrong, "a private name is its module's own:\n" + "\n".join(wrong)


def names_the_engine(node: ast.expr) -> bool:
    """A name, attribute or call ending in ``engine`` -- ``engine``, ``ctx.engine``,
    ``self._engine``, ``broker.engine``, ``current_engine()``: how the faces hold it."""
    if isinstance(node, ast.Call):
        node = node.func
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name.endswith("engine")


def test_only_the_engine_touches_its_internals() -> None:
    """Outside ``engine.py``, nobody -- not even the engine's own read models -- reaches the
    engine's private state; they take its services."""
    wrong = [f"{m.where(node)} reaches engine.{node.attr}"
             for m in modules() if m.name != ENGINE_MODULE
             for node in ast.walk(m.tree)
             if isinstance(node, ast.Attribute) and names_the_engine(node.value)
             and (node.attr.startswith("_") or node.attr in ENGINE_INTERNALS and not m.under(ENGINE_PACKAGE))]
    assert not wrong, "call the engine's services (exactly/app/engine/engine.py):\n" + "\n".join(wrong)


def test_tests_use_the_engines_services_not_its_privates() -> None:
    """A test written against ``engine._logs`` breaks with every refactoring of the engine
    and tests what no user can reach; the services are what the faces, and so the tests, use."""
    wrong = [f"{path.relative_to(REPO)}:{node.lineno} reaches engine.{node.attr}"
             for path in sorted((REPO / "tests").rglob("*.py"))
             for node in ast.walk(ast.parse(path.read_text(), str(path)))
             if isinstance(node, ast.Attribute) and names_the_engine(node.value) and node.attr.startswith("_")]
    assert not wrong, "use the engine's services (docs/architecture.md):\n" + "\n".join(wrong)


def names_a_service(node: ast.expr) -> bool:
    """``engine.partitions``, ``ctx.engine.topics``, ``current_engine().groups``: a service reached."""
    return isinstance(node, ast.Attribute) and node.attr in SERVICES and names_the_engine(node.value)


def test_the_faces_use_only_what_the_services_offer_them() -> None:
    wrong = [f"{m.where(node)} reaches {node.value.attr}.{node.attr}"
             for m in modules() if not m.under(ENGINE_PACKAGE)
             for node in ast.walk(m.tree)
             if isinstance(node, ast.Attribute) and names_a_service(node.value) and node.attr in SERVICE_INTERNALS]
    assert not wrong, "the logs and coordinators are the engine's own; faces get frozen values:\n" + "\n".join(wrong)


#: a change every face offers goes through one engine operation, never a face's own path
SHARED_OPERATIONS = {
    "create_topic": ("exactly.app.kafka.admin", "exactly.app.http.api.clusters", "exactly.app.http.console.topics"),
    "create_partitions": ("exactly.app.kafka.admin", "exactly.app.http.api.clusters"),
    "alter_topic_config": ("exactly.app.kafka.admin", "exactly.app.http.api.configs"),
}


@pytest.mark.parametrize("operation, faces", SHARED_OPERATIONS.items(), ids=list(SHARED_OPERATIONS))
def test_the_faces_change_topics_through_the_same_engine_operation(operation: str, faces: tuple[str, ...]) -> None:
    by_name = {m.name: m for m in modules()}
    missing = [face for face in faces
               if not any(isinstance(node, ast.Attribute) and node.attr == operation and names_a_service(node.value)
                          for node in ast.walk(by_name[face].tree))]
    assert not missing, f"these faces do not call Topics.{operation}: {missing}"


def test_coordinator_dicts_stay_in_the_coordinators_and_the_engine() -> None:
    wrong = [f"{m.where(node)} reads .{node.attr}"
             for m in modules() if not (m.under("exactly.coordinator") or m.under(ENGINE_PACKAGE))
             for node in ast.walk(m.tree)
             if isinstance(node, ast.Attribute) and node.attr in COORDINATOR_DICTS]
    assert not wrong, "faces see frozen views, not the coordinators' state:\n" + "\n".join(wrong)


#: where a log's start offset moves: the log itself (retention, DeleteRecords) and its loader;
#: everything else moves it through ``Partitions.delete_records``
LOG_START_MOVERS = frozenset({"exactly.storage.partition_log", "exactly.storage.log_loader"})


def _assigned_attributes(node: ast.AST) -> list[ast.Attribute]:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
        node, (ast.AugAssign, ast.AnnAssign)) else []
    return [t for target in targets for t in ast.walk(target) if isinstance(t, ast.Attribute)]


def test_only_the_log_moves_its_start_offset() -> None:
    wrong = [f"{m.where(node)} sets .log_start_offset"
             for m in modules() if m.name not in LOG_START_MOVERS
             for node in ast.walk(m.tree) for attribute in _assigned_attributes(node)
             if attribute.attr == "log_start_offset"]
    assert not wrong, "the log start offset moves in the log (PartitionLog.delete_records, retention):\n" + \
        "\n".join(wrong)


def test_the_rules_see_the_code() -> None:
    """A guard against a vacuous pass: the walk finds the packages and their imports."""
    names = {m.name for m in modules()}
    assert {"exactly.storage.partition_log", "exactly.coordinator.transaction_coordinator", "exactly.app.engine.engine",
            "exactly.app.kafka.produce", "exactly.app.http.api.clusters"} <= names
    engine = next(m for m in modules() if m.name == "exactly.app.engine.engine")
    assert any(name == "exactly.storage.log_manager" for _, name, _ in imports(engine))
    assert all(names_the_engine(ast.parse(e, mode="eval").body)
               for e in ("engine", "ctx.engine", "self._engine", "current_engine()"))
    assert not names_the_engine(ast.parse("ctx.request", mode="eval").body)
    log_module = next(m for m in modules() if m.name == "exactly.storage.partition_log")
    assert any(a.attr == "log_start_offset" for node in ast.walk(log_module.tree) for a in _assigned_attributes(node))


#: what the HTTP face takes of the Kafka face: the table of what each Kafka API needs (an
#: HTTP route's needs are read from it) and the API keys that name its rows
HTTP_TAKES_OF_KAFKA = frozenset({"exactly.app.kafka.authorization", "exactly.app.kafka.wire"})


def test_the_http_face_takes_only_the_kafka_faces_table() -> None:
    wrong = [f"{m.where(node)} imports {name}"
             for m in modules() if m.under("exactly.app.http") for node, name, names in imports(m)
             for imported in ([name] if names == () else [f"{name}.{n}" for n in names])
             if _under(imported, "exactly.app.kafka") and not any(_under(imported, t) for t in HTTP_TAKES_OF_KAFKA)]
    assert not wrong, "the HTTP face asks the engine; of the Kafka face it reads only its table:\n" + "\n".join(wrong)


#: the engine's authorizer operations; in the Kafka face only its table's module calls them
AUTHORIZER_OPERATIONS = frozenset({"authorize", "authorize_any", "authorization_denied", "authorized_operations"})


def test_kafka_handlers_authorize_only_through_the_table() -> None:
    """Every Kafka check goes through ``exactly/app/kafka/authorization.py``, whose TABLE says what
    each API needs (tests/test_authorization_table.py), never straight to the engine."""
    wrong = [f"{m.where(node)} calls engine.{node.attr}"
             for m in modules() if m.under("exactly.app.kafka") and m.name != "exactly.app.kafka.authorization"
             for node in ast.walk(m.tree)
             if isinstance(node, ast.Attribute) and node.attr in AUTHORIZER_OPERATIONS
             and (names_the_engine(node.value) or names_a_service(node.value))]
    assert not wrong, "authorize through exactly.app.kafka.authorization:\n" + "\n".join(wrong)
