"""Users: SCRAM credentials managed on the wire (confluent-kafka's AdminClient and
``exactly users``, a super user over SASL when the authorizer is on), stored only as
salted credentials in ``__cluster_metadata`` and read back after a restart; KIP-368
re-authentication; and the pieces underneath (the record, PLAIN, the session's state
machine)."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism as ConfluentScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from hypothesis import given
from hypothesis import strategies as st

from exactly.app.cli.admin_connection import authenticate
from exactly.app.cli.main import main
from exactly.app.config import BrokerConfig
from exactly.app.kafka.api import ApiKey
from exactly.app.kafka.sasl import ALLOWED_PREVIOUS, SaslSession, SaslState
from exactly.app.listeners import ListenerSpec, SecurityProtocol
from exactly.app.security.principal import KafkaPrincipal
from exactly.app.security.sasl_plain import parse_plain
from exactly.app.security.scram import ScramMechanism, new_credential, password_matches
from exactly.coordinator import cluster_metadata
from exactly.storage.errors import (
    ClusterAuthorizationFailedError,
    IllegalSaslStateError,
    InvalidConfigError,
    SaslAuthenticationFailedError,
    UnacceptableCredentialError,
)
from tests.kafka_support import SOFTWARE, raw_connection
from tests.sasl_support import ListenersBroker
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(120)
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
REAUTH_MS = 1500


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ListenersBroker]:
    """ACLs on, ``User:admin`` the super user, sessions of 1.5 s."""
    with ListenersBroker(tmp_path_factory.mktemp("users") / "data",
                         listeners="PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                         **{"authorizer.class.name": STANDARD, "super.users": "User:admin",
                            "connections.max.reauth.ms": REAUTH_MS}) as k:
        k.add_user("admin", "admin-secret")
        k.add_user("alice", "alice-secret")
        yield k


def users(*argv: str, stdin: str = "") -> subprocess.CompletedProcess:
    """``exactly users *argv`` in this process: exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
            pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "stdin", io.StringIO(stdin))
        try:
            code = main(["users", *argv])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (print(e.code, file=sys.stderr) or 1)
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def command_config(tmp_path: Path, user: str, password: str) -> str:
    path = tmp_path / f"{user}.properties"
    path.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\nsasl.username={user}\n"
                    f"sasl.password={password}\n")
    return str(path)


def test_exactly_users_as_a_super_user_over_sasl(secured: ListenersBroker, tmp_path: Path) -> None:
    bootstrap = ["--bootstrap-server", f"127.0.0.1:{secured.port('SASL_PLAINTEXT')}"]
    admin = [*bootstrap, "--command-config", command_config(tmp_path, "admin", "admin-secret")]
    added = users("add", "bob", "--mechanism", "SCRAM-SHA-256", "--iterations", "8192", *admin,
                  stdin="bob-secret\n")
    assert added.returncode == 0, added.stderr
    listed = users("list", "bob", *admin)
    assert listed.stdout == "SCRAM credential configs for user-principal 'bob' are SCRAM-SHA-256=iterations=8192\n"
    assert "'alice' are SCRAM-SHA-256=iterations=4096,SCRAM-SHA-512=iterations=4096" in users("list", *admin).stdout
    bob = raw_connection(secured.port("SASL_PLAINTEXT"))
    authenticate(bob, "SCRAM-SHA-256", "bob", "bob-secret")
    bob.close()

    refused = users("list", *bootstrap, "--command-config", command_config(tmp_path, "alice", "alice-secret"))
    assert refused.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr
    anonymous = users("add", "eve", "--bootstrap-server", f"127.0.0.1:{secured.port('PLAINTEXT')}", stdin="x\n")
    assert anonymous.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in anonymous.stderr

    assert users("remove", "bob", "--mechanism", "SCRAM-SHA-256", *admin).returncode == 0
    gone = users("list", "bob", *admin)
    assert gone.returncode == 1 and "RESOURCE_NOT_FOUND" in gone.stderr
    bob = raw_connection(secured.port("SASL_PLAINTEXT"))
    with pytest.raises(SaslAuthenticationFailedError):
        authenticate(bob, "SCRAM-SHA-256", "bob", "bob-secret")


