"""docs/security.md runs as written: its shell blocks in bash (free ports in place of
9092, 9094 and 8080, a temporary directory as the repository root, ``exactly`` this
checkout's CLI), ``exactly serve`` as a real process started twice with the page's
command lines (users first, then the authorizer), the page's ``exactly users`` and
``exactly acls`` commands as subprocesses, and its confluent-kafka program over
SASL_SSL -- each printing what the page shows."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kafka_support import free_port

pytestmark = pytest.mark.timeout(150)
REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "security.md"
#: the blocks of the page, in order: (language, text)
BLOCKS = ["sh", "sh", "text", "sh", "sh", "python", "text", "sh", "text"]


def blocks() -> list[tuple[str, str]]:
    """The page's fenced blocks as (language, text), checked against :data:`BLOCKS`."""
    found = re.findall(r"```(\w+)\n(.*?)```", PAGE.read_text(), re.S)
    assert [language for language, _ in found] == BLOCKS
    return found


class Shell:
    """The page's shell, run in ``root`` (the data directory is ``root/data``) with
    ``.venv/bin/exactly`` meaning this checkout's CLI and the page's ports made free."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ports = {port: str(free_port()) for port in ("9092", "9094", "8080")}
        bin_dir = root / ".venv" / "bin"
        bin_dir.mkdir(parents=True)
        (bin_dir / "exactly").write_text(f'#!/bin/sh\nexec {sys.executable} -m exactly "$@"\n')
        (bin_dir / "exactly").chmod(0o755)
        self.env = {**os.environ, "PYTHONPATH": str(REPO)}

    def local(self, text: str) -> str:
        """``text`` with the page's ports replaced by this run's."""
        return re.sub(r"127\.0\.0\.1:(9092|9094|8080)", lambda m: f"127.0.0.1:{self.ports[m.group(1)]}", text)

    def run(self, script: str) -> str:
        """Run ``script`` in bash (``-e -o pipefail``); its stdout."""
        done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", self.local(script)], cwd=self.root,
                              env=self.env, capture_output=True, text=True, timeout=90)
        assert done.returncode == 0, (script, done.stdout, done.stderr)
        return done.stdout

    def python(self, code: str) -> str:
        done = subprocess.run([sys.executable, "-c", self.local(code)], cwd=self.root, env=self.env,
                              capture_output=True, text=True, timeout=90)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    def serve(self, script: str) -> "Served":
        """``exactly serve`` as the page starts it; its log (stderr) in ``serve.log``."""
        command = self.local(script).strip().replace("\\\n", " ")
        with open(self.root / "serve.log", "a") as log:
            return Served(subprocess.Popen(["bash", "-c", f"exec {command} --http-port {self.ports['8080']}"],
                                           cwd=self.root, env=self.env, stdout=subprocess.PIPE, stderr=log,
                                           text=True), self.root / "serve.log")


class Served:
    """A running ``exactly serve``: started when it prints its CA, stopped by SIGTERM."""

    def __init__(self, process: subprocess.Popen, log: Path) -> None:
        self.process, self.log = process, log
        self.ca = None
        for line in process.stdout:  # the pytest timeout bounds a broker that never starts
            if "ssl.ca.location=" in line:
                self.ca = Path(line.strip().rsplit("ssl.ca.location=", 1)[1])
                break
        if self.ca is None:
            self.stop()
            pytest.fail(f"exactly serve did not start: {log.read_text()[-3000:]}")

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        out, _ = self.process.communicate(timeout=60)
        assert self.process.returncode == 0 and "stopped cleanly" in out, self.log.read_text()[-3000:]


def test_the_security_page_runs_as_written(tmp_path: Path) -> None:
    shell = Shell(tmp_path)
    (_, serve), (_, users), (_, users_out), (_, serve_authorized), (_, acls), (_, program), (_, program_out), \
        (_, http), (_, http_out) = blocks()
    first = shell.serve(serve)
    try:
        assert first.ca == (shell.root / "data" / "tls" / "ca.pem").resolve() and first.ca.is_file()
        assert shell.run(users) == users_out
    finally:
        first.stop()

    second = shell.serve(serve_authorized)
    try:
        assert second.ca == first.ca  # the CA clients already trust
        granted = shell.run(acls)
        for line in ("name=orders", "name=billing", "name=invoices", "name=billing-1"):
            assert line in granted
        assert shell.python(program) == program_out
        assert shell.run(http) == http_out
    finally:
        second.stop()


def test_the_readme_sends_a_shared_broker_s_reader_to_the_page() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("\n## Sharing a broker\n"):]
    assert "(docs/security.md)" in section[:section.index("\n## ", 1)]
