"""A structured fuzzer of the Kafka listener, derived from the message schemas (shared by
``tests/test_kafka_fuzz.py`` and ``bench/fuzz_kafka.py``).

:class:`RequestWriter` writes a valid request of any API and version straight from
kio's entity classes (field order, ``kafka_type``, nullability, flexible or not), with
values from small pools that make the handlers do real work (the topic ``fuzz``, a
record batch that appends), and notes where each length, count, tagged-field section
and record batch sits. :func:`mutants` turns one such request into hostile ones: each
length or count replaced by huge, negative, null or overlong values; the frame cut
short or given trailing bytes; unknown tagged fields (legal: Kafka skips them) and
lying ones; record batches whose record counts, lengths, varints and attributes lie
under a correct CRC. :class:`ServedBroker` runs ``python -m exactly serve`` as a
separate process (its RSS read from ``/proc``); :class:`Fuzzer` sends the frames and
tells what came back. Everything is drawn from one ``random.Random(seed)``.
"""

from __future__ import annotations

import dataclasses
import random
import signal
import socket
import struct
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from kio.index import load_request_schema
from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveTupleField, classify_field, is_optional
from kio.static.constants import EntityType

from exactly.storage.record_batch import CRC_OFFSET, HEADER, HEADER_SIZE, SimpleRecord, compute_crc, encode_batch
from exactly.storage.varint import encode_uvarint, encode_varint
from tests.kafka_support import free_port, read_to_end
from tests.waiting import eventually

REPO = Path(__file__).resolve().parents[1]
#: the topic the requests name (and which produced batches append to)
TOPIC = "fuzz"
#: internal topics of 3 partitions instead of 50, as tests/conftest.py does
CONFIG = {"transaction.state.log.num.partitions": "3", "offsets.topic.num.partitions": "3"}

#: values per ``kafka_type``: valid and ordinary, so that the handlers get past their checks
_POOLS: dict[str, tuple] = {
    "bool": (0, 1), "int8": (0, 1, -1), "int16": (0, 1, -1), "uint16": (0, 1), "error_code": (0,),
    "int32": (0, 1, -1, 2), "int64": (0, 1, -1, 1000), "timedelta_i32": (0, 10, 100),
    "timedelta_i64": (0, 10, 100), "datetime_i64": (0, -1), "float64": (0.0,),
    "string": (TOPIC, TOPIC, "fuzz-group", "raw-test", "1.0", ""),
}
_FORMATS = {"bool": ">b", "int8": ">b", "int16": ">h", "uint16": ">H", "error_code": ">h", "int32": ">i",
            "timedelta_i32": ">i", "int64": ">q", "timedelta_i64": ">q", "datetime_i64": ">q", "float64": ">d"}
#: an unsigned varint longer than Kafka's 5 bytes
OVERLONG = b"\x80\x80\x80\x80\x80\x01"
#: hostile values of a length or count, per encoding
HOSTILE = {
    "uvarint": (2**32 - 2, 2**32 - 1, 2**31, 2**28, 2**21 + 1, 0),
    "int16": (32767, -2, -32768, 1000),
    "int32": (2**31 - 1, -2, -(2**31), 2**28, 1_000_000),
}


@dataclass(frozen=True)
class Site:
    """Where a length or count sits in a frame: its encoding (``uvarint`` holds n+1,
    0 meaning null), the bytes it covers, and what the field is."""

    kind: str          # "length", "count", "tags" (a tagged-field section), "records"
    offset: int        # of the prefix
    encoding: str      # "uvarint", "int16", "int32"
    start: int         # first byte after the prefix
    end: int           # end of what it covers (for a count: of the last element)
    path: str


@dataclass
class Request:
    api_key: int
    version: int
    frame: bytes       # with its size prefix
    sites: list[Site]
    #: a Produce with acks=0: no response is due
    silent: bool = False


