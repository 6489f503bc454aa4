"""The pytest plugin of the package (its ``pytest11`` entry point, so any test in a
project with Exactly installed has it, without a conftest.py).

``exactly_broker``: a fresh broker for one test (function scope), on a directory under
the test's ``tmp_path`` and free 127.0.0.1 ports, closed after the test whatever it
did. It is an :class:`exactly.app.server.Server`: ``.bootstrap``, ``.http_url``, ``.broker``,
``.engine``, ``.restart(clean=...)``, ``.fence(id)``, ``.timeout(id)``,
``.faults``, ``.audit(group, input, output)``.
``exactly_broker_config``: the Kafka configs it starts with (override the fixture in a
module or conftest.py to change them)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import pytest

if TYPE_CHECKING:
    from exactly.app.server import Server


@pytest.fixture
def exactly_broker_config() -> dict[str, Any]:
    """Kafka configs for ``exactly_broker`` (beside ``exactly.app.testing.TEST_CONFIG``)."""
    return {}


@pytest.fixture
def exactly_broker(tmp_path: Path, exactly_broker_config: dict[str, Any]) -> Iterator["Server"]:
    """A broker of this test's own: see the module docstring."""
    from exactly.app.testing import broker

    with broker(tmp_path / "exactly-data", **exactly_broker_config) as server:
        yield server
