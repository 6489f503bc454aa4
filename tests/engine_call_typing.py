"""What a caller of ``engine.call``, ``submit`` and ``schedule`` (the loop bridge,
``exactly/app/engine/loop_bridge.py``) gets, as mypy infers it.

Never run, only type-checked (pyproject.toml's ``[tool.mypy]`` lists this file;
tests/test_types.py runs mypy): an ``assert_type`` that no longer holds fails the type
check, and so does an error expected below (``# type: ignore[...]``) that mypy stops
reporting, since unused ignores are errors.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import assert_type

from exactly.app.engine import Engine
from exactly.storage.log_manager import TopicInfo
from exactly.storage.partition_log import AppendResult


def results_are_inferred(engine: Engine) -> None:
    topics, partitions = engine.topics, engine.partitions
    # a coroutine function: its awaited value
    assert_type(engine.call(topics.create_partitions, "t", 2), TopicInfo)
    assert_type(engine.call(topics.create_topic, "t", validate_only=True), TopicInfo | None)
    # a plain function: its value; one returning a future: that future's
    assert_type(engine.call(topics.describe_topic, "t"), TopicInfo)
    assert_type(engine.call(partitions.start_produce, "t", 0, b""), AppendResult)
    # with a timeout too
    assert_type(engine.call(topics.create_partitions, "t", 2, timeout=5), TopicInfo)
    assert_type(engine.call(topics.describe_topic, "t", timeout=None), TopicInfo)
    # the futures of submit and schedule
    assert_type(engine.submit(topics.describe_topic, "t"), Future[TopicInfo])
    assert_type(engine.submit(partitions.start_produce, "t", 0, b""), Future[AppendResult])
    assert_type(engine.schedule(topics.create_partitions, "t", 2), Future[TopicInfo])


def arguments_are_checked(engine: Engine) -> None:
    topics = engine.topics
    engine.call(topics.describe_topic, 1)  # type: ignore[call-overload]
    engine.call(topics.create_partitions, "t")  # type: ignore[call-overload]
    engine.submit(topics.describe_topic, "t", 2)  # type: ignore[arg-type, call-arg]
    engine.schedule(topics.create_partitions, "t", "2")  # type: ignore[arg-type]
