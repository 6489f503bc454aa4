"""The console's topic pages: a topic (partitions, effective configs, size, producers),
creating and deleting topics, the record browser and a record's detail, and
producing a test record.

* ``/topics/<t>`` -- partitions (log start, LSO, high watermark, size, the one
  leader), producers (DescribeProducers) live; effective configs (DescribeConfigs:
  value, default or set on the topic); a form to produce a record; Delete.
* ``/new-topic`` -- create a topic (name, partitions, configs as ``key=value`` lines).
* ``/topics/<t>/partitions/<p>/records`` -- the record browser: pages forward and
  back, a jump to an offset or a time (ListOffsets by time), a key/value text
  filter, one format for every record or auto (``exactly/app/http/console/record_view.py``), and a
  live tail while the page shows the end of the partition: the row after the last
  one polls ``.../records/tail?after=<offset>`` every 2 s and is replaced by the
  newer records and a poller after them, so nothing already shown is redrawn.
* ``/topics/<t>/partitions/<p>/records/<offset>`` -- one record whole, its batch, and
  whether a read_committed consumer will ever see it.

Produce goes through the embedded producer (``exactly/app/client/``) as any client's records
do: idempotent, or inside a transaction of the given transactional id that the form
commits or aborts -- which, as Kafka's InitProducerId does, fences the producer that
used that id before. Kafka errors come back as a flash with their name and code.
The pages join the ``ui`` blueprint (``exactly/app/http/console/blueprint.py``): the error pages
of ``exactly/app/http/console/views.py``, the CSRF checks and ``render`` apply.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlencode

from flask import render_template, request, url_for

from exactly.app.client.producer import Producer
from exactly.app.engine import READ_COMMITTED, READ_UNCOMMITTED, read_models, record_browser
from exactly.app.http import access, current_engine
from exactly.app.http.access import TOPIC, TXN, kafka
from exactly.app.http.console.record_view import FORMATS, show
from exactly.app.http.console.blueprint import FRAGMENTS, ON_TOPIC, back, call, done, page, render, view
from exactly.app.kafka.wire import ApiKey
from exactly.storage import errors as e

#: how long a console produce may take, end to end (the engine answers in milliseconds)
PRODUCE_TIMEOUT_MS = 15_000
#: the page sizes the browser offers (any up to record_browser.MAX_LIMIT is taken)
PAGE_SIZES = (20, 50, 100)
#: view settings left out of the browser's links when they have these values
VIEW_DEFAULTS = {"format": "auto", "limit": PAGE_SIZES[0], "isolation": READ_UNCOMMITTED}


def kafka_message(error: e.KafkaError) -> str:
    """A Kafka error as the console says it: ``TOPIC_ALREADY_EXISTS (36): ...``."""
    return f"{error.name} ({error.code}): {error}"


# -- the topics -----------------------------------------------------------------------------

#: the Topics page's sort keys: ``?sort=`` value -> the row's field
TOPIC_SORTS = {"name": "topic_name", "partitions": "partitions_count", "messages": "messages", "size": "size_bytes"}


@page("/topics", access.TOPICS_NAMED)
def topics():
    """Every topic the principal may Describe, as Metadata lists them (internal ones on
    ``?internal=1``), filtered by a name substring (``?q=``) and sorted
    (``?sort=name|partitions|messages|size``, ``?order=desc``)."""
    q = request.args.get("q", "").strip()[:200]
    sort = request.args.get("sort", "name")
    sort = sort if sort in TOPIC_SORTS else "name"
    descending = request.args.get("order") == "desc"
    internal = request.args.get("internal") == "1"
    everything = call(read_models.topics_summary)
    described = access.visible(TOPIC, (t["topic_name"] for t in everything))
    everything = [t for t in everything if t["topic_name"] in described]
    shown = [t for t in everything if (internal or not t["is_internal"]) and q.lower() in t["topic_name"].lower()]
    shown.sort(key=lambda t: t[TOPIC_SORTS[sort]], reverse=descending)
    return render("topics", topics=shown, total=sum(1 for t in everything if internal or not t["is_internal"]),
                   q=q, sort=sort, descending=descending, internal=internal,
                   sort_url=lambda key: url_for("ui.topics", **{k: v for k, v in {
                       "q": q, "sort": key, "internal": "1" if internal else "",
                       "order": "desc" if key == sort and not descending else ""}.items() if v}))


# -- the topic ------------------------------------------------------------------------------


@page("/topics/<topic>", kafka(ApiKey.METADATA, ON_TOPIC))
def topic(topic: str):
    detail = call(read_models.topic, topic)
    return render("topic", t=detail, producers=call(read_models.topic_producers, topic),
                   configs=call(read_models.topic_configs, topic),
                   size_bytes=sum(p["size_bytes"] for p in detail["partitions"]))


@view("/new-topic", kafka(ApiKey.CREATE_TOPICS, access.body(TOPIC), or_cluster=True), methods=("GET", "POST"))
def create_topic():
    """The form; posted, the topic is created or the form comes back with the Kafka error."""
    engine = current_engine()
    form = request.form if request.method == "POST" else {}
    error = None
    if request.method == "POST":
        name = form.get("name", "").strip()
        access.require(TOPIC, (name,))
        try:
            engine.call(engine.topics.create_topic, name, _partitions(form.get("partitions", "")),
                        dict(_lines(form.get("configs", ""), "=")))
        except e.KafkaError as failure:
            error = kafka_message(failure)
        else:
            return done(f"Created topic {name}.", "success", url_for("ui.topic", topic=name))
    return render_template("new_topic.html", form=form, error=error, page_path=request.path,
                           default_partitions=engine.config.num_partitions), 400 if error else 200


def _partitions(raw: str) -> int | None:
    """The partitions field: empty is the broker's num.partitions."""
    raw = raw.strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        raise e.InvalidPartitionsError(f"the number of partitions must be a whole number, got {raw!r:.40}") from None


