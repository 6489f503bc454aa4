"""``exactly acls`` with kafka-acls.sh's flags, end to end against a served broker (the
command runs in this process, as ``exactly.app.cli.main.main``, but for one run of the real
command line: starting Python with the app's imports takes seconds a run)."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from exactly.app.cli.main import main
from exactly.app.security.acl import AclBindingFilter, AclOperation, AclPermissionType, PatternType, ResourceType
from tests.acl_command_table import VERDICTS
from tests.kafka_support import KafkaBroker

pytestmark = pytest.mark.timeout(120)
REPO = Path(__file__).resolve().parents[1]
#: the test's connections are User:ANONYMOUS (no SASL): a super user, as an operator's
#: admin must be to manage ACLs (ALTER / DESCRIBE on the cluster)
STANDARD = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS"}


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path / "data", **STANDARD) as k:
        yield k


def acls(kafka: KafkaBroker, *flags: str) -> subprocess.CompletedProcess:
    """``exactly acls --bootstrap-server <kafka> *flags``: its exit code, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["acls", "--bootstrap-server", kafka.bootstrap, *flags])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (print(e.code, file=sys.stderr) or 1)
    return subprocess.CompletedProcess(flags, code, out.getvalue(), err.getvalue())


def held(kafka: KafkaBroker) -> set[tuple]:
    return {(b.pattern.resource_type, b.pattern.name, b.pattern.pattern_type, b.entry.principal, b.entry.host,
             b.entry.operation, b.entry.permission_type)
            for b in kafka.engine.call(kafka.engine.access.describe_acls, AclBindingFilter())}


def test_add_list_and_remove_as_kafka_acls_sh(kafka: KafkaBroker) -> None:
    added = acls(kafka, "--add", "--allow-principal", "User:alice", "--operation", "Write", "--topic", "orders",
                 "--resource-pattern-type", "prefixed")
    assert added.returncode == 0, added.stderr
    assert ("Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=PREFIXED)`"
            in added.stdout)
    assert "(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)" in added.stdout
    assert acls(kafka, "--add", "--deny-principal", "User:bob", "--deny-host", "10.0.0.1", "--operation", "Read",
                "--group", "billing").returncode == 0
    assert acls(kafka, "--add", "--allow-principal", "User:svc", "--operation", "IdempotentWrite",
                "--operation", "ClusterAction", "--cluster").returncode == 0
    assert acls(kafka, "--add", "--allow-principal", "User:app", "--producer", "--topic", "t",
                "--transactional-id", "tx").returncode == 0
    R, O, P, T = ResourceType, AclOperation, AclPermissionType, PatternType
    assert held(kafka) == {
        (R.TOPIC, "orders", T.PREFIXED, "User:alice", "*", O.WRITE, P.ALLOW),
        (R.GROUP, "billing", T.LITERAL, "User:bob", "10.0.0.1", O.READ, P.DENY),
        (R.CLUSTER, "kafka-cluster", T.LITERAL, "User:svc", "*", O.IDEMPOTENT_WRITE, P.ALLOW),
        (R.CLUSTER, "kafka-cluster", T.LITERAL, "User:svc", "*", O.CLUSTER_ACTION, P.ALLOW),
        *((R.TOPIC, "t", T.LITERAL, "User:app", "*", op, P.ALLOW) for op in (O.WRITE, O.DESCRIBE, O.CREATE)),
        *((R.TRANSACTIONAL_ID, "tx", T.LITERAL, "User:app", "*", op, P.ALLOW) for op in (O.WRITE, O.DESCRIBE)),
    }
    listed = acls(kafka, "--list", "--topic", "orders-eu", "--resource-pattern-type", "match")
    assert listed.returncode == 0, listed.stderr
    assert "name=orders, patternType=PREFIXED" in listed.stdout and "billing" not in listed.stdout
    everything = acls(kafka, "--list", "--principal", "User:bob").stdout
    assert "billing" in everything and "orders" not in everything

    assert acls(kafka, "--remove", "--allow-principal", "User:svc", "--operation", "ClusterAction", "--cluster",
                "--force").returncode == 0
    assert acls(kafka, "--remove", "--topic", "orders", "--resource-pattern-type", "prefixed", "--force").returncode == 0
    assert acls(kafka, "--remove", "--topic", "t", "--transactional-id", "tx", "--group", "billing",
                "--force").returncode == 0
    assert held(kafka) == {(R.CLUSTER, "kafka-cluster", T.LITERAL, "User:svc", "*", O.IDEMPOTENT_WRITE, P.ALLOW)}


