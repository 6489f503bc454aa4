"""Apache Kafka itself, beside Exactly: one KRaft node (``process.roles=broker,controller``)
from the jars ``tests/kafka/jars.py`` resolves, formatted into a directory of its own and
served on free 127.0.0.1 ports; Kafka's Java tools (:func:`run_tool`) and the tests' own
Java programs (:class:`JavaPrograms`) run against any broker.

::

    with RealKafka(tmp_path / "kafka") as kafka:   # formatted, started, ready for clients
        Producer({"bootstrap.servers": kafka.bootstrap, ...})
        run_tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", kafka.bootstrap, "--list")

The JVM runs under ``setpriv --pdeathsig KILL``: if the test process dies without its
finalizers, the kernel kills the broker too, so no Kafka outlives the run that started
it. Its log (Kafka's INFO lines, ``tests/kafka/log4j2.properties``) is ``log_path``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import IO, Any, Mapping

import pytest

from exactly.storage import topic_id
from tests.kafka.jars import classpath
from tests.kafka_support import free_port

LOG4J = Path(__file__).with_name("log4j2.properties")
#: a short-lived test broker on a 2-core machine shared with other tests: a small heap,
#: the client compiler only and the serial collector (it starts in ~2.5 s instead of ~4,
#: and leaves the other core to the tests)
TEST_JVM = ("-Xms256m", "-Xmx1g", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
#: Kafka's own launch options (kafka-server-start.sh, kafka-run-class.sh): what a
#: benchmark of Kafka should run
KAFKA_JVM = ("-Xms1g", "-Xmx1g", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
             "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent")
#: the tools' JVMs live seconds
TOOL_JVM = ("-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
#: what the log says once the broker serves clients
STARTED = "Kafka Server started"

#: a single node's settings (Kafka's quickstart's, internal topics of one partition as
#: exactly.app.testing.TEST_CONFIG has them, and no initial rebalance delay so that a
#: group forms as soon as its members have joined)
SINGLE_NODE = {
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
}


#: what Kafka's transaction coordinator logs when it completes a transaction without the
#: markers of partitions that have no leader ("likely deleted", KAFKA-5202). A single
#: node restarted after a SIGKILL has that window: its controller fences the dead
#: incarnation's registration (broker.session.timeout.ms after its start) before the new
#: one is unfenced, and a transaction that was PrepareCommit at the kill completes then
#: with its markers skipped -- its offsets stay pending in __consumer_offsets and its
#: output partitions' LSO stays put for ever (every read_committed member waits on
#: UNSTABLE_OFFSET_COMMIT). Seen once in six runs on a loaded machine.
MARKERS_SKIPPED = "these partitions are likely deleted already and hence can be skipped"


class RealKafka:
    """A Kafka broker and controller in one JVM, on ``directory`` (made if missing),
    formatted with Kafka's default feature levels (``transaction.version`` 2,
    ``group.version`` 1: clients at Kafka 3's request versions get Kafka 3's behaviour).
    ``config``: Kafka's server properties over :data:`SINGLE_NODE`; ``jvm``: the JVM's options."""

    def __init__(self, directory: Path, config: Mapping[str, Any] | None = None,
                 jvm: tuple[str, ...] = TEST_JVM) -> None:
        self.directory = Path(directory)
        self.port, self.controller_port = free_port(), free_port()
        self.config = {**SINGLE_NODE, **{k: str(v) for k, v in (config or {}).items()}}
        self.jvm = jvm
        self.log_path = self.directory / "kafka.log"
        self.proc: subprocess.Popen | None = None
        self._log_start = 0
        #: it has served once: the directory is formatted and the ports are its own
        self._served = False

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    # -- life ---------------------------------------------------------------------------

    def start(self, timeout: float = 90) -> "RealKafka":
        """Format the directory (the first time), start the JVM and return once it serves;
        a start that fails or takes longer than ``timeout`` raises with the log's end. A
        port taken between choosing it and the JVM binding it (another process's) means
        new ports and a new start, twice at most. Started again after :meth:`stop` or
        :meth:`kill`, it serves the same data on the same ports."""
        for _ in range(3):
            if self._start(timeout):
                self._served = True
                return self
            if self._served:
                raise RuntimeError(f"Kafka's ports {self.port}, {self.controller_port} were taken while it was "
                                   f"down (log {self.log_path})")
            self.port, self.controller_port = free_port(), free_port()
        raise RuntimeError(f"Kafka found its ports taken three times (log {self.log_path})")

    def _start(self, timeout: float) -> bool:
        """One start on the chosen ports: True once serving, False when a port was taken."""
        if not self._served:
            self._format()
        properties = self.directory / "server.properties"
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                ["setpriv", "--pdeathsig", "KILL", "java", *self.jvm, f"-Dlog4j2.configurationFile={LOG4J}",
                 "-cp", classpath(), "kafka.Kafka", str(properties)],
                stdout=log, stderr=subprocess.STDOUT, env=java_env(), start_new_session=True)
        deadline = time.monotonic() + timeout
        while STARTED not in (run := self.log()[self._log_start:]):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                if "Address already in use" in run:
                    return False
                errors = [line for line in run.splitlines() if " ERROR " in line or "Exception" in line]
                raise RuntimeError(f"Kafka did not start within {timeout} s (exit {self.proc.returncode}; log "
                                   f"{self.log_path}): {errors[:5]}\n{run[-3000:]}")
            time.sleep(0.05)
        return True

    def _format(self) -> None:
        """A new cluster on the chosen ports in ``directory/logs`` (whatever an earlier
        run left there goes)."""
        shutil.rmtree(self.directory / "logs", ignore_errors=True)
        self.directory.mkdir(parents=True, exist_ok=True)
        properties = self.directory / "server.properties"
        properties.write_text("".join(f"{key}={value}\n" for key, value in self._properties().items()))
        formatted = _run_java(["kafka.tools.StorageTool", "format", "--standalone", "-c", str(properties),
                                # Kafka's random-uuid: never one starting with "-" (the tool would read an option)
                                "-t", topic_id.to_string(topic_id.new_topic_id())], TOOL_JVM, timeout=60)
        if formatted.returncode != 0:
            raise RuntimeError(f"kafka-storage format failed:\n{formatted.stdout}{formatted.stderr}")

    def kill(self) -> None:
        """SIGKILL the JVM -- no controlled shutdown, nothing flushed -- and wait for it
        to be gone; :meth:`start` then recovers the same data, as after a crash."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.kill()
        self.proc.wait(30)

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM (Kafka's controlled shutdown), SIGKILL after ``timeout``."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def __enter__(self) -> "RealKafka":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log(self) -> str:
        """Everything the broker has logged so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def xfail_if_markers_skipped(self) -> None:
        """A run through SIGKILLs is Kafka's :data:`MARKERS_SKIPPED` defect, not a finding,
        if Kafka logged it: the test is marked xfail, naming the line."""
        skipped = [line for line in self.log().splitlines() if MARKERS_SKIPPED in line]
        if skipped:
            pytest.xfail(f"Kafka completed a transaction without its markers after a restart: {skipped[0]}")

    def _properties(self) -> dict[str, str]:
        return {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.directory / "logs"),
            **self.config,
        }



def run_tool(main_class: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """One of Kafka's Java tools (``org.apache.kafka.tools.TopicCommand``, ...) with ``args``."""
    return _run_java([main_class, *args], TOOL_JVM, timeout)


class JavaPrograms:
    """The tests' own Java programs (``tests/kafka/*.java``), compiled once into
    ``directory`` against Kafka's jars; :meth:`run` runs one of them."""

    SOURCES = sorted(Path(__file__).parent.glob("*.java"))

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        compiled = subprocess.run(["javac", "-nowarn", "-d", str(directory), "-cp", classpath(),
                                   *map(str, self.SOURCES)], capture_output=True, text=True, timeout=180)
        if compiled.returncode != 0:
            raise RuntimeError(f"javac failed:\n{compiled.stdout}{compiled.stderr}")

    def run(self, main_class: str, *args: str, timeout: float = 90) -> subprocess.CompletedProcess:
        return _run_java([main_class, *args], TOOL_JVM, timeout, self.class_path)

    def start(self, main_class: str, *args: str, stderr: IO[bytes], stdout: IO[bytes] | int = subprocess.PIPE
              ) -> subprocess.Popen:
        """One of them left running (the caller kills it), its standard input a binary
        pipe, its standard output one too (or ``stdout``), its standard error into ``stderr``."""
        return subprocess.Popen(java_command([main_class, *args], TOOL_JVM, self.class_path),
                                stdin=subprocess.PIPE, stdout=stdout, stderr=stderr, env=java_env())

    @property
    def class_path(self) -> str:
        return f"{self.directory}:{classpath()}"


def _run_java(args: list[str], jvm: tuple[str, ...], timeout: float,
              class_path: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(java_command(args, jvm, class_path), capture_output=True, text=True, timeout=timeout,
                          env=java_env())


def java_command(args: list[str], jvm: tuple[str, ...] = TOOL_JVM, class_path: str | None = None) -> list[str]:
    """The command line of a tool's JVM (killed with the test process, its log at WARN
    on stderr): for a tool that runs beside the test (``subprocess.Popen`` with
    :func:`java_env`) rather than to its end (:func:`run_tool`)."""
    return ["setpriv", "--pdeathsig", "KILL", "java", *jvm, f"-Dlog4j2.configurationFile={LOG4J}",
            "-Dkafka.log.level=WARN", "-Dkafka.log.target=SYSTEM_ERR", "-cp", class_path or classpath(), *args]


def java_env() -> dict[str, str]:
    """The environment without JAVA_TOOL_OPTIONS (the Spark tests' class archive and
    options are not Kafka's, and the JVM would announce them on stderr)."""
    return {k: v for k, v in os.environ.items() if k != "JAVA_TOOL_OPTIONS"}

