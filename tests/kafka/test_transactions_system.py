"""Kafka's transactions system test, with Kafka's own tools (``transactions_system.py``):
VerifiableProducer seeds the input, TransactionalMessageCopier processes copy it in
transactions (KIP-447 group metadata, random aborts), and a read_committed consumer finds
every input record in the output exactly once and nothing aborted.

On Exactly (``python -m exactly serve``, a process of its own) the broker is killed with
SIGKILL and restarted, and restarted cleanly, during the copy, and each copier is killed
and replaced. On the real Kafka -- whose fixture cannot restart on its data -- the same
copy with the copiers killed, so that a failure on Exactly is known to be Exactly's.
``bench/soak_transactions.py`` is the same with many more records and bounces.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kafka.differential import unique
from tests.kafka.real_kafka import RealKafka
from tests.kafka.transactions_system import TransactionsSystemTest
from tests.kafka_fuzz import ServedBroker

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
#: small enough for seconds, large enough for ~15 transactions per copier
MESSAGES = 3000

#: (progress of every copier, what happens then): the broker SIGKILLed, restarted
#: cleanly, SIGKILLed again; each copier replaced (after SIGKILL, after SIGTERM), the
#: broker restarted while the replacement may still wait for its predecessor's transaction
BOUNCES = [(0.1, "kill broker"), (0.3, "kill copier 0"), (0.3, "restart broker"), (0.6, "stop copier 1"),
           (0.6, "kill broker")]
#: the transaction timeout is looked for every half second (Kafka's fixture does the same)
BROKER_CONFIG = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": 500}


def bounce(scenario: TransactionsSystemTest, what: str, broker: ServedBroker | None = None) -> None:
    """One of :data:`BOUNCES`."""
    action, target = what.rsplit(" ", 1)
    if target == "broker":
        port = broker.port
        broker.stop(kill=action == "kill")
        broker.start(port=port)
    else:
        scenario.kill_copier(int(target), hard=action == "kill")


def copy_through(scenario: TransactionsSystemTest, bounces: list[tuple[float, str]],
                 broker: ServedBroker | None = None) -> None:
    try:
        scenario.create_topics()
        scenario.seed()
        scenario.start_copiers()
        for progress, what in bounces:
            scenario.wait_for_progress(progress)
            bounce(scenario, what, broker)
        scenario.wait_until_copied()
        with_aborted = scenario.check_exactly_once()
    finally:
        scenario.stop()
    assert sum(with_aborted.values()) > MESSAGES, "random aborts left aborted copies in the log"


def test_every_record_is_copied_exactly_once_while_exactly_and_the_copiers_are_killed(tmp_path: Path) -> None:
    broker = ServedBroker(tmp_path / "data", **BROKER_CONFIG)
    broker.start()
    try:
        copy_through(TransactionsSystemTest(f"127.0.0.1:{broker.port}", "txn", MESSAGES), BOUNCES, broker)
        assert not broker.errors()
    finally:
        broker.stop(kill=True)


@pytest.mark.xdist_group("real-kafka")
def test_every_record_is_copied_exactly_once_by_kafka_while_the_copiers_are_killed(real_kafka: RealKafka) -> None:
    copy_through(TransactionsSystemTest(real_kafka.bootstrap, unique("txn"), MESSAGES),
                 [(progress, what) for progress, what in BOUNCES if "copier" in what])
