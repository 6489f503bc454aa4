"""The README's "Users, listeners and TLS" runs as written (free ports in place of 9092
and 9094, a temporary data directory): ``exactly serve --generate-certificate`` with a
SASL_SSL listener prints its CA, ``exactly users`` adds and lists a user, and
confluent-kafka with the README's settings produces and consumes over SASL_SSL."""

from __future__ import annotations

import ast
import contextlib
import io
import re
import shlex
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer

from app.cli import main
from tests.kafka_support import free_port, read_to_end

pytestmark = pytest.mark.timeout(120)
REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"


def section() -> list[str]:
    """The fenced blocks of the README's "Users, listeners and TLS"."""
    text = README.read_text()
    start = text.index("### Users, listeners and TLS")
    body = text[start:text.index("\n## ", start)]
    return re.findall(r"```(?:python)?\n(.*?)```", body, re.S)


def run_in_process(command: str) -> subprocess.CompletedProcess:
    """``[echo 'text' |] exactly ARGS`` as ``app.cli.main(ARGS)`` in this process, the
    echoed text on its stdin (a Python start per command costs seconds)."""
    stdin = ""
    if "|" in command:
        echo, command = command.split("|", 1)
        stdin = shlex.split(echo)[1] + "\n"
    argv = shlex.split(command)
    assert argv[0] == "exactly"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "stdin", io.StringIO(stdin))
        code = main(argv[1:])
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def test_the_users_listeners_and_tls_section_runs_as_written(tmp_path: Path) -> None:
    serve_block, users_block, client_block = section()
    ports = {"9092": str(free_port()), "9094": str(free_port())}

    def local(text: str) -> str:
        return re.sub(r"127\.0\.0\.1:(9092|9094)", lambda m: f"127.0.0.1:{ports[m.group(1)]}", text)

    exactly = f"{sys.executable} -m app.cli"
    serve = local(serve_block.replace("\\\n", " ")).replace("exactly", exactly, 1).split()
    server = subprocess.Popen([*serve, "--data-dir", str(tmp_path / "data"), "--http-port", str(free_port())],
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ca = None
        for line in server.stdout:
            if "ssl.ca.location=" in line:
                ca = line.strip().rsplit("ssl.ca.location=", 1)[1]
                break
        assert ca is not None and Path(ca).is_file(), server.stderr.read() if server.poll() is not None else ca
        for command in users_block.strip().splitlines()[:2]:  # add, list (remove would undo the add)
            done = run_in_process(local(command))
            assert done.returncode == 0, done.stderr
        assert "user-principal 'alice' are SCRAM-SHA-512=iterations=4096" in done.stdout
        config = ast.literal_eval(local(client_block).replace("data/tls/ca.pem", ca))
        topic = f"readme-{uuid.uuid4().hex[:6]}"
        producer = Producer(config)
        producer.produce(topic, b"shared")
        assert producer.flush(30) == 0
        assert read_to_end({**config, "group.id": topic}, topic, 1) == [b"shared"]
    finally:
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=60)
    assert server.returncode == 0