def test_confluent_admin_client_alters_and_describes_credentials(secured: ListenersBroker) -> None:
    admin = AdminClient(secured.confluent("SASL_PLAINTEXT", "SCRAM-SHA-512", user="admin", password="admin-secret"))
    info = ScramCredentialInfo(ConfluentScramMechanism.SCRAM_SHA_512, 10_000)
    futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion("carol", info, b"carol-secret")])
    futures["carol"].result(timeout=30)
    described = admin.describe_user_scram_credentials(["carol"])["carol"].result(timeout=30)
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [
        (ConfluentScramMechanism.SCRAM_SHA_512, 10_000)]
    carol = raw_connection(secured.port("SASL_PLAINTEXT"))
    authenticate(carol, "SCRAM-SHA-512", "carol", "carol-secret")
    carol.close()
    too_few = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "carol", ScramCredentialInfo(ConfluentScramMechanism.SCRAM_SHA_256, 100), b"x")])
    with pytest.raises(KafkaException) as e:
        too_few["carol"].result(timeout=30)
    assert e.value.args[0].code() == UnacceptableCredentialError.code
    admin.alter_user_scram_credentials([UserScramCredentialDeletion(
        "carol", ConfluentScramMechanism.SCRAM_SHA_512)])["carol"].result(timeout=30)
    # (a non-super user's refusal is tested with ``exactly users``: librdkafka 2.16 crashes
    # freeing a DescribeUserScramCredentials answer with a top-level error, Kafka's answer too)


def test_a_1_mb_user_name_is_refused_for_that_user_alone(secured: ListenersBroker) -> None:
    """A name longer than a credential's record can key is UNACCEPTABLE_CREDENTIAL for that
    user (it was an unhandled SchemaError and a closed connection); the others are altered."""
    admin = AdminClient(secured.confluent("SASL_PLAINTEXT", "SCRAM-SHA-512", user="admin", password="admin-secret"))
    info = ScramCredentialInfo(ConfluentScramMechanism.SCRAM_SHA_256, 4096)
    huge = "u" * (1 << 20)
    futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(huge, info, b"x"),
                                                  UserScramCredentialUpsertion("dave", info, b"dave-secret")])
    with pytest.raises(KafkaException) as e:
        futures[huge].result(timeout=30)
    assert e.value.args[0].code() == UnacceptableCredentialError.code
    assert "at most 32767" in e.value.args[0].str()
    futures["dave"].result(timeout=30)  # the same request's other user, and the connection still serves
    dave = raw_connection(secured.port("SASL_PLAINTEXT"))
    authenticate(dave, "SCRAM-SHA-256", "dave", "dave-secret")
    dave.close()


def test_describe_refused_to_a_non_super_user_as_kafka_answers(secured: ListenersBroker) -> None:
    alice = raw_connection(secured.port("SASL_PLAINTEXT"))
    authenticate(alice, "SCRAM-SHA-256", "alice", "alice-secret")
    response = alice.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": [{"name": "alice"}]})
    assert response.error_code == ClusterAuthorizationFailedError.code
    assert [(r.user, r.error_code) for r in response.results] == [("alice", ClusterAuthorizationFailedError.code)]
    altered = alice.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, {
        "deletions": [{"name": "admin", "mechanism": 1}], "upsertions": []})
    assert [(r.user, r.error_code) for r in altered.results] == [("admin", ClusterAuthorizationFailedError.code)]
    alice.close()


def _sessions(kafka: ListenersBroker, client_id: str) -> dict[int, float]:
    """id -> session end of the open connections with this client id."""
    return kafka.engine.call(lambda: {id(c): c.sasl.expires_at for c in kafka.engine.clients
                                      if c.client_id == client_id})