def _lines(text: str, separator: str) -> list[tuple[str, str]]:
    """``name<separator>value`` lines (blank lines ignored), in order: a header may repeat."""
    pairs = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        name, found, value = line.partition(separator)
        if not found or not name.strip():
            raise e.InvalidRequestError(f"line {number} ({line.strip()!r:.60}) is not name{separator}value")
        pairs.append((name.strip(), value.strip()))
    return pairs


@view("/topics/<topic>/delete", kafka(ApiKey.DELETE_TOPICS, ON_TOPIC), methods=("POST",))
def delete_topic(topic: str):
    engine = current_engine()
    try:
        engine.call(engine.topics.delete_topic, topic)
    except e.KafkaError as error:
        return done(f"Could not delete {topic}: {kafka_message(error)}", "error", url_for("ui.topic", topic=topic))
    return done(f"Deleted topic {topic}: its partitions, files and consumer groups' offsets on it are gone.",
                 "success", url_for("ui.overview"))


# -- produce --------------------------------------------------------------------------------


@view("/topics/<topic>/produce", kafka(ApiKey.PRODUCE, ON_TOPIC, access.body(TXN)), methods=("POST",))
def produce_record(topic: str):
    form = request.form
    target = back(url_for("ui.topic", topic=topic))
    txn_id = form.get("transactional_id", "").strip() or None
    if txn_id is not None:  # a transactional producer fences the id's other instances: Write on it, as on Kafka
        access.require(TXN, (txn_id,))
    commit = form.get("outcome", "commit") != "abort"
    partition = form.get("partition", "").strip()
    if partition and not partition.isdigit():
        return done(f"Could not produce to {topic}: the partition must be a number", "error", target)
    try:
        headers = [(name, value.encode()) for name, value in _lines(form.get("headers", ""), ":")]
        metadata = _produce(topic, int(partition) if partition else None, _data(form, "key"), _data(form, "value"),
                            headers, txn_id, commit)
    except (e.KafkaError, TimeoutError) as error:
        message = kafka_message(error) if isinstance(error, e.KafkaError) else f"timed out: {error}"
        return done(f"Could not produce to {topic}: {message}", "error", target)
    how = ("" if txn_id is None else
           f" in a transaction of {txn_id}, {'committed' if commit else 'aborted'}")
    return done(f"Produced to {topic}-{metadata.partition} at offset {metadata.offset}{how}.", "success",
                 url_for("ui.record_detail", topic=topic, partition=metadata.partition, offset=metadata.offset))


def _data(form: Any, name: str) -> bytes | None:
    """A key or value field: empty is null (a record without key, a tombstone value)."""
    text = form.get(name, "")
    return text.encode() if text else None


def _produce(topic: str, partition: int | None, key: bytes | None, value: bytes | None,
             headers: list[tuple[str, bytes]], txn_id: str | None, commit: bool):
    """One record through an embedded producer; inside a transaction of ``txn_id``
    when given, committed or aborted. Returns the record's ``RecordMetadata``."""
    producer = Producer(current_engine(), transactional_id=txn_id, linger_ms=0,
                        max_block_ms=PRODUCE_TIMEOUT_MS, delivery_timeout_ms=PRODUCE_TIMEOUT_MS)
    try:
        if txn_id is not None:
            producer.init_transactions()
            producer.begin_transaction()
        sent = producer.send(topic, value, key=key, partition=partition, headers=headers)
        producer.flush(PRODUCE_TIMEOUT_MS / 1000)
        metadata = sent.get(timeout=PRODUCE_TIMEOUT_MS / 1000)
        if txn_id is not None and commit:
            producer.commit_transaction()
        elif txn_id is not None:
            producer.abort_transaction()
        return metadata
    finally:
        producer.close(timeout=PRODUCE_TIMEOUT_MS / 1000)


# -- the record browser ------------------------------------------------------------------------


def _arg_int(name: str) -> int | None:
    """An offset-like query parameter; empty (a blank form field) is absent."""
    raw = request.args.get(name, "").strip()
    if not raw:
        return None
    if not raw.isdigit():
        raise e.InvalidRequestError(f"{name} must be a whole number ≥ 0, got {raw!r:.40}")
    return int(raw)