def test_the_command_line_runs_it(kafka: KafkaBroker) -> None:
    done = subprocess.run([sys.executable, "-m", "exactly", "acls", "--bootstrap-server", kafka.bootstrap, "--add",
                           "--allow-principal", "User:alice", "--operation", "Read", "--topic", "t"],
                          cwd=REPO, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    assert "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in done.stdout


def test_refusals_are_one_line_and_non_zero(kafka: KafkaBroker, tmp_path: Path) -> None:
    bad = acls(kafka, "--add", "--allow-principal", "alice", "--topic", "t")
    assert bad.returncode == 1 and bad.stderr.strip() == (
        "exactly acls: INVALID_REQUEST: expected a principal as principalType:principalName, got 'alice'")
    assert acls(kafka, "--add", "--topic", "t").returncode != 0
    assert acls(kafka, "--add", "--allow-principal", "User:a", "--operation", "Fly", "--topic", "t").returncode == 2
    with KafkaBroker(tmp_path / "off") as off:
        disabled = acls(off, "--list")
        assert disabled.returncode == 1 and "SECURITY_DISABLED" in disabled.stderr


@pytest.mark.parametrize("flags,accepted", VERDICTS, ids=[" ".join(flags) for flags, _ in VERDICTS])
def test_it_refuses_what_kafka_acls_sh_refuses(kafka: KafkaBroker, flags: tuple[str, ...], accepted: bool) -> None:
    """The table of kafka-acls.sh's verdicts (tests/acl_command_table.py); a refusal
    adds nothing -- ``--idempotent`` without ``--producer`` made the principal an
    administrator (ALL on the topic and the cluster)."""
    done = acls(kafka, *flags)
    assert (done.returncode == 0) is accepted, done.stderr
    if not accepted:
        assert held(kafka) == set() and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_it_prints_what_kafka_acls_sh_prints(kafka: KafkaBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    """Byte for byte as Kafka 4.4's AclCommand: --add, --list, and --remove's question
    (answered from stdin; nothing printed with --force)."""
    entry = "(principal=User:z, host=*, operation=READ, permissionType=ALLOW)"
    pattern = "`ResourcePattern(resourceType=GROUP, name=g, patternType=LITERAL)`"
    added = acls(kafka, "--add", "--allow-principal", "User:z", "--operation", "Read", "--group", "g")
    assert added.stdout == f"Adding ACLs for resource {pattern}: \n \t{entry}\n\n"
    assert acls(kafka, "--list", "--group", "g").stdout == f"Current ACLs for resource {pattern}:\n\t{entry}\n\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO("n\n"))
    kept = acls(kafka, "--remove", "--allow-principal", "User:z", "--operation", "Read", "--group", "g")
    assert kept.stdout == f"Are you sure you want to remove ACLs: \n \t{entry} \n from resource filter {pattern}? (y/n)\n"
    assert len(held(kafka)) == 1, "answered n: nothing removed"
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))
    removed = acls(kafka, "--remove", "--group", "g")
    assert removed.stdout == f"Are you sure you want to delete all ACLs for resource filter {pattern}? (y/n)\n"
    assert held(kafka) == set()
    assert acls(kafka, "--remove", "--force", "--group", "nothing").stdout == ""
