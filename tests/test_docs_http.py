"""docs/http-api.md's curl examples run as written, in order, in one shell where nothing
is activated, on a broker that already ran the README's example (its producer ids and
names are taken), and print what the page shows.

A page's shell block is read as steps: a run of command lines, then the ``# ...`` lines
under it, which are the output. An output line continued on the next is indented one
space (``#  ...``); ``...`` stands for what the page trimmed; three spaces end the output
and start a remark (``# [0]   <- not visible yet``). Values that differ from run to run
(the cluster id, times, producer ids) are compared by name only."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import app.testing
from tests.docs import FENCE, REPO, blocks, page, section

PAGE = "docs/http-api.md"
DOCUMENTED_URL = "http://127.0.0.1:8080"
pytestmark = pytest.mark.timeout(240)

#: fields whose values depend on the run, not on what the example does
VARYING = re.compile(r'"(cluster_id|timestamp|transaction_start_ms|producer_id)":("[^"]*"|-?\d+)')
REMARK = re.compile(r"\s{3,}\S.*$")


def steps(text: str) -> list[tuple[str, str]]:
    """(commands, expected output) of every step of the page's shell blocks, in order."""
    found: list[tuple[str, str]] = []
    for block in FENCE.finditer(text):
        opening, *body = block.group(0).splitlines()[:-1]
        if opening != "```sh":
            continue
        commands: list[str] = []
        output: list[str] = []
        for line in [*body, ""]:
            if line.startswith("#") and commands:
                output.append(line)
                continue
            if output or (not line.strip() and commands):
                found.append(("\n".join(commands), expected(output)))
                commands, output = [], []
            if line.strip():
                commands.append(line)
    return found


def expected(lines: list[str]) -> str:
    """The output the ``# `` lines show, continuation lines joined, remarks cut."""
    text = ""
    for line in lines:
        if line.startswith("#  "):
            text += REMARK.sub("", line[3:])
        else:
            text += ("\n" if text else "") + REMARK.sub("", line[2:])
    return text


def comparable(text: str) -> str:
    return VARYING.sub(r'"\1":_', text)


def matches(actual: str, shown: str) -> bool:
    """Whether ``actual`` is what the page shows, line by line, ``...`` matching anything."""
    pattern = ".*".join(re.escape(part) for part in comparable(shown).split("..."))
    return re.fullmatch(pattern, comparable(actual).strip(), re.S) is not None


def run_steps(found: list[tuple[str, str]], url: str) -> list[str]:
    """Run every step in one bash, in order; the output of each."""
    marker = f"--step-{uuid.uuid4().hex}--"
    script = "set -u\n" + "".join(f"{commands}\necho\necho {marker}\n" for commands, _ in found)
    done = subprocess.run(["bash", "-c", script.replace(DOCUMENTED_URL, url)], capture_output=True, text=True,
                          timeout=120, env={"PATH": os.defpath, "HOME": os.environ.get("HOME", "/")})
    assert done.returncode == 0, done.stderr
    return [out.strip("\n") for out in done.stdout.split(marker + "\n")[:-1]]


def readme_example(bootstrap: str) -> None:
    """The README's confluent-kafka example, as its reader runs it first."""
    (code,) = blocks(section("README.md", "What it is for"), "python")
    done = subprocess.run([sys.executable, "-c", code.replace("127.0.0.1:9092", bootstrap)],
                          capture_output=True, text=True, timeout=150, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_curl_examples_run_as_written_on_a_broker_in_use(tmp_path: Path) -> None:
    found = steps(page(PAGE))
    assert sum(1 for _, shown in found if shown) >= 14, "the page's examples were not found"
    with app.testing.broker(tmp_path / "data") as server:
        readme_example(server.bootstrap)
        outputs = run_steps(found, server.http_url)
    wrong = [f"$ {commands}\nshown:  {shown}\nprinted: {actual}"
             for (commands, shown), actual in zip(found, outputs) if shown and not matches(actual, shown)]
    assert not wrong, "\n\n".join(wrong)


def test_the_mirror_commands_run_as_written(tmp_path: Path) -> None:
    """docs/operations.md's `exactly db` commands, on a data directory a broker used and left."""
    data = tmp_path / "data"
    with app.testing.broker(data) as server:
        server.broker.create_topic("carts", 1)
    (commands,) = blocks(section("docs/operations.md", "The SQLite mirror"), "sh")
    exactly = Path(sys.executable).parent / "exactly"
    for line in commands.splitlines():
        command = line.split(" #", 1)[0].replace(".venv/bin/exactly", str(exactly)).replace("./data", str(data))
        done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"{line}\n{done.stderr}"
