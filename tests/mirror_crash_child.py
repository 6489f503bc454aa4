"""Run by tests/test_mirror.py: mirror a data directory over and over until killed.

``python -m tests.mirror_crash_child DATA_DIR`` prints ``ready`` once the broker and
its mirror database are open, then alternates catch-up and full rebuilds of the
broker's mirror, so that a SIGKILL lands between (or inside) many small SQLite
transactions.
"""

from __future__ import annotations

import sys

from exactly.app import Broker

#: two partitions per internal topic: enough to interleave, few enough to read fast;
#: no scheduled jobs: the tests drive the mirror themselves and compare exact states
BROKER_CONFIG = {"transaction.state.log.num.partitions": 2, "offsets.topic.num.partitions": 2,
                 "exactly.jobs.enable": False}


def main(data_dir: str) -> None:
    broker = Broker(data_dir, **BROKER_CONFIG)
    print("ready", flush=True)
    while True:
        broker.mirror.catch_up()
        broker.mirror.rebuild()


if __name__ == "__main__":
    main(sys.argv[1])