def test_clients_re_authenticate_and_a_lapsed_session_is_closed(secured: ListenersBroker) -> None:
    producer = Producer(secured.confluent("SASL_PLAINTEXT", "SCRAM-SHA-256", user="admin", password="admin-secret",
                                          **{"client.id": "reauth"}))
    producer.produce("reauth", b"before")
    assert producer.flush(30) == 0
    first = _sessions(secured, "reauth")
    eventually(lambda: any(first.get(c, end) < end for c, end in _sessions(secured, "reauth").items()),
               timeout=30, what="librdkafka to re-authenticate on the same connection (KIP-368)")
    producer.produce("reauth", b"after")
    assert producer.flush(30) == 0

    lapsing = raw_connection(secured.port("SASL_PLAINTEXT"), client_id="lapsing")
    authenticate(lapsing, "PLAIN", "alice", "alice-secret")
    assert lapsing.request(ApiKey.API_VERSIONS, 3, SOFTWARE).error_code == 0
    (ends,) = _sessions(secured, "lapsing").values()
    eventually(lambda: time.monotonic() >= ends, timeout=10, what="the raw client's session to end")
    lapsing.send(ApiKey.API_VERSIONS, 3, SOFTWARE)
    assert lapsing.closed_by_peer()


def test_credentials_survive_a_restart_and_no_password_is_stored(tmp_path: Path) -> None:
    password = "a-password-that-must-never-be-on-disk"
    (tmp_path / "pw").write_text(password + "\n")
    with ListenersBroker(tmp_path / "data", listeners="PLAINTEXT://127.0.0.1:0") as kafka:
        added = users("add", "dave", "--mechanism", "SCRAM-SHA-512", "--password-file", str(tmp_path / "pw"),
                      "--bootstrap-server", f"127.0.0.1:{kafka.port('PLAINTEXT')}")
        assert added.returncode == 0, added.stderr
    for path in (tmp_path / "data").rglob("*"):
        if path.is_file():
            assert password.encode() not in path.read_bytes(), path
    with ListenersBroker(tmp_path / "data", listeners="PLAINTEXT://127.0.0.1:0") as kafka:
        assert kafka.engine.access.authenticate_password("dave", password) == KafkaPrincipal("User", "dave")
        assert kafka.engine.access.authenticate_password("dave", "wrong") is None
        assert kafka.engine.access.authenticate_password("nobody", password) is None