def parse_time(raw: str) -> int | None:
    """A time typed into the console, in epoch milliseconds: ISO 8601 (a
    datetime-local field, taken as UTC like every time on the console) or
    milliseconds since the epoch; empty is None."""
    raw = raw.strip()
    if not raw:
        return None
    if raw.isdigit():
        return int(raw)
    try:
        moment = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise e.InvalidRequestError(f"time must be an ISO 8601 time or milliseconds, got {raw!r:.40}") from None
    return round((moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).timestamp() * 1000)


def _view() -> dict[str, Any]:
    """The browser's view settings: filter text, format, page size, and whether it
    shows every record (read_uncommitted, markers too) or only what read_committed gets."""
    fmt = request.args.get("format", "auto")
    limit = _arg_int("limit") or PAGE_SIZES[0]
    isolation = request.args.get("isolation", READ_UNCOMMITTED)
    return {"q": request.args.get("q", "").strip()[:200], "format": fmt if fmt in FORMATS else "auto",
            "limit": min(limit, record_browser.MAX_LIMIT),
            "isolation": READ_COMMITTED if isolation == READ_COMMITTED else READ_UNCOMMITTED}


def _page(topic: str, partition: int, view: dict[str, Any], start: int | None, before: int | None,
          limit: int) -> dict[str, Any]:
    """A page of :func:`record_browser.page` in this view."""
    return call(record_browser.page, topic, partition, start, before, limit, view["q"],
                 view["isolation"] == READ_COMMITTED)


def _shown(rows: list[dict[str, Any]], fmt: str) -> list[dict[str, Any]]:
    """Rows with their key, value and header values as the view shows them."""
    return [{**row, "key": show(row["key"], fmt), "value": show(row["value"], fmt),
             "headers": [(name, show(value, fmt)) for name, value in row["headers"]]} for row in rows]


#: the record browser reads records: Fetch's Read on the topic
FETCH = kafka(ApiKey.FETCH, ON_TOPIC)


@view("/topics/<topic>/partitions/<int:partition>/records", FETCH)
def records_browser(topic: str, partition: int):
    view = _view()
    start, before, at_time = _arg_int("offset"), _arg_int("before"), parse_time(request.args.get("time", ""))
    engine = current_engine()
    notice = None
    if at_time is not None:
        found = engine.call(engine.partitions.list_offsets, topic, partition, at_time, view["isolation"])
        start = found.offset if found.offset >= 0 else None
        if start is None:
            notice = "No record at or after that time: the newest records are shown."
    try:
        data = _page(topic, partition, view, start, before, view["limit"])
    except e.OffsetOutOfRangeError as error:
        notice = kafka_message(error)
        data = _page(topic, partition, view, None, None, view["limit"])
    return render_template("records.html", r=data, rows=_shown(data["records"], view["format"]), view=view,
                           notice=notice, at_time=at_time, page_path=request.full_path.rstrip("?"),
                           link=lambda **changes: _browser_url(topic, partition, view, **changes), page_sizes=PAGE_SIZES,
                           tail_url=_tail_url(topic, partition, view, data["scanned_to"]))


def _browser_url(topic: str, partition: int, view: dict[str, Any], partition_id: int | None = None,
                 **changes: Any) -> str:
    """The browser's URL with the view settings kept and ``changes`` applied
    (``partition_id``: the same view of another partition)."""
    query = {"q": view["q"], "format": view["format"], "limit": view["limit"], "isolation": view["isolation"],
             **changes}
    query = {k: v for k, v in query.items() if v not in (None, "", VIEW_DEFAULTS.get(k))}
    base = url_for("ui.records_browser", topic=topic, partition=partition if partition_id is None else partition_id)
    return f"{base}?{urlencode(query)}" if query else base


def _tail_url(topic: str, partition: int, view: dict[str, Any], after: int) -> str:
    """Where the live tail asks for the records from ``after`` on, in this view."""
    query = {"after": after, "q": view["q"], "format": view["format"], "isolation": view["isolation"]}
    return url_for("ui.record_tail", topic=topic, partition=partition) + "?" + urlencode(query)


@view(FRAGMENTS + "/topics/<topic>/partitions/<int:partition>/records/tail", FETCH)
def record_tail(topic: str, partition: int):
    """The records from ``after`` on (that match the filter), and the poller after them."""
    view = _view()
    after = _arg_int("after") or 0
    data = _page(topic, partition, view, after, None, record_browser.MAX_LIMIT)
    return render_template("fragments/record_tail.html", r=data, rows=_shown(data["records"], view["format"]),
                           fmt=view["format"], tail_url=_tail_url(topic, partition, view, data["scanned_to"]))


@view("/topics/<topic>/partitions/<int:partition>/records/<int:offset>", FETCH)
def record_detail(topic: str, partition: int, offset: int):
    fmt = request.args.get("format", "auto")
    fmt = fmt if fmt in FORMATS else "auto"
    detail = call(record_browser.record, topic, partition, offset)
    return render_template("record.html", rec=_shown([detail], fmt)[0], fmt=fmt,
                           page_path=request.full_path.rstrip("?"))
