"""Password checks derive one key at a time and as many for an unknown user as for a
known one (issue 29, item 5: guessing threads slowed a producer 3-60x, and an unknown
user was answered after fewer derivations). Observed, not timed: the real
``password_matches`` runs, wrapped to count the derivations in progress at once and
the credentials derived against, while eight HTTP Basic guesses arrive together and
the first derivation holds on until all eight are being checked.
bench/bench_login.py measures what an attacker's clock sees."""

from __future__ import annotations

import base64
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator

import pytest
from flask.testing import FlaskClient

from exactly.app import Broker
from exactly.app.engine import access as engine_access
from exactly.app.http import HttpSettings, create_app
from exactly.app.security.scram import ScramMechanism, new_credential
from tests.conftest import FROZEN, SMALL_INTERNAL_TOPICS

pytestmark = pytest.mark.timeout(60)

GUESSES = 8


class Derivations:
    """``password_matches`` as it runs: how many at once (the most seen), and against
    which credentials (user, mechanism); the first holds on until ``GUESSES`` checks
    have begun, so that checks not held back by the cap would overlap it."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self._lock = threading.Lock()
        self.now = self.most = 0
        self.against: Counter[tuple[str, int]] = Counter()
        self.checks = 0
        self.all_checking = threading.Event()

    def check_started(self) -> None:
        with self._lock:
            self.checks += 1
            if self.checks == GUESSES:
                self.all_checking.set()

    def __call__(self, credential: Any, password: str) -> bool:
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)
            self.against[credential.name, credential.mechanism] += 1
            first = sum(self.against.values()) == 1
        try:
            if first:
                assert self.all_checking.wait(20), "the guesses did not all reach the password check"
            return self._real(credential, password)
        finally:
            with self._lock:
                self.now -= 1


@pytest.fixture
def observed(monkeypatch: pytest.MonkeyPatch) -> Derivations:
    derivations = Derivations(engine_access.password_matches)
    monkeypatch.setattr(engine_access, "password_matches", derivations)
    check_password = engine_access.Access.check_password

    async def counted(self: engine_access.Access, user: str, password: str) -> Any:
        derivations.check_started()
        return await check_password(self, user, password)
    monkeypatch.setattr(engine_access.Access, "check_password", counted)
    return derivations


@pytest.fixture
def api(tmp_path: Path) -> Iterator[FlaskClient]:
    with Broker(tmp_path / "data", **SMALL_INTERNAL_TOPICS, **FROZEN, **{
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin", "connection.failed.authentication.delay.ms": 0}) as broker:
        broker.engine.call(broker.engine.access.alter_scram_credentials, [],
                           [new_credential("alice", ScramMechanism.SCRAM_SHA_256, "alice-secret")])
        client = create_app(broker.engine, HttpSettings(), test_config={"TESTING": True}).test_client()
        # once alone first: werkzeug compiles its URL builders on first use, and Python
        # 3.11's ast.parse is not safe from several threads at once
        assert guess(client, "warm-up") == 401
        yield client


def guess(api: FlaskClient, user: str) -> int:
    token = base64.b64encode(f"{user}:a-guess".encode()).decode()
    return api.get("/v3/clusters", headers={"Authorization": f"Basic {token}"}).status_code


def test_guesses_derive_one_at_a_time_and_as_much_for_unknown_users(api: FlaskClient, observed: Derivations) -> None:
    users = ["alice", "nobody"] * (GUESSES // 2)
    with ThreadPoolExecutor(GUESSES) as pool:
        assert list(pool.map(lambda user: guess(api, user), users)) == [401] * GUESSES
    assert observed.most == 1, "derivations overlapped: guessing threads take a core each"
    per_guess = Counter()
    for (name, _), n in observed.against.items():
        per_guess["alice" if name == "alice" else "unknown"] += n
    # alice has a SCRAM-SHA-256 credential only: a dummy stands in for SCRAM-SHA-512, as
    # both stand in for an unknown user's
    assert per_guess == {"alice": GUESSES // 2, "unknown": GUESSES // 2 + GUESSES}
    mechanisms = Counter(mechanism for _, mechanism in observed.against.elements())
    assert mechanisms == {ScramMechanism.SCRAM_SHA_256: GUESSES, ScramMechanism.SCRAM_SHA_512: GUESSES}
