"""Run by tests/test_mirror.py: mirror a data directory over and over until killed.

``python -m tests.mirror_crash_child DATA_DIR DB`` prints ``ready`` once the
database is open, then alternates catch-up and full rebuilds, in small fetches so
that a SIGKILL lands between (or inside) many small SQLite transactions.
"""

from __future__ import annotations

import sys

from app import Broker
from app.engine.mirror_source import EngineMirrorSource
from coordinator.mirror import Mirror

#: two partitions per internal topic: enough to interleave, few enough to read fast
BROKER_CONFIG = {"transaction.state.log.num.partitions": 2, "offsets.topic.num.partitions": 2}


def main(data_dir: str, db: str) -> None:
    broker = Broker(data_dir, **BROKER_CONFIG)
    mirror = Mirror(db, EngineMirrorSource(broker.engine))
    print("ready", flush=True)
    while True:
        mirror.catch_up()
        mirror.rebuild()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
