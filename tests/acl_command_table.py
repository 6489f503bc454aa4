"""kafka-acls.sh's verdicts on flag combinations: Kafka 4.4's ``AclCommand`` run on each
(``tests/kafka/test_acl_command.py`` runs it again against Exactly and compares), and
``exactly acls`` must agree (``tests/test_acls_cli.py``). True: accepted."""

from __future__ import annotations

P = ("--allow-principal", "User:x")

#: (flags after --bootstrap-server, kafka-acls.sh accepts them)
VERDICTS: list[tuple[tuple[str, ...], bool]] = [
    (("--add", "--idempotent", *P, "--topic", "t"), False),  # was ALL on the topic and the cluster
    (("--add", "--producer", "--idempotent", *P, "--topic", "t"), True),
    (("--add", "--consumer", *P, "--topic", "t"), False),  # no --group
    (("--add", "--consumer", "--group", "g", *P, "--topic", "t"), True),
    (("--add", "--producer", "--operation", "Read", *P, "--topic", "t"), False),
    (("--add", "--producer", *P, "--group", "g"), False),  # no --topic
    (("--add", "--producer", "--transactional-id", "x", *P), False),
    (("--add", "--consumer", *P, "--group", "g"), False),
    (("--add", "--producer", "--consumer", "--group", "g", *P, "--topic", "t"), True),
    (("--add", "--producer", "--consumer", "--group", "g", "--transactional-id", "x", *P, "--topic", "t"), True),
    (("--add", "--consumer", "--group", "g", "--cluster", *P, "--topic", "t"), False),
    (("--add", "--operation", "Read", *P, "--cluster"), False),  # not a cluster operation
    (("--add", "--operation", "IdempotentWrite", *P, "--topic", "t"), False),
    (("--add", "--operation", "TwoPhaseCommit", *P, "--topic", "t"), False),
    (("--add", "--operation", "TwoPhaseCommit", *P, "--transactional-id", "x"), True),
    (("--add", "--operation", "Create", *P, "--group", "g"), False),
    (("--add", "--operation", "DescribeConfigs", *P, "--group", "g"), True),
    (("--add", "--operation", "Describe", *P, "--group", "g", "--cluster"), True),
    (("--add", "--operation", "All", *P, "--cluster"), True),
    (("--add", "--resource-pattern-type", "PREFIXED", "--operation", "Read", *P, "--topic", "t"), True),
    (("--add", "--resource-pattern-type", "Prefixed", "--operation", "Read", *P, "--group", "g"), True),
    (("--add", "--resource-pattern-type", "match", "--operation", "Read", *P, "--topic", "t"), False),
    (("--add", "--resource-pattern-type", "any", "--operation", "Read", *P, "--topic", "t"), False),
    (("--add", "--operation", "Read", "--topic", "t"), False),  # no principal
    (("--add", "--operation", "Read", *P), False),  # no resource
    (("--add", *P, "--deny-principal", "User:y", "--operation", "Read", "--topic", "t"), True),
    (("--add", "--operation", "Read", *P, "--allow-host", "10.0.0.1", "--topic", "t"), True),
    (("--list", *P, "--topic", "t"), False),
    (("--list", "--producer", "--topic", "t"), False),
    (("--list", "--principal", "User:x"), True),
    (("--list", "--resource-pattern-type", "match", "--topic", "t"), True),
    (("--remove", "--force"), False),  # no resource
    (("--remove", "--force", "--resource-pattern-type", "ANY", "--topic", "t"), True),
    (("--remove", "--force", "--idempotent", *P, "--topic", "t"), False),
    (("--remove", "--force", "--operation", "Read", *P, "--topic", "t"), True),
]
