"""The docs' shell examples run as written -- in one shell where nothing is activated, in
order, on a broker that already ran the README's example (its producer ids and names are
taken) -- and print what the pages show: docs/http-api.md's curl calls, docs/testing.md's
``exactly faults`` and ``exactly audit``; and docs/operations.md's ``exactly db``
commands on the directory such a broker left. How a page's steps and outputs are read:
tests/docs.py."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import pytest

from exactly.app import testing
from exactly.app.server import Server
from tests.docs import REPO, page, run_readme_example, run_shell_steps, section, shell_steps, wrong_outputs

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def in_use(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A served broker on which the README's confluent-kafka example has run, as a
    reader runs it first; the pages' examples then run on it in turn."""
    with testing.broker(tmp_path_factory.mktemp("docs") / "data") as server:
        run_readme_example(server.bootstrap)
        yield server


def test_the_http_api_examples_print_what_the_page_shows(in_use: Server) -> None:
    found = shell_steps(page("docs/http-api.md"))
    assert sum(1 for _, shown in found if shown) >= 14, "the page's examples were not found"
    outputs = run_shell_steps(found, {}, {"http://127.0.0.1:8080": in_use.http_url})
    assert not (wrong := wrong_outputs(found, outputs)), "\n\n".join(wrong)


def test_the_faults_and_audit_commands_print_what_the_page_shows(in_use: Server) -> None:
    """The commands take the broker from EXACTLY_HTTP, as a reader's shell may set it; the
    audit's chain lines depend on how the README's loop happened to batch its input, so
    each is checked for its shape, the rest as shown."""
    found = [(commands, shown) for commands, shown in shell_steps(page("docs/testing.md"))
             if commands.startswith((".venv/bin/exactly faults", ".venv/bin/exactly audit", "echo"))]
    assert len(found) >= 6, "the page's examples were not found"
    outputs = run_shell_steps(found, {"EXACTLY_HTTP": in_use.http_url}, {})
    chain = re.compile(r"^  \[\d+, \d+\) COMMIT billing-1 \(producer \d+ epoch 0\): input .+ -> \d+ output "
                       r"records in \d+ batch\(es\)$", re.M)
    for printed in outputs:
        assert "  [" not in printed or chain.search(printed), printed
    as_chain = [(commands, chain.sub("  [chain]", shown)) for commands, shown in found]
    assert not (wrong := wrong_outputs(as_chain, [chain.sub("  [chain]", out) for out in outputs])), \
        "\n\n".join(wrong)


def test_the_mirror_commands_run_as_written(tmp_path: Path) -> None:
    """docs/operations.md's `exactly db` commands, on a data directory a broker used and left."""
    with testing.broker(tmp_path / "data") as server:
        server.broker.create_topic("carts", 1)
    found = shell_steps(section("docs/operations.md", "The SQLite mirror"))
    assert len(found) == 2 and all(commands.startswith(".venv/bin/exactly db") for commands, _ in found)
    outputs = run_shell_steps(found, {}, {".venv/bin/": f"{REPO}/.venv/bin/"}, cwd=tmp_path)
    assert not (wrong := wrong_outputs(found, outputs)), "\n\n".join(wrong)
