"""The bug catalogue: each classic exactly-once bug, built into a real confluent-kafka
application (tests/audit_app.py: one harness, a flag per bug), met with the fault or
event that exposes it, and the audit's verdict in each of its modes -- offsets only,
``records_per_input=1``, lineage (the output names its input records) -- exactly as
docs/testing.md's table says; and the correct application held under every fault and
event the page shows. The table is pinned here: each of its rows is a row of
:data:`ROWS` with the same verdicts, and the correct application's row names every
entry of :data:`FAULTS`.

One broker for the module (each run has its own topics, group and transactional id;
the faults are cleared after each test).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from exactly.app import testing
from exactly.app.engine.audit import AuditView, ViolationKind
from exactly.app.faults import Fault
from exactly.app.server import Server
from tests.audit_app import Application, Bugs, Topics
from tests.docs import section

pytestmark = pytest.mark.timeout(120)

#: input records per run (round robin over the input partitions)
RECORDS = 20
MODES = ("offsets", "records_per_input", "lineage")
KINDS = {kind.value for kind in ViolationKind}
#: the table's page and section
PAGE, SECTION = "docs/testing.md", "What each mode can see"


def _invalid_record(app: Application) -> Fault:
    """An abortable error: the broker refuses a batch of the output (librdkafka: the
    transaction must be aborted)."""
    return app.broker.faults.add(api="Produce", topic=app.topics.output, error="INVALID_RECORD", count=1)


#: every fault and event docs/testing.md shows, as met by the running application (in its
#: second transaction, with its output at the broker)
FAULTS: dict[str, Callable[[Application], Any]] = {
    "fence": lambda app: app.broker.fence(app.transactional_id),
    "timeout": lambda app: app.broker.timeout(app.transactional_id),
    "restart": lambda app: app.broker.restart(clean=False),
    "CONCURRENT_TRANSACTIONS": lambda app: app.broker.faults.add(
        api="AddPartitionsToTxn", error="CONCURRENT_TRANSACTIONS", count=5),
    "NOT_ENOUGH_REPLICAS": lambda app: app.broker.faults.add(
        api="Produce", topic=app.topics.output, error="NOT_ENOUGH_REPLICAS", count=3),
    "INVALID_RECORD": _invalid_record,
    "close-after": lambda app: app.broker.faults.add(api="Produce", action="close-after", count=1),
    "not-coordinator": lambda app: (app.broker.faults.event("not-coordinator", 500, coordinator="transaction")
                                    + app.broker.faults.event("not-coordinator", 500, coordinator="group")),
    "coordinator-load-in-progress": lambda app: app.broker.faults.event(
        "coordinator-load-in-progress", 300, coordinator="transaction"),
    "pause": lambda app: app.broker.faults.event("pause", 500),
    "disk-full": lambda app: app.broker.faults.event("disk-full", 500),
    "aborted-input": lambda app: None,  # the input holds an aborted transaction (Row.aborted_input)
}


@dataclass(frozen=True)
class Row:
    """A row of the table: the bug, what exposes it, the violation kinds in each mode
    (none: held) and words of the likely cause the audit gives, per mode."""

    bugs: Bugs = Bugs()
    trouble: Callable[[Application], Any] | None = None
    partitions: int = 1
    aborted_input: int = 0
    #: a second instance, with another transactional.id, processes the input again from its start
    zombie: bool = False
    verdicts: dict[str, frozenset[str]] = field(default_factory=dict)
    causes: dict[str, str] = field(default_factory=dict)


def verdicts(offsets: set[str], records_per_input: set[str], with_lineage: set[str]) -> dict[str, frozenset[str]]:
    return dict(zip(MODES, map(frozenset, (offsets, records_per_input, with_lineage))))


HELD: set[str] = set()
ROWS: dict[str, Row] = {
    "correct": Row(verdicts=verdicts(HELD, HELD, HELD)),
    "stops-early": Row(Bugs(stop_after=2), verdicts=verdicts({"GAP"}, {"GAP"}, {"GAP"}),
                       causes=dict.fromkeys(MODES, "")),
    "offset-one-short": Row(Bugs(offset_one_short=True),
                            verdicts=verdicts({"GAP"}, {"DUPLICATE", "GAP"}, {"OUTPUT_WITHOUT_OFFSETS"}),
                            causes=dict.fromkeys(MODES, "next offset to consume")),
    "no-rewind": Row(Bugs(no_rewind=True), _invalid_record, verdicts=verdicts(HELD, {"GAP"}, {"GAP"}),
                     causes={"records_per_input": "seek back", "lineage": "seek back"}),
    "no-rewind-two-partitions": Row(Bugs(no_rewind=True), _invalid_record, partitions=2,
                                    verdicts=verdicts(HELD, {"GAP"}, {"GAP"}),
                                    causes={"records_per_input": "seek back", "lineage": "seek back"}),
    "read-uncommitted": Row(Bugs(read_uncommitted=True), aborted_input=4,
                            verdicts=verdicts(HELD, {"DUPLICATE"}, {"OUTPUT_WITHOUT_INPUT"}),
                            causes={"records_per_input": "isolation.level", "lineage": "isolation.level"}),
    "commit-outside": Row(Bugs(commit_outside=True), verdicts=verdicts(
        *[{"OFFSETS_OUTSIDE_TRANSACTION", "OUTPUT_WITHOUT_OFFSETS"}] * 3),
        causes=dict.fromkeys(MODES, "send_offsets_to_transaction")),
    "commit-twice": Row(Bugs(commit_twice=True), verdicts=verdicts(*[{"OFFSETS_OUTSIDE_TRANSACTION"}] * 3),
                        causes=dict.fromkeys(MODES, "consumer.commit()")),
    "output-outside": Row(Bugs(output_outside=True), verdicts=verdicts(
        {"OUTPUT_OUTSIDE_TRANSACTION"}, {"OUTPUT_OUTSIDE_TRANSACTION", "GAP"}, {"OUTPUT_OUTSIDE_TRANSACTION"})),
    "zombie": Row(zombie=True, verdicts=verdicts({"DUPLICATE"}, {"DUPLICATE"}, {"DUPLICATE"}),
                  causes=dict.fromkeys(MODES, "zombie")),
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with testing.broker(tmp_path_factory.mktemp("catalogue") / "data") as served:
        yield served


@pytest.fixture
def served(broker: Server) -> Iterator[Server]:
    yield broker
    broker.faults.clear()


def run(broker: Server, row: Row, with_lineage: bool, trouble: Callable[[Application], Any] | None = None
        ) -> tuple[Topics, Application]:
    """The row's application, run to its end on fresh topics (and its zombie after it)."""
    topics = Topics.create(broker, row.partitions)
    topics.fill(broker, RECORDS, row.aborted_input)
    app = Application(broker, topics, row.bugs, with_lineage, trouble=trouble or row.trouble)
    app.run()
    if row.zombie:  # kept the partitions after a rebalance, from where it was: the start
        Application(broker, topics, row.bugs, with_lineage, transactional_id="zombie", from_beginning=True).run()
    return topics, app


