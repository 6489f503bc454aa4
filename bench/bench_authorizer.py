#!/usr/bin/env python3
"""What one authorization costs with 1,000 ACLs (the Security issue's goal: produce and
fetch within 5% of their cost without an authorizer, measured once requests are checked).

    .venv/bin/python bench/bench_authorizer.py           # about ten seconds
    .venv/bin/python bench/bench_authorizer.py --quick   # for checking the script

The ACLs are what a real cluster holds: 1,000 of them over 250 principals, each
principal with a LITERAL topic ACL, a PREFIXED one (``team-<n>.``), a group ACL and a
transactional-id ACL, plus a ``*`` topic DENY for one principal. Each figure is the
median over rounds of ``StandardAuthorizer.authorize``, with 48 ACLs (12 principals) and
with the 1,000 -- the cost should not grow with the count, the ACLs being indexed by
resource type, pattern type and name -- for the check a Produce (topic
WRITE), a Fetch (topic READ) and a Metadata (topic DESCRIBE, implied) make, allowed and
denied, with the topic names clients use (a 30-character topic under a prefix).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from exactly.app.security.acl import (  # noqa: E402
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from exactly.app.security.authorizer import StandardAuthorizer  # noqa: E402

PRINCIPALS = 250  # x 4 ACLs = 1,000


def build(principals: int = PRINCIPALS) -> StandardAuthorizer:
    """An authorizer holding :func:`bindings`."""
    authorizer = StandardAuthorizer()
    for i, binding in enumerate(bindings(principals)):
        authorizer.add_acl(i.to_bytes(16, "big"), binding)
    return authorizer


def bindings(principals: int = PRINCIPALS) -> list[AclBinding]:
    """4 ACLs a principal (the last one replaced by a ``*`` topic DENY)."""
    allow = AclPermissionType.ALLOW
    specs = []
    for n in range(principals):
        user = f"User:service-{n}"
        specs += [(ResourceType.TOPIC, f"orders-{n}", PatternType.LITERAL, user, AclOperation.WRITE, allow),
                  (ResourceType.TOPIC, f"team-{n}.", PatternType.PREFIXED, user, AclOperation.READ, allow),
                  (ResourceType.GROUP, f"group-{n}", PatternType.LITERAL, user, AclOperation.READ, allow),
                  (ResourceType.TRANSACTIONAL_ID, f"tx-{n}", PatternType.LITERAL, user, AclOperation.WRITE, allow)]
    specs[-1] = (ResourceType.TOPIC, "*", PatternType.LITERAL, "User:service-0", AclOperation.WRITE,
                 AclPermissionType.DENY)
    return [binding(*spec) for spec in specs]


def binding(resource_type: ResourceType, name: str, pattern: PatternType, principal: str, operation: AclOperation,
            permission: AclPermissionType = AclPermissionType.ALLOW) -> AclBinding:
    """An ACL of ``principal`` from any host."""
    return AclBinding(ResourcePattern(resource_type, name, pattern),
                      AccessControlEntry(principal, "*", operation, permission))


CASES = {
    "produce, allowed (literal WRITE)": ("User:service-7", AclOperation.WRITE, "orders-7", True),
    "produce, denied (no ACL for the user)": ("User:service-8", AclOperation.WRITE, "orders-7", False),
    "fetch, allowed (prefixed READ)": ("User:service-9", AclOperation.READ, "team-9.payments-eu-central-1", True),
    "metadata, allowed (DESCRIBE implied by READ)": ("User:service-9", AclOperation.DESCRIBE,
                                                     "team-9.payments-eu-central-1", True),
    "produce, denied (* DENY)": ("User:service-0", AclOperation.WRITE, "orders-0", False),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    calls, rounds = (2_000, 3) if args.quick else (50_000, 7)
    small, large = build(12), build()
    print(f"StandardAuthorizer.authorize, median of {rounds} rounds of {calls} calls, in us: "
          f"with {len(small)} ACLs / with {len(large)} ACLs")
    for label, (user, op, topic, expected) in CASES.items():
        figures = []
        for authorizer in (small, large):
            assert authorizer.authorize(user, "10.0.0.1", op, ResourceType.TOPIC, topic) is expected, label
            times = []
            for _ in range(rounds):
                start = time.perf_counter()
                for _ in range(calls):
                    authorizer.authorize(user, "10.0.0.1", op, ResourceType.TOPIC, topic)
                times.append((time.perf_counter() - start) / calls)
            figures.append(statistics.median(times) * 1e6)
        print(f"  {label:48s} {figures[0]:6.2f} / {figures[1]:6.2f}")


if __name__ == "__main__":
    main()
