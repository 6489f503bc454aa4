"""The mapping-to-kio layer (``exactly/app/kafka/codec.py``): every served API at every served
version can be built from a partial mapping, encoded and decoded back unchanged, and a
frame's header and body come out as they went in."""

from __future__ import annotations

import datetime
import io
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from exactly.app.kafka import APIS
from exactly.app.kafka.api import ApiKey
from exactly.app.kafka.codec import MalformedRequestError, build, decode_request, encode_response, read_head
from exactly.app.kafka.wire import encode_request

SERVED = [(api.key, version) for api in APIS.values() for version in range(api.min_version, api.max_version + 1)]


def roundtrip(cls: type, entity: object) -> object:
    out = io.BytesIO()
    entity_writer(cls)(out, entity)
    decoded, used = entity_reader(cls)(memoryview(out.getvalue()), 0)
    assert used == len(out.getvalue())
    return decoded


@pytest.mark.parametrize("api_key, version", SERVED)
def test_every_served_message_builds_from_defaults_and_round_trips(api_key: int, version: int) -> None:
    for cls in (load_request_schema(api_key, version), load_response_schema(api_key, version)):
        entity = build(cls, {})
        assert roundtrip(cls, entity) == entity


def test_fields_a_version_lacks_are_left_out_and_milliseconds_become_kio_types() -> None:
    v0 = build(load_response_schema(ApiKey.JOIN_GROUP, 0), {"throttle_time": 5, "error_code": 25, "member_id": "m"})
    assert not hasattr(v0, "throttle_time") and v0.error_code == 25 and v0.member_id == "m"
    v5 = build(load_response_schema(ApiKey.JOIN_GROUP, 5), {"throttle_time": 5, "error_code": 25})
    assert v5.throttle_time == datetime.timedelta(milliseconds=5)
    nested = build(load_response_schema(ApiKey.METADATA, 8), {"topics": [{"name": "t", "partitions": [
        {"partition_index": 2, "replica_nodes": [1]}]}]})
    assert nested.topics[0].partitions[0].replica_nodes == (1,) and nested.topics[0].partitions[0].leader_epoch == -1


@given(st.sampled_from(SERVED), st.integers(-(2**31), 2**31 - 1), st.one_of(st.none(), st.text(max_size=30)))
def test_a_request_frame_decodes_to_its_header_and_body(served: tuple[int, int], correlation_id: int,
                                                         client_id: str | None) -> None:
    api_key, version = served
    frame = encode_request(api_key, version, correlation_id, client_id, {})[4:]
    head = read_head(frame)
    assert (head.api_key, head.api_version, head.correlation_id) == (api_key, version, correlation_id)
    decoded_client_id, body = decode_request(frame, head)
    assert decoded_client_id == client_id and body == build(load_request_schema(api_key, version), {})


@given(st.binary(max_size=64))
def test_a_truncated_request_is_malformed_never_another_error(tail: bytes) -> None:
    frame = encode_request(ApiKey.METADATA, 8, 0, "c", {"topics": [{"name": "some-topic"}]})[4:]
    cut = frame[:len(frame) - 1 - len(tail) % len(frame)]
    with pytest.raises(MalformedRequestError):  # every cut loses a field: never decoded, never another error
        decode_request(cut, read_head(cut))


def test_a_response_frame_carries_its_size_and_correlation_id() -> None:
    frame = encode_response(ApiKey.API_VERSIONS, 3, 77, {"api_keys": []})
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert int.from_bytes(frame[4:8], "big") == 77  # ApiVersions: header v0 even when flexible


def test_the_codec_loads_without_hypothesis_strategies_for_kio_s_types() -> None:
    """Where hypothesis is installed, kio registers a strategy for every protocol type as
    it defines it: 0.6 s of a broker process's start, for strategies Exactly never uses
    (exactly/app/__init__.py imports kio as if hypothesis were absent)."""
    probe = "import sys, exactly.app.kafka.wire; print('hypothesis' in sys.modules)"
    ran = subprocess.run([sys.executable, "-c", probe], cwd=Path(__file__).resolve().parents[1],
                         capture_output=True, text=True, timeout=60)
    assert (ran.returncode, ran.stdout.strip()) == (0, "False"), ran.stderr
