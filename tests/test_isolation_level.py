"""IsolationLevel: Kafka's wire values and names, parsed in one place for every face."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exactly.storage.errors import InvalidRequestError
from exactly.storage.isolation_level import LABELS, IsolationLevel

pytestmark = pytest.mark.timeout(60)


def test_kafkas_wire_values_and_names():
    assert [(level.value, level.label) for level in IsolationLevel] == [
        (0, "read_uncommitted"), (1, "read_committed")]
    assert LABELS == ("read_uncommitted", "read_committed")


@given(st.sampled_from(list(IsolationLevel)))
def test_a_level_parses_from_its_value_its_name_and_itself(level):
    assert IsolationLevel.parse(level.value) is IsolationLevel.parse(level.label) is IsolationLevel.parse(level) \
        is level


@given(st.one_of(st.integers(), st.text()).filter(lambda v: v not in (0, 1, *LABELS)))
def test_anything_else_is_invalid_request(value):
    with pytest.raises(InvalidRequestError) as raised:
        IsolationLevel.parse(value)
    assert raised.value.code == 42
