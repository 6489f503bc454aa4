"""Soak: Kafka's transactions system test against Exactly, large and with many bounces.

The scenario of ``tests/kafka/test_transactions_system.py`` (``tests/kafka/transactions_system.py``:
Kafka's VerifiableProducer seeds the input, TransactionalMessageCopier processes copy it
in transactions with KIP-447 group metadata and random aborts, a read_committed consumer
checks the output), with ``--messages`` records and ``--bounces`` bounces spread evenly
over the copy, in turn: Exactly SIGKILLed and restarted, a copier SIGKILLed and replaced,
Exactly restarted cleanly (SIGTERM), a copier stopped cleanly and replaced. Prints what
it did, how long each part took, and whether every record was copied exactly once
(it exits 1 if not). ``--kafka`` runs the same copy on Apache Kafka (tests/kafka/real_kafka.py,
fresh) with the copier bounces only, for comparison.

    .venv/bin/python bench/soak_transactions.py                       # 100,000 records, 20 bounces
    .venv/bin/python bench/soak_transactions.py --messages 20000 --bounces 8 --kafka
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import shutil
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.kafka.conftest import SHARED_CONFIG  # noqa: E402
from tests.kafka.real_kafka import RealKafka  # noqa: E402
from tests.kafka.test_transactions_system import BROKER_CONFIG, bounce  # noqa: E402
from tests.kafka.transactions_system import TRANSACTION_TIMEOUT_MS, TransactionsSystemTest  # noqa: E402
from tests.kafka_fuzz import ServedBroker  # noqa: E402

#: the bounces in turn
KINDS = ("kill broker", "kill copier", "restart broker", "stop copier")


def schedule(bounces: int, copiers: int, broker: bool) -> list[tuple[float, str]]:
    """``bounces`` (progress, what) evenly spread over the copy, the kinds in turn,
    copiers in turn (only copier bounces without ``broker``)."""
    kinds = [kind for kind in KINDS if broker or "copier" in kind]
    plan, copier = [], 0
    for i in range(bounces):
        kind = kinds[i % len(kinds)]
        if "copier" in kind:
            kind, copier = f"{kind} {copier % copiers}", copier + 1
        plan.append(((i + 1) / (bounces + 1), kind))
    return plan


def soak(bootstrap: str, args: argparse.Namespace, plan: list[tuple[float, str]],
         broker: ServedBroker | None) -> dict[str, float]:
    """Runs the scenario; the seconds each part took and the records' counts."""
    figures: dict[str, float] = {}
    messages = args.messages
    scenario = TransactionsSystemTest(bootstrap, "soak", messages, transaction_size=args.transaction_size,
                                      transaction_timeout_ms=args.transaction_timeout_ms)
    try:
        scenario.create_topics()
        started = time.monotonic()
        scenario.seed(timeout=1800)
        figures["seed s"] = time.monotonic() - started
        started = time.monotonic()
        scenario.start_copiers()
        for progress, what in plan:
            scenario.wait_for_progress(progress, timeout=300)
            began = time.monotonic()
            bounce(scenario, what, broker)
            kind = what.rsplit(" ", 1)[0] if "copier" in what else what
            figures[kind + " s"] = figures.get(kind + " s", 0.0) + time.monotonic() - began
            print(f"  {time.monotonic() - started:7.1f} s  {what} at {progress:.0%}", flush=True)
        scenario.wait_until_copied(timeout=600)
        figures["copy s"] = time.monotonic() - started
        figures["records/s"] = messages / figures["copy s"]
        started = time.monotonic()
        with_aborted = scenario.check_exactly_once()
        figures["check s"] = time.monotonic() - started
        figures["aborted copies"] = sum(with_aborted.values()) - messages
        figures["copiers started"] = len(scenario.started)
    finally:
        scenario.stop()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--bounces", type=int, default=20)
    parser.add_argument("--transaction-size", type=int, default=750, help="Kafka's system test's (default 750)")
    parser.add_argument("--transaction-timeout-ms", type=int, default=TRANSACTION_TIMEOUT_MS,
                        help="the copiers' (Kafka's system test: 40000)")
    parser.add_argument("--workdir", type=Path, default=ROOT / "bench" / ".work",
                        help="where the brokers' data goes (kept if the run fails)")
    parser.add_argument("--kafka", action="store_true", help="also the copy on Apache Kafka, copier bounces only")
    args = parser.parse_args()
    revision = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
    print(f"# {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {' '.join(sys.argv)}, git {revision}")
    failed = False
    work = args.workdir / f"soak-{os.getpid()}"
    work.mkdir(parents=True)
    try:
        broker = ServedBroker(work / "exactly", **BROKER_CONFIG)
        broker.start()
        try:
            plan = schedule(args.bounces, 2, broker=True)
            print(f"Exactly: {args.messages} records, {len(plan)} bounces")
            failed |= report(lambda: soak(f"127.0.0.1:{broker.port}", args, plan, broker), errors=broker.errors)
        finally:
            broker.stop(kill=True)
        if args.kafka:
            with RealKafka(Path(work) / "kafka", SHARED_CONFIG) as kafka:
                plan = schedule(args.bounces, 2, broker=False)
                print(f"Apache Kafka: {args.messages} records, {len(plan)} bounces (copiers only)")
                failed |= report(lambda: soak(kafka.bootstrap, args, plan, None))
    finally:
        if failed:
            print(f"the brokers' data and logs are kept in {work}")
        else:
            shutil.rmtree(work)
    return 1 if failed else 0


def report(run, errors=lambda: []) -> bool:
    """Runs and prints the figures; True if the run failed."""
    try:
        figures = run()
    except BaseException as e:  # a failed check (pytest's Failed is a BaseException)
        print(f"  FAILED: {e}")
        return True
    for name, value in figures.items():
        print(f"  {name:>20}: {value:,.1f}" if isinstance(value, float) else f"  {name:>20}: {value:,}")
    print("  every record copied exactly once; nothing aborted read")
    logged = errors()
    if logged:
        print(f"  the broker logged {len(logged)} errors, e.g. {logged[:3]}")
    return bool(logged)


if __name__ == "__main__":
    sys.exit(main())
