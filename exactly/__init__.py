"""Exactly: a single-node, file-backed broker with Kafka's exactly-once semantics.

One import name; inside it the design's rooms: ``exactly.storage`` (bytes on disk),
``exactly.coordinator`` (transaction and group state), ``exactly.app`` (the process
and its faces), ``exactly.web`` (the console's templates and static files) and
``exactly.migrations`` (the SQLite mirror's schema). ``from exactly import Broker``
is the embedded broker (``exactly.app.broker``), imported on first use.
"""

import contextlib
import sys
from typing import Any

__all__ = ["Broker"]


def _import_kio_without_test_strategies() -> None:
    """Import kio as if hypothesis were not installed. Where it is (a developer's
    environment, the tests'), kio registers a hypothesis strategy for every protocol type
    it defines (``kio/static/_phantom.py``): 0.6 s of the 1.7 s that a broker process
    spends importing, for strategies nothing here uses. A process that imported
    hypothesis first (a test run that uses it) keeps kio as it is."""
    if "hypothesis" in sys.modules:
        return
    sys.modules["hypothesis"] = None  # type: ignore[assignment]  # makes `import hypothesis` fail
    try:
        with contextlib.suppress(ImportError):  # another kio layout: it just costs the time
            import kio.static._phantom  # noqa: F401
    finally:
        del sys.modules["hypothesis"]


_import_kio_without_test_strategies()


def __getattr__(name: str) -> Any:
    if name == "Broker":
        from exactly.app.broker import Broker
        return Broker
    raise AttributeError(f"module 'exactly' has no attribute {name!r}")