def test_the_first_super_user_is_added_to_a_stopped_broker_s_directory(tmp_path: Path) -> None:
    """As kafka-storage.sh format --add-scram: a credential written before the broker
    starts with the authorizer on, which then admits the super user and no one else."""
    data = str(tmp_path / "data")
    added = users("add", "admin", "--mechanism", "SCRAM-SHA-512", "--data-dir", data, stdin="admin-secret\n")
    assert added.returncode == 0, added.stderr
    assert users("list", "--data-dir", data).stdout == (
        "SCRAM credential configs for user-principal 'admin' are SCRAM-SHA-512=iterations=4096\n")
    missing = users("remove", "nobody", "--data-dir", data)
    assert missing.returncode == 1 and "RESOURCE_NOT_FOUND" in missing.stderr
    with ListenersBroker(tmp_path / "data", listeners="PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                         **{"authorizer.class.name": STANDARD, "super.users": "User:admin"}) as kafka:
        admin = ["--bootstrap-server", f"127.0.0.1:{kafka.port('SASL_PLAINTEXT')}",
                 "--command-config", command_config(tmp_path, "admin", "admin-secret")]
        assert users("add", "app", *admin, stdin="app-secret\n").returncode == 0
        held = users("add", "eve", "--data-dir", data, stdin="x\n")
        assert held.returncode == 1 and "KAFKA_STORAGE_ERROR" in held.stderr, held.stderr  # the running broker's
    both = users("list", "--data-dir", data, "--bootstrap-server", "127.0.0.1:9")
    assert both.returncode == 1 and "either --bootstrap-server" in both.stderr


# -- the pieces -----------------------------------------------------------------------------------

records = st.builds(cluster_metadata.ScramCredentialRecord, st.text(min_size=1, max_size=50),
                    st.sampled_from([1, 2]), st.binary(min_size=1, max_size=64), st.binary(min_size=32, max_size=64),
                    st.binary(min_size=32, max_size=64), st.integers(4096, 16384))


@given(records)
def test_credential_records_round_trip(record: cluster_metadata.ScramCredentialRecord) -> None:
    key = cluster_metadata.encode_scram_key(record.name, record.mechanism)
    value = cluster_metadata.encode_scram_value(record)
    assert cluster_metadata.decode_scram_key(key) == (record.name, record.mechanism)
    assert cluster_metadata.decode_scram_value(value) == record
    assert cluster_metadata.replay([(key, value)]).scram_credentials == {(record.name, record.mechanism): record}
    assert cluster_metadata.replay([(key, value), (key, None)]).scram_credentials == {}


def test_credential_record_bytes_are_the_documented_ones() -> None:
    """docs/formats.md §14b."""
    record = cluster_metadata.ScramCredentialRecord("alice", 1, bytes(range(4)), bytes(range(32)),
                                                    bytes(range(32, 64)), 4096)
    assert cluster_metadata.encode_scram_key("alice", 1) == bytes.fromhex("0000000b0005616c69636501")
    assert cluster_metadata.encode_scram_value(record) == bytes.fromhex(
        "000b0006616c6963650105000102032100" + bytes(range(1, 32)).hex() + "21" + bytes(range(32, 64)).hex()
        + "0000100000")


def test_plain_messages_as_kafka_reads_them() -> None:
    assert parse_plain(b"\0alice\0pw") == ("alice", "pw")
    assert parse_plain(b"alice\0alice\0pw") == ("alice", "pw")
    for bad in (b"alice\0pw", b"\0\0pw", b"\0alice\0", b"bob\0alice\0pw", b"\xff\0a\0b"):
        with pytest.raises(SaslAuthenticationFailedError):
            parse_plain(bad)


def test_a_password_is_checked_against_its_credential_only() -> None:
    credential = new_credential("alice", ScramMechanism.SCRAM_SHA_512, "right", 4096)
    assert password_matches(credential, "right")
    assert not password_matches(credential, "wrong") and not password_matches(credential, "")
    with pytest.raises(UnacceptableCredentialError):
        new_credential("alice", ScramMechanism.SCRAM_SHA_256, "pw", 4095)


class _Engine:
    """Only what a SaslSession reads of the engine before any exchange."""

    scram_credentials = None


@given(st.lists(st.sampled_from(list(SaslState)), max_size=12))
def test_the_session_state_machine_allows_only_its_table(states: list[SaslState]) -> None:
    session = SaslSession(_Engine(), ("PLAIN",))  # type: ignore[arg-type]
    for state in states:
        before = session.state
        if before in ALLOWED_PREVIOUS[state]:
            session.transition(state)
            assert session.state is state
        else:
            with pytest.raises(IllegalSaslStateError):
                session.transition(state)
            assert session.state is before



@pytest.mark.parametrize("config,message", [
    ({"listeners": "PLAINTEXT://127.0.0.1:9092,PLAINTEXT://127.0.0.1:9093"}, "different name"),
    ({"listeners": "INTERNAL://127.0.0.1:9092"}, "no security protocol defined for listener INTERNAL"),
    ({"listeners": "PLAINTEXT:/127.0.0.1:9092"}, "NAME://host:port"),
    ({"listener.security.protocol.map": "INTERNAL:KERBEROS"}, "NAME:PROTOCOL"),
    ({"sasl.enabled.mechanisms": "GSSAPI,PLAIN"}, "GSSAPI not supported"),
    ({"ssl.keystore.type": "JKS"}, "PEM"),
    ({"connections.max.reauth.ms": -1}, ">= 0"),
])
def test_listener_and_sasl_configs_are_checked_at_start(config: dict, message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message):
        BrokerConfig.from_kafka(config)


def test_listener_names_map_to_protocols_and_advertise_by_name() -> None:
    config = BrokerConfig.from_kafka({
        "listeners": "CLIENTS://:9093,PLAINTEXT://127.0.0.1:9092",
        "listener.security.protocol.map": "CLIENTS:SASL_SSL,PLAINTEXT:PLAINTEXT",
        "advertised.listeners": "CLIENTS://kafka.example:19093"})
    assert [(s.name, s.protocol, s.host, s.port) for s in config.listener_specs("ignored", 1)] == [
        ("CLIENTS", SecurityProtocol.SASL_SSL, "0.0.0.0", 9093),
        ("PLAINTEXT", SecurityProtocol.PLAINTEXT, "127.0.0.1", 9092)]
    assert config.advertised_listener("CLIENTS") == ("kafka.example", 19093)
    assert config.advertised_listener("PLAINTEXT") is None
    assert BrokerConfig.from_kafka({}).listener_specs("10.0.0.1", 9092) == [
        ListenerSpec("PLAINTEXT", SecurityProtocol.PLAINTEXT, "10.0.0.1", 9092)]