class RequestWriter:
    """Valid requests of any API and version, written from kio's entity classes."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.batch = encode_batch([SimpleRecord(b"fuzz-value", key=b"fuzz-key")])

    def request(self, api_key: int, version: int, correlation_id: int) -> Request:
        body = load_request_schema(api_key, version)
        self._out, self._sites = bytearray(b"\0\0\0\0"), []
        self._acks_zero = False
        header = body.__header_schema__
        self._out += struct.pack(">hhi", api_key, version, correlation_id)
        self._sized("client_id", "raw-fuzz", compact=False, legacy=">h")
        if header.__flexible__:
            self._tags("header")
        self._entity(body, body.__flexible__, body.__name__)
        struct.pack_into(">i", self._out, 0, len(self._out) - 4)
        return Request(api_key, version, bytes(self._out), self._sites, silent=self._acks_zero)

    def _entity(self, cls: type, flexible: bool, path: str) -> None:
        compact = flexible and cls.__type__ is not EntityType.header
        for f in dataclasses.fields(cls):
            if "tag" not in f.metadata:  # no served request has a known tagged field
                self._field(f, compact, f"{path}.{f.name}")
        if flexible:
            self._tags(path)

    def _field(self, f: dataclasses.Field, compact: bool, path: str) -> None:
        shape = classify_field(f)
        nullable = is_optional(f)
        if isinstance(shape, (EntityTupleField, PrimitiveTupleField)):
            if nullable and self.rng.random() < 0.2:
                return self._prefix("count", None, compact, ">i", path)
            count = self.rng.randint(0, 2)
            offset = len(self._out)
            self._prefix("count", count, compact, ">i", path)
            start = len(self._out)
            for _ in range(count):
                if isinstance(shape, EntityTupleField):
                    self._entity(shape.type_, compact, path)
                else:
                    self._value(f.name, f.metadata["kafka_type"], False, compact, path)
            self._note("count", offset, compact, ">i", start, path)
        elif isinstance(shape, EntityField):
            if nullable:  # a nullable struct (DescribeTopicPartitions' Cursor): an int8 marker first, -1 null
                if self.rng.random() < 0.5:
                    self._out += b"\xff"
                    return None
                self._out += b"\x01"
            self._entity(shape.type_, compact, path)
        else:
            self._value(f.name, f.metadata["kafka_type"], nullable, compact, path)

    def _value(self, name: str, kafka_type: str, nullable: bool, compact: bool, path: str) -> None:
        if kafka_type == "records":
            return self._sized(path, self.batch, compact, ">i", kind="records")
        if kafka_type in ("string", "bytes"):
            value = None if nullable and self.rng.random() < 0.2 else self.rng.choice(_POOLS["string"])
            legacy = ">h" if kafka_type == "string" else ">i"
            return self._sized(path, value, compact, legacy)
        if kafka_type == "uuid":
            self._out += bytes(16)
            return None
        value = self.rng.choice(_POOLS[kafka_type])
        if name == "acks":
            value = self.rng.choice((-1, 1, 1, 0))
            self._acks_zero = value == 0
        self._out += struct.pack(_FORMATS[kafka_type], value)
        return None

    def _sized(self, path: str, value: str | bytes | None, compact: bool, legacy: str,
               kind: str = "length") -> None:
        data = value.encode() if isinstance(value, str) else value
        offset = len(self._out)
        self._prefix(kind, None if data is None else len(data), compact, legacy, path)
        start = len(self._out)
        self._out += data or b""
        self._note(kind, offset, compact, legacy, start, path)

    def _prefix(self, kind: str, n: int | None, compact: bool, legacy: str, path: str) -> None:
        if compact:
            self._out += encode_uvarint(0 if n is None else n + 1)
        else:
            self._out += struct.pack(legacy, -1 if n is None else n)

    def _note(self, kind: str, offset: int, compact: bool, legacy: str, start: int, path: str) -> None:
        encoding = "uvarint" if compact else {">h": "int16", ">i": "int32"}[legacy]
        self._sites.append(Site(kind, offset, encoding, start, len(self._out), path))

    def _tags(self, path: str) -> None:
        self._sites.append(Site("tags", len(self._out), "uvarint", len(self._out) + 1, len(self._out) + 1, path))
        self._out += b"\x00"


def _encode_length(value: int, encoding: str) -> bytes:
    if encoding == "uvarint":
        return encode_uvarint(value)
    return struct.pack(">h" if encoding == "int16" else ">i", value)


def _resized(body: bytes) -> bytes:
    """``body`` (a frame without its size) with a size prefix that matches it."""
    return struct.pack(">i", len(body)) + body


def mutants(request: Request, rng: random.Random, per_site: int = 2) -> Iterator[tuple[str, bytes]]:
    """``(what, frame)`` for hostile versions of ``request``: every site's prefix
    replaced, the frame cut short or padded, tagged fields added, batches broken."""
    frame = request.frame
    for site in request.sites:
        prefix_end = site.start if site.kind != "tags" else site.offset + 1
        if site.kind == "tags":
            yield f"{site.path}: unknown tagged field", _splice(frame, site.offset, prefix_end,
                                                                 b"\x01" + encode_uvarint(9000) + b"\x03abc")
            yield f"{site.path}: tagged field of 2^32-2 bytes", _splice(frame, site.offset, prefix_end,
                                                                         b"\x01\x05" + encode_uvarint(2**32 - 2))
            yield f"{site.path}: 2^32-2 tagged fields", _splice(frame, site.offset, prefix_end,
                                                                  encode_uvarint(2**32 - 2))
            continue
        for value in rng.sample(HOSTILE[site.encoding], min(per_site, len(HOSTILE[site.encoding]))):
            yield (f"{site.path}: {site.kind} {value}",
                   _splice(frame, site.offset, prefix_end, _encode_length(value, site.encoding)))
        if site.encoding == "uvarint":
            yield f"{site.path}: {site.kind} in 6 bytes", _splice(frame, site.offset, prefix_end, OVERLONG)
        if site.kind == "records":
            for what, batch in broken_batches(frame[site.start:site.end], rng):
                length = len(batch) + 1 if site.encoding == "uvarint" else len(batch)
                yield f"{site.path}: {what}", _splice(frame, site.offset, site.end,
                                                      _encode_length(length, site.encoding) + batch)
    cut = rng.randrange(4 + 8, len(frame))
    yield f"cut to {cut - 4} bytes", _resized(frame[4:cut])
    yield "trailing bytes", _resized(frame[4:] + rng.randbytes(rng.randint(1, 64)))


def _splice(frame: bytes, start: int, stop: int, replacement: bytes) -> bytes:
    return _resized(frame[4:start] + replacement + frame[stop:])


def broken_batches(batch: bytes, rng: random.Random) -> Iterator[tuple[str, bytes]]:
    """Record batches that lie inside, each under a CRC that matches (so that the
    structure, not the checksum, is what the broker has to refuse)."""
    fields = dict(zip(("base_offset", "batch_length", "leader_epoch", "magic", "crc", "attributes",
                       "last_offset_delta", "base_timestamp", "max_timestamp", "producer_id",
                       "producer_epoch", "base_sequence", "record_count"), HEADER.unpack_from(batch)))
    record = batch[HEADER_SIZE:]

    def rebuilt(records: bytes = record, **changes: int) -> bytes:
        values = {**fields, **changes}
        values["batch_length"] = HEADER_SIZE - 12 + len(records)
        out = bytearray(HEADER.pack(*values.values()) + records)
        struct.pack_into(">I", out, CRC_OFFSET, compute_crc(out))
        return bytes(out)

    for count in (2**31 - 1, -1, 1 << 20, 0):
        yield f"record count {count}", rebuilt(record_count=count)
    for codec in (5, 7):
        yield f"compression {codec}", rebuilt(attributes=codec)
    yield "magic 1", rebuilt(magic=1)
    yield "control bit on a data record", rebuilt(attributes=0x20)
    body = record[1:]  # the record after its Length varint
    for length in (2**31 - 1, -5, 1 << 40):
        yield f"record length {length}", rebuilt(encode_varint(length) + body)
    # Attributes, TimestampDelta, OffsetDelta: one byte each for our record; then KeyLength
    key_at = 3
    for key_length in (2**31 - 1, -7):
        inner = body[:key_at] + encode_varint(key_length) + body[key_at + 1:]
        yield f"key length {key_length}", rebuilt(encode_varint(len(inner)) + inner)
    for headers in (2**31 - 1, -3):
        inner = body[:-1] + encode_varint(headers)
        yield f"header count {headers}", rebuilt(encode_varint(len(inner)) + inner)
    inner = body[:-1] + b"\x02" + encode_varint(2) + b"\xff\xfe" + encode_varint(-1)
    yield "header key not UTF-8", rebuilt(encode_varint(len(inner)) + inner)
    yield "random bytes", rebuilt(rng.randbytes(rng.randint(1, 40)))


# -- the broker, a process of its own -------------------------------------------------------------


class ServedBroker:
    """``python -m exactly serve`` on ``data_dir``, its output in ``data_dir``'s sibling log."""

    def __init__(self, data_dir: Path, **config: Any) -> None:
        self.data_dir = data_dir
        #: broker configs besides the tests' CONFIG
        self.config = config
        self.log_path = data_dir.with_name(data_dir.name + ".log")
        self.port = self.http_port = 0
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 60, port: int | None = None) -> None:
        """Start (or restart) the broker on ``port`` (by default a fresh one: a restart on
        the same port is what clients with a fixed bootstrap list meet); returns once it serves."""
        self.port, self.http_port = port or free_port(), free_port()
        args = [sys.executable, "-m", "exactly", "serve", "--data-dir", str(self.data_dir),
                "--kafka-port", str(self.port), "--http-port", str(self.http_port)]
        for key, value in {**CONFIG, **self.config}.items():
            args += ["--config", f"{key}={value}"]
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(args, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        eventually(lambda: "Ctrl-C to stop" in self.log() or self.proc.poll() is not None, timeout,
                   "the broker to start", interval=0.05)
        assert self.proc.poll() is None, f"the broker did not start (exit {self.proc.poll()}):\n{self.log()}"

    def errors(self) -> list[str]:
        """Lines of this run's log that say our code failed (not a client's frame)."""
        return [line for line in self.log().splitlines() if " ERROR " in line or " CRITICAL " in line
                or line.startswith("Traceback")]

    def log(self) -> str:
        """What this run of the process has printed and logged so far."""
        with open(self.log_path, "rb") as f:
            f.seek(self._log_start)
            return f.read().decode(errors="replace")

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def memory_kb(self) -> tuple[int, int]:
        """``(VmRSS, VmHWM)``: resident now and at most, in KiB."""
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        values = {line.split(":")[0]: int(line.split()[1]) for line in status.splitlines()
                  if line.startswith(("VmRSS:", "VmHWM:"))}
        return values["VmRSS"], values["VmHWM"]

    def stop(self, kill: bool, timeout: float = 60) -> int:
        """SIGKILL, or SIGTERM and a clean shutdown; returns the exit status."""
        if self.proc is None:
            return 0
        self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise


# -- sending ----------------------------------------------------------------------------------------


#: how long a request that gets no answer (Produce with acks=0) is waited on
SILENCE_S = 0.3


@dataclass
class Tally:
    """What the broker did with the frames of one (API, version)."""

    frames: int = 0
    outcomes: Counter = field(default_factory=Counter)   # answered / closed / silent


class Fuzzer:
    """Sends frames one at a time over a connection it reopens whenever the broker closes it."""

    def __init__(self, port: int, read_timeout: float = 5.0) -> None:
        self.port = port
        self.read_timeout = read_timeout
        self.sock: socket.socket | None = None
        self.tallies: dict[tuple[int, int], Tally] = {}

    def send(self, api_key: int, version: int, frame: bytes,
             timeout: float | None = None) -> tuple[str, bytes | None]:
        """``("answered", response)``, ``("closed", None)`` or ``("silent", None)`` (nothing
        within ``timeout``, by default the fuzzer's read timeout)."""
        tally = self.tallies.setdefault((api_key, version), Tally())
        tally.frames += 1
        outcome, response = self._exchange(frame, timeout or self.read_timeout)
        tally.outcomes[outcome] += 1
        if outcome != "answered":
            self.close()
        return outcome, response

    def valid(self, request: Request) -> None:
        """Send a valid request: it must be answered, with its correlation id (or, for
        acks=0, not at all: a failed one closes the connection, as Kafka's does); raises
        AssertionError otherwise."""
        outcome, response = self.send(request.api_key, request.version, request.frame,
                                      SILENCE_S if request.silent else None)
        what = f"api {request.api_key} v{request.version}: a valid request"
        if request.silent:
            assert outcome != "answered", f"{what} with acks=0 was answered"
            return
        assert outcome == "answered", f"{what} was {outcome}"
        assert response[:4] == request.frame[8:12], f"{what} was answered with another correlation id"

    def _exchange(self, frame: bytes, timeout: float) -> tuple[str, bytes | None]:
        if self.sock is None:
            try:
                self.sock = socket.create_connection(("127.0.0.1", self.port))
            except ConnectionRefusedError:
                raise AssertionError(f"the broker on port {self.port} refuses connections: is it dead?") from None
        self.sock.settimeout(timeout)
        try:
            self.sock.sendall(frame)
            size = self._read(4)
            if size is None:
                return "closed", None
            body = self._read(int.from_bytes(size, "big"))
            return ("answered", body) if body is not None else ("closed", None)
        except socket.timeout:
            return "silent", None
        except (ConnectionResetError, BrokenPipeError):
            return "closed", None

    def _read(self, n: int) -> bytes | None:
        chunks, left = [], n
        while left:
            chunk = self.sock.recv(left)
            if not chunk:
                return None
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def served() -> list[tuple[int, int]]:
    """Every (API key, version) the listener serves (its ``APIS`` registry)."""
    from exactly.app.kafka import APIS

    return [(api.key, version) for api in sorted(APIS.values(), key=lambda a: a.key)
            for version in range(api.min_version, api.max_version + 1)]


def fuzz(fuzzer: Fuzzer, writer: RequestWriter, rng: random.Random, targets: list[tuple[int, int]],
         mutants_per_request: int | None) -> None:
    """For each target: a valid request (which must be answered), then its mutants (all of
    them, or a sample of ``mutants_per_request``)."""
    for api_key, version in targets:
        request = writer.request(api_key, version, correlation_id=rng.randrange(2**31))
        fuzzer.valid(request)
        frames = list(mutants(request, rng))
        if mutants_per_request is not None:
            frames = rng.sample(frames, min(mutants_per_request, len(frames)))
        for _, frame in frames:
            fuzzer.send(api_key, version, frame, SILENCE_S if request.silent else None)


# -- a real client ----------------------------------------------------------------------------------

#: the topic the real client writes: no fuzzed request names it
REAL_TOPIC = "real-check"


def produce_real(port: int, values: list[bytes], timeout: float = 30) -> None:
    """Produce ``values`` with an idempotent confluent-kafka producer; every one acknowledged."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "enable.idempotence": True,
                         "message.timeout.ms": int(timeout * 1000)})
    failed: list = []
    for value in values:
        producer.produce(REAL_TOPIC, value, partition=0,
                         on_delivery=lambda err, _msg: err is not None and failed.append(err))
    assert producer.flush(timeout) == 0, "not every value was acknowledged"
    assert not failed, failed


def consume_real(port: int, timeout: float = 30) -> list[bytes]:
    """Every value of :data:`REAL_TOPIC`, read from the start by a fresh consumer."""
    return read_to_end({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "fuzz-real-check"},
                       REAL_TOPIC, 1, timeout)


# -- rounds ------------------------------------------------------------------------------------------


class Campaign:
    """Seeded rounds against one served broker, each checked: after the hostile frames the
    process is alive and logged no ERROR, a real client produces and reads back, and a
    stop (SIGKILL or SIGTERM) and start on the same directory loses nothing acknowledged.
    Every failure names the seed."""

    def __init__(self, broker: ServedBroker, seed: int) -> None:
        self.broker, self.seed = broker, seed
        self.rng = random.Random(seed)
        self.writer = RequestWriter(self.rng)
        self.fuzzer = Fuzzer(broker.port)
        self.acknowledged: list[bytes] = []
        self.start_peak_kb = self.peak_kb = broker.memory_kb()[1]

    def round(self, mutants_per_request: int | None, kill: bool, values: int = 20) -> None:
        broker, number = self.broker, len(self.acknowledged)
        self.fuzzer.port = broker.port
        fuzz(self.fuzzer, self.writer, self.rng, served(), mutants_per_request)
        self.fuzzer.close()
        self._check(broker.alive, f"the broker died:\n{broker.log()[-3000:]}")
        self._check(not broker.errors(), f"the broker logged errors: {broker.errors()}")
        self.peak_kb = max(self.peak_kb, broker.memory_kb()[1])
        batch = [f"value {number + i}".encode() for i in range(values)]
        produce_real(broker.port, batch)
        self.acknowledged += batch
        self._check(consume_real(broker.port) == self.acknowledged, "a real client lost values")
        broker.stop(kill)
        broker.start()
        self._check(consume_real(broker.port) == self.acknowledged,
                    f"acknowledged values lost across a {'SIGKILL' if kill else 'clean stop'} and restart")
        self._check(not broker.errors(), f"the restarted broker logged errors: {broker.errors()}")

    @property
    def frames(self) -> int:
        return sum(t.frames for t in self.fuzzer.tallies.values())

    def _check(self, ok: bool, what: str) -> None:
        if not ok:
            raise AssertionError(f"seed {self.seed}: {what}")
