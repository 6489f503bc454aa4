"""The per-principal state of ``exactly/app/engine/principals.py`` (a clock the test moves) and
the authorizer's ``authorize_by_resource_type``: denials logged without flooding,
producer-id owners, the producer-id rate and the open-transaction cap."""

from __future__ import annotations

import logging

import pytest

from exactly.app.engine import principals
from exactly.app.engine.principals import DenialLog, OpenTransactions, ProducerIdRate, ProducerOwners
from exactly.app.security.acl import AccessControlEntry, AclBinding, AclOperation, AclPermissionType, PatternType
from exactly.app.security.acl import ResourcePattern, ResourceType
from exactly.app.security.authorizer import StandardAuthorizer

pytestmark = pytest.mark.timeout(30)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_denial_is_logged_once_a_minute_and_a_flood_is_summed_up(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    denials = DenialLog(clock)
    with caplog.at_level(logging.WARNING, logger="exactly.app.engine.principals"):
        for _ in range(5):
            denials.denied("kafka", "User:a", "h", "READ", "TOPIC", "t")
        assert len(caplog.records) == 1
        for n in range(150):
            denials.denied("kafka", "User:a", "h", "READ", "TOPIC", f"probe-{n}")
        assert len(caplog.records) == principals.DENIAL_LINES_PER_INTERVAL
        clock.now += principals.DENIAL_LOG_INTERVAL_S
        denials.denied("kafka", "User:a", "h", "READ", "TOPIC", "t")
    assert "51 more denials were not logged" in caplog.records[-2].getMessage()
    assert "'t'" in caplog.records[-1].getMessage(), "logged again after the interval"


def test_a_producer_id_is_its_first_owners(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(principals, "OWNERS_REMEMBERED", 2)
    owners = ProducerOwners()
    owners.bind(1, "User:a")
    assert owners.claim(1, "User:a") and not owners.claim(1, "User:b")
    assert owners.claim(7, "User:b") and not owners.claim(7, "User:a"), "unbound (a restart): the first user's"
    owners.bind(2, "User:a")
    owners.bind(3, "User:a")  # past the cap: the oldest binding is forgotten
    assert owners.claim(1, "User:c")


def test_the_producer_id_rate_is_per_principal_per_second() -> None:
    clock = Clock()
    rate = ProducerIdRate(2, clock)
    assert [rate.throttle_ms("User:a") for _ in range(2)] == [0, 0]
    clock.now += 0.25
    assert rate.throttle_ms("User:a") == 750
    assert rate.throttle_ms("User:b") == 0, "another principal's budget"
    clock.now += 0.75
    assert rate.throttle_ms("User:a") == 0
    assert ProducerIdRate(0, clock).throttle_ms("User:a") == 0, "0: no limit"


def test_open_transactions_are_capped_per_principal() -> None:
    open_ids: set[str] = set()
    cap = OpenTransactions(1, open_ids.__contains__)
    assert cap.admit("User:a", "tx-1")
    open_ids.add("tx-1")
    cap.settle("tx-1")
    assert cap.admit("User:a", "tx-1"), "the open one again"
    cap.settle("tx-1")
    assert not cap.admit("User:a", "tx-2")
    assert cap.admit("User:b", "tx-3")
    open_ids.discard("tx-1")
    assert cap.admit("User:a", "tx-2")


def test_a_transaction_being_admitted_counts_against_the_cap_until_it_settles() -> None:
    """Two requests at once: the first is admitted but not yet Ongoing when the second
    asks, which is refused; once the first has settled without opening, the second may."""
    open_ids: set[str] = set()
    cap = OpenTransactions(1, open_ids.__contains__)
    assert cap.admit("User:a", "tx-1")
    assert not cap.admit("User:a", "tx-2"), "tx-1's request has not ended yet"
    cap.settle("tx-1")  # it failed: tx-1 never opened
    assert cap.admit("User:a", "tx-2")
    open_ids.add("tx-2")
    cap.settle("tx-2")
    assert not cap.admit("User:a", "tx-1"), "tx-2 is open"


def _acl(name: str, pattern: PatternType, permission: AclPermissionType, principal: str = "User:a") -> AclBinding:
    return AclBinding(ResourcePattern(ResourceType.TOPIC, name, pattern),
                      AccessControlEntry(principal, "*", AclOperation.WRITE, permission))


@pytest.mark.parametrize("acls, expected", [
    ([], False),
    ([_acl("orders", PatternType.LITERAL, AclPermissionType.ALLOW)], True),
    ([_acl("orders", PatternType.LITERAL, AclPermissionType.ALLOW, "User:b")], False),
    ([_acl("orders", PatternType.LITERAL, AclPermissionType.ALLOW),
      _acl("orders", PatternType.LITERAL, AclPermissionType.DENY)], False),
    ([_acl("ord", PatternType.PREFIXED, AclPermissionType.ALLOW),
      _acl("or", PatternType.PREFIXED, AclPermissionType.DENY)], False),
    ([_acl("ord", PatternType.PREFIXED, AclPermissionType.ALLOW),
      _acl("orders", PatternType.LITERAL, AclPermissionType.DENY)], True),
    ([_acl("orders", PatternType.LITERAL, AclPermissionType.ALLOW),
      _acl("*", PatternType.LITERAL, AclPermissionType.DENY)], False),
])
def test_authorize_by_resource_type(acls: list[AclBinding], expected: bool) -> None:
    authorizer = StandardAuthorizer()
    for i, binding in enumerate(acls):
        authorizer.add_acl(bytes([i]), binding)
    assert authorizer.authorize_by_resource_type("User:a", "h", AclOperation.WRITE, ResourceType.TOPIC) is expected
    if not acls:
        assert StandardAuthorizer(allow_everyone_if_no_acl_found=True).authorize_by_resource_type(
            "User:a", "h", AclOperation.WRITE, ResourceType.TOPIC)
