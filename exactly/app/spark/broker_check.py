"""``python -m exactly.app.spark.broker_check [HOST:PORT]``: is a Kafka broker answering there?

``make pipeline`` runs it first, so a missing broker is one line that says what to do
instead of a Spark job's stack trace. It sends one ApiVersions v0 request (the first
request every Kafka client sends) and checks the answer's correlation id and error code.
"""

from __future__ import annotations

import socket
import struct
import sys
from typing import Sequence

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
API_VERSIONS = 18
CORRELATION_ID = 0x0E0A
#: request header v1 (api key, api version, correlation id, null client id), no body
REQUEST = struct.pack(">hhih", API_VERSIONS, 0, CORRELATION_ID, -1)
#: response: size, then header v0 (correlation id) and the body's error code
RESPONSE_START = struct.Struct(">iih")


def kafka_answers(bootstrap: str, timeout: float = 5.0) -> bool:
    """True when the broker at ``host:port`` answers ApiVersions without an error."""
    host, _, port = bootstrap.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as sock:
            sock.sendall(struct.pack(">i", len(REQUEST)) + REQUEST)
            answer = b""
            while len(answer) < RESPONSE_START.size:
                chunk = sock.recv(RESPONSE_START.size - len(answer))
                if not chunk:
                    return False
                answer += chunk
    except (OSError, ValueError):
        return False
    _, correlation_id, error_code = RESPONSE_START.unpack(answer)
    return correlation_id == CORRELATION_ID and error_code == 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    bootstrap = args[0] if args else DEFAULT_BOOTSTRAP
    if kafka_answers(bootstrap):
        return 0
    print(f"no Kafka broker answers at {bootstrap}: start one with `make run` in another terminal, "
          "then run this again", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
