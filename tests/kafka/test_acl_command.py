"""Kafka's own ``kafka-acls.sh`` (``org.apache.kafka.tools.AclCommand``) against Exactly,
beside ``exactly acls``: for every row of tests/acl_command_table.py both give the
table's verdict, and an accepted row leaves the same ACLs on the broker. Kafka's tool
runs every row in one JVM (``AclCommandRows.java``: a JVM start per row made this test
cost minutes); the broker is Exactly with the authorizer on and ``User:ANONYMOUS`` a
super user."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from exactly.app.security.acl import AclBindingFilter
from tests.acl_command_table import VERDICTS
from tests.kafka.real_kafka import JavaPrograms
from tests.kafka_support import KafkaBroker
from tests.test_acls_cli import STANDARD, acls, held

pytestmark = [pytest.mark.xdist_group("real-kafka"), pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path / "data", **STANDARD) as k:
        yield k


class AclCommandRows:
    """``AclCommandRows.java`` running: :meth:`run` is one kafka-acls.sh run against ``kafka``."""

    def __init__(self, java: JavaPrograms, kafka: KafkaBroker, stderr: Path) -> None:
        self.kafka = kafka
        self.stderr = stderr
        self._stderr = stderr.open("wb")
        self.proc = java.start("AclCommandRows", stderr=self._stderr)

    def run(self, flags: tuple[str, ...]) -> subprocess.CompletedProcess:
        """The exit status, standard output and standard error kafka-acls.sh would give."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("\t".join(("--bootstrap-server", self.kafka.bootstrap, *flags)).encode() + b"\n")
        self.proc.stdin.flush()
        header = self.proc.stdout.readline().decode()
        assert header.startswith("=== "), f"AclCommandRows ended ({header!r}): {self.stderr.read_text()[-3000:]}"
        status, out, err = map(int, header.split()[1:])
        return subprocess.CompletedProcess(flags, status, self.proc.stdout.read(out).decode(),
                                           self.proc.stdout.read(err).decode())

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        self._stderr.close()


@pytest.fixture
def acl_command(java_programs: JavaPrograms, kafka: KafkaBroker, tmp_path: Path) -> Iterator[AclCommandRows]:
    rows = AclCommandRows(java_programs, kafka, tmp_path / "acl-command.stderr")
    yield rows
    rows.close()


def test_kafka_acls_sh_gives_the_tables_verdicts_and_the_same_acls(kafka: KafkaBroker,
                                                                   acl_command: AclCommandRows) -> None:
    """Each row on a broker with no ACL: a row both tools refuse changes nothing, one
    both accept leaves the same ACLs whichever tool ran it."""
    disagreements = []
    for flags, accepted in VERDICTS:
        theirs = acl_command.run(flags)
        kafkas_acls = held(kafka)
        kafka.engine.call(kafka.engine.access.delete_acls, [AclBindingFilter()])
        ours = acls(kafka, *flags)
        if not accepted:
            if theirs.returncode == 0 or kafkas_acls or ours.returncode == 0 or held(kafka):
                disagreements.append((flags, "accepted", theirs.stdout[-300:], kafkas_acls, ours.stdout))
        elif theirs.returncode != 0 or ours.returncode != 0 or held(kafka) != kafkas_acls:
            disagreements.append((flags, theirs.stdout[-300:] + theirs.stderr[-300:], ours.stderr))
        kafka.engine.call(kafka.engine.access.delete_acls, [AclBindingFilter()])
    assert disagreements == []