def audits(broker: Server, topics: Topics, with_lineage: bool) -> dict[str, AuditView]:
    """The audit in each mode the output allows: lineage, or offsets only and records_per_input=1."""
    audit = lambda **options: broker.audit(topics.group, topics.input, topics.output, **options)  # noqa: E731
    if with_lineage:
        return {"lineage": audit()}
    return {"offsets": audit(), "records_per_input": audit(records_per_input=1)}


def check(view: AuditView, mode: str, expected: frozenset[str], cause: str | None) -> None:
    assert view.mode == mode
    assert {v.kind.value for v in view.violations} == expected, view.violations
    assert view.ok == (not expected)
    assert all(v.start_offset < v.end_offset for v in view.violations), view.violations
    if cause is not None:
        assert any(cause in (v.likely_cause or "") for v in view.violations), view.violations


@pytest.mark.parametrize("with_lineage", [False, True], ids=["without-lineage", "lineage"])
@pytest.mark.parametrize("name", [name for name in ROWS if name != "correct"])
def test_each_bug_gets_the_verdicts_the_table_gives(served: Server, name: str, with_lineage: bool) -> None:
    row = ROWS[name]
    topics, _ = run(served, row, with_lineage)
    for mode, view in audits(served, topics, with_lineage).items():
        check(view, mode, row.verdicts[mode], row.causes.get(mode))


def test_the_correct_application_holds_without_lineage(served: Server) -> None:
    topics, _ = run(served, ROWS["correct"], with_lineage=False)
    for mode, view in audits(served, topics, with_lineage=False).items():
        check(view, mode, frozenset(), None)


@pytest.mark.parametrize("fault", FAULTS)
def test_the_correct_application_holds_under_each_fault(served: Server, fault: str) -> None:
    """Lineage is the strictest mode: held there is held in the others (each input record
    has its one output record in the transaction that committed its offset)."""
    row = Row(aborted_input=4 if fault == "aborted-input" else 0)
    restarts = served.restarts
    topics, app = run(served, row, with_lineage=True, trouble=FAULTS[fault])
    check(audits(served, topics, with_lineage=True)["lineage"], "lineage", frozenset(), None)
    installed = [f for f in (app.troubled if isinstance(app.troubled, list) else [app.troubled])
                 if isinstance(f, Fault)]
    assert not installed or sum(f.fired for f in installed), installed  # the application met it
    if fault == "restart":
        assert served.restarts == restarts + 1


# -- the table, pinned -------------------------------------------------------------------------


def table() -> dict[str, list[str]]:
    """The rows of docs/testing.md's table, by the id in their first cell: their cells."""
    rows = {}
    for line in section(PAGE, SECTION).splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) == 5:
            rows[re.match(r"`([\w-]+)`", cells[0]).group(1)] = cells  # type: ignore[union-attr]
    return rows


def test_the_docs_table_is_the_catalogue() -> None:
    rows = table()
    assert list(rows) == list(ROWS), "docs/testing.md's table and ROWS name different bugs"
    for name, cells in rows.items():
        for mode, cell in zip(MODES, cells[2:]):
            kinds = set(re.findall(r"`([A-Z_]+)`", cell)) & KINDS
            assert cell.startswith("held") != bool(kinds), f"{name}, {mode}: {cell!r} is held or names kinds"
            assert kinds == ROWS[name].verdicts[mode], f"{name}, {mode}: the table says {sorted(kinds)}"
    assert set(re.findall(r"`([\w-]+)`", rows["correct"][1])) == set(FAULTS), \
        "the correct application's row names every fault and event the tests run"


def test_the_page_shows_only_faults_the_catalogue_runs() -> None:
    """Every fault or event docs/testing.md installs in a Python example is met by the
    correct application here (by its error, action or event name)."""
    text = Path(__file__).resolve().parents[1].joinpath(PAGE).read_text()
    shown = set(re.findall(r'(?:error|action)="([\w-]+)"', text)) | set(re.findall(r'event\("([\w-]+)"', text))
    assert shown <= set(FAULTS), f"shown on the page, never met by the correct application: {shown - set(FAULTS)}"
