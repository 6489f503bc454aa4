"""Kafka's own ``kafka-acls.sh`` (``org.apache.kafka.tools.AclCommand``) against Exactly,
beside ``exactly acls``: for every row of tests/acl_command_table.py both give the
table's verdict, and an accepted row leaves the same ACLs on the broker. Kafka's tool
runs in a JVM of its own per row; the broker is Exactly with the authorizer on and
``User:ANONYMOUS`` a super user."""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import pytest

from exactly.app.security.acl import AclBindingFilter
from tests.acl_command_table import VERDICTS
from tests.kafka.jars import classpath
from tests.kafka.real_kafka import TOOL_JVM
from tests.kafka_support import KafkaBroker
from tests.test_acls_cli import STANDARD, acls, held

pytestmark = [pytest.mark.xdist_group("real-kafka"), pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path / "data", **STANDARD) as k:
        yield k


def acl_command(kafka: KafkaBroker, flags: tuple[str, ...]) -> subprocess.CompletedProcess:
    return subprocess.run(["java", *TOOL_JVM, "-Xshare:auto", "-cp", classpath(), "org.apache.kafka.tools.AclCommand",
                           "--bootstrap-server", kafka.bootstrap, *flags],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_kafka_acls_sh_gives_the_tables_verdicts_and_the_same_acls(kafka: KafkaBroker) -> None:
    """Refused rows change nothing, so their JVMs run four at a time; accepted ones one
    by one, each on a broker with no ACL."""
    refused = [flags for flags, accepted in VERDICTS if not accepted]
    with ThreadPoolExecutor(4) as pool:
        codes = dict(zip(refused, pool.map(lambda flags: acl_command(kafka, flags).returncode, refused)))
    assert {flags for flags, code in codes.items() if code == 0} == set(), "kafka-acls.sh accepted them"
    assert held(kafka) == set()
    disagreements = []
    for flags, accepted in VERDICTS:
        if not accepted:
            assert acls(kafka, *flags).returncode != 0, flags
            continue
        theirs = acl_command(kafka, flags)
        kafkas_acls = held(kafka)
        kafka.engine.call(kafka.engine.access.delete_acls, [AclBindingFilter()])
        ours = acls(kafka, *flags)
        if theirs.returncode != 0 or ours.returncode != 0 or held(kafka) != kafkas_acls:
            disagreements.append((flags, theirs.stdout[-300:] + theirs.stderr[-300:], ours.stderr))
        kafka.engine.call(kafka.engine.access.delete_acls, [AclBindingFilter()])
    assert disagreements == []
