"""One declaration per fact, and the producer split's layering, checked on the source:
the producer constants live beside the record-batch layout, the internal topics in
exactly/coordinator/internal_topics.py, the isolation levels in exactly/storage/isolation_level.py;
the partitioner and transaction manager never reach up into the sender or the
Producer, and the sender never into the Producer."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("exactly/storage", "exactly/coordinator", "exactly/app")
#: each fact and the one module that may assign it
DECLARED_IN = {
    "NO_PRODUCER_ID": "exactly/storage/record_batch.py",
    "NO_PRODUCER_EPOCH": "exactly/storage/record_batch.py",
    "NO_SEQUENCE": "exactly/storage/record_batch.py",
    "MAX_PRODUCER_EPOCH": "exactly/storage/record_batch.py",
    "INTERNAL_TOPICS": "exactly/coordinator/internal_topics.py",
    "READ_COMMITTED": "exactly/app/engine/partitions.py",  # derived there from IsolationLevel, re-exported
    "READ_UNCOMMITTED": "exactly/app/engine/partitions.py",
}
#: module -> modules (prefixes) it must not import
FORBIDDEN_IMPORTS = {
    "exactly/app/client/partitioner.py": ("exactly.app.client.producer", "exactly.app.client.sender", "exactly.app.client.transaction_manager",
                                  "exactly.app.engine"),
    "exactly/app/client/transaction_manager.py": ("exactly.app.client.producer", "exactly.app.client.sender", "exactly.app.engine"),
    "exactly/app/client/sender.py": ("exactly.app.client.producer",),
    "exactly/storage/isolation_level.py": ("exactly.coordinator", "exactly.app"),
    "exactly/storage/record_batch.py": ("exactly.coordinator", "exactly.app"),
    "exactly/coordinator/internal_topics.py": ("exactly.app",),
}


def sources() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py")
                  if "migrations" not in p.parts)


def assigned_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) else []
        for target in targets:
            for name in ast.walk(target):
                if isinstance(name, ast.Name):
                    names.add(name.id)
    return names


def imported_modules(tree: ast.Module) -> set[str]:
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
            modules.update(f"{node.module}.{alias.name}" for alias in node.names)
    return modules


def test_every_fact_is_declared_in_one_module():
    declared: dict[str, list[str]] = {name: [] for name in DECLARED_IN}
    for path in sources():
        for name in assigned_names(ast.parse(path.read_text())) & set(DECLARED_IN):
            declared[name].append(path.relative_to(ROOT).as_posix())
    assert declared == {name: [module] for name, module in DECLARED_IN.items()}


@pytest.mark.parametrize("module", sorted(FORBIDDEN_IMPORTS))
def test_the_split_modules_import_only_downwards(module):
    imported = imported_modules(ast.parse((ROOT / module).read_text()))
    assert not {m for m in imported for forbidden in FORBIDDEN_IMPORTS[module]
                if m == forbidden or m.startswith(forbidden + ".")}


#: Kafka's enumerations, each declared as one class in one module
CLASSES_IN = {
    "ApiKey": "exactly/app/kafka/wire.py",           # the listener's and the Spark client's API keys
    "CoordinatorType": "exactly/app/kafka/wire.py",  # FindCoordinator's key types
    "ConfigSource": "exactly/app/engine/views.py",   # DescribeConfigs' sources, their names and ids
}


def test_every_kafka_enumeration_is_declared_once():
    declared: dict[str, list[str]] = {name: [] for name in CLASSES_IN}
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.name in CLASSES_IN:
                declared[node.name].append(path.relative_to(ROOT).as_posix())
    assert declared == {name: [module] for name, module in CLASSES_IN.items()}


def test_the_api_keys_are_kafkas():
    """Each ApiKey member is the key kio's generated schemas give that API's name."""
    from kio.index import api_key_map

    from exactly.app.kafka.wire import ApiKey
    assert {key.name.lower(): int(key) for key in ApiKey} == {
        api_key_map[int(key)]: int(key) for key in ApiKey}


def test_config_values_are_coerced_by_one_function():
    """Topic and broker configs read "true", "60000" and paths by the same rules."""
    coercers = [f"{path.relative_to(ROOT).as_posix()}:{node.name}" for path in sources()
                for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.FunctionDef) and "coerce" in node.name]
    assert coercers == ["exactly/storage/log_config.py:coerce"]
