"""Apache Kafka's jars for the tests, from Maven Central: the broker (KRaft), the Java
client, the tools and Kafka Streams, at the one version ``tests/kafka/pom.xml`` pins.

``make test`` resolves them once per environment (``python -m tests.kafka.jars``:
``mvn dependency:copy-dependencies`` into the environment's ``kafka-jars/``, git-ignored
with the rest of ``.venv/``); nothing is downloaded from anywhere but Maven Central.
A test that needs them and finds none fails with what to run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

POM = Path(__file__).with_name("pom.xml")
#: where ``make test`` puts the jars: in the environment, which they belong to
JARS = Path(sys.prefix) / "kafka-jars"
#: written last, naming the version resolved: a half-done resolution has none
STAMP = ".resolved"


def kafka_version(pom: Path = POM) -> str:
    """The Kafka version the pom pins (its ``kafka.version`` property)."""
    found = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", pom.read_text())
    if found is None:
        raise ValueError(f"{pom} pins no kafka.version")
    return found.group(1)


def classpath(jars: Path = JARS) -> str:
    """The ``-cp`` of every jar, or an AssertionError saying how to get them."""
    stamp = jars / STAMP
    assert stamp.exists() and stamp.read_text().strip() == kafka_version(), (
        f"Apache Kafka {kafka_version()}'s jars are not in {jars}: `make test` resolves them "
        f"(or run `{sys.executable} -m tests.kafka.jars`; it needs Maven and Maven Central)")
    return f"{jars}/*"


def resolve(jars: Path = JARS) -> None:
    """Copy the pom's dependencies (and theirs) into ``jars``, replacing what was there."""
    partial = jars.with_name(jars.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    started = time.monotonic()
    subprocess.run(["mvn", "-q", "-B", "-Dstyle.color=never", "-f", str(POM), "dependency:copy-dependencies",
                    f"-DoutputDirectory={partial}"], check=True, timeout=1200,
                   env={**os.environ, "MAVEN_OPTS": os.environ.get("MAVEN_OPTS", "-XX:TieredStopAtLevel=1")})
    (partial / STAMP).write_text(kafka_version() + "\n")
    shutil.rmtree(jars, ignore_errors=True)
    os.replace(partial, jars)
    print(f"{jars}: Apache Kafka {kafka_version()}, {len(list(jars.glob('*.jar')))} jars, "
          f"in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    resolve(Path(sys.argv[1]) if len(sys.argv) > 1 else JARS)
