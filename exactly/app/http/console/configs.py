"""Config values as the console shows them: the raw value Kafka reports, and beside it
what it means -- a duration for milliseconds, a size for bytes, and a name for the
sentinels Kafka uses (``9223372036854775807``: never / unlimited; ``-1`` on a
retention: unlimited; ``2147483647`` as a transaction timeout: never).

:data:`UNITS` is the one table of units, one entry per config key, derived from the
declarations (``exactly/storage/log_config.py``'s ``LogConfig``, ``exactly/app/config.py``'s
``BrokerConfig``): Kafka names a config by its unit (``*.ms``, ``*.bytes``), and
the declarations are named after Kafka's keys.
"""

from __future__ import annotations

from dataclasses import fields

from exactly.app.config import BrokerConfig
from exactly.app.http.console.blueprint import bp, duration, size
from exactly.storage.log_config import LONG_MAX, LogConfig

INT_MAX = 2**31 - 1
#: the unit of a key's value by the suffix Kafka names it with
SUFFIX_UNITS = {".ms": "ms", ".bytes": "bytes"}
#: keys where -1 means "no limit" (Kafka's retention.ms / retention.bytes and their broker defaults)
UNLIMITED_AT_MINUS_ONE = ("retention.ms", "retention.bytes")


def _keys() -> list[str]:
    """Every config key the broker declares, topic and broker ones."""
    topic = list(LogConfig().to_kafka())
    broker = [f.name.replace("_", ".") for f in fields(BrokerConfig) if f.name != "log"]
    return topic + broker + ["log." + key for key in topic]


#: config key -> unit of its value ("ms", "bytes"); keys without a unit are absent
UNITS: dict[str, str] = {key: unit for key in _keys() for suffix, unit in SUFFIX_UNITS.items()
                         if key.endswith(suffix)}


@bp.app_template_filter("config_meaning")
def config_meaning(value: str | None, key: str) -> str:
    """What a config's raw value means, or "" when the raw value says it all:
    ``604800000`` of ``retention.ms`` -> ``7 d 0 h``."""
    try:
        number = int(value or "")
    except ValueError:
        return ""
    unit = UNITS.get(key)
    if number == LONG_MAX or (number == INT_MAX and unit == "ms"):
        return "never" if unit == "ms" else "unlimited"
    if number == -1 and key.endswith(UNLIMITED_AT_MINUS_ONE):
        return "unlimited"
    if unit == "ms" and number >= 1000:
        return duration(number)
    if unit == "bytes" and number >= 1024:
        return size(number)
    return ""
