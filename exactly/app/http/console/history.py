"""LSO and high watermark of every partition over the last minutes, for the console's chart.

A :class:`History` keeps, per partition, a ring buffer of samples (time, high
watermark, LSO) covering ``WINDOW_S`` (10 minutes at one sample every
``SAMPLE_INTERVAL_S``). Its daemon thread reads every partition through
``engine.call(read_models.topics, ...)`` -- the engine's loop owns broker state -- and
stops on :meth:`History.stop` or by itself once the broker is closed.

``init_app(app)`` registers it as ``app.extensions["exactly.history"]``. Outside
``TESTING`` the thread starts at once; under ``TESTING`` it starts only when
``start()`` is called, so tests stay deterministic. Either way a page that reads a
partition adds what it saw (:meth:`History.observe`), so the chart always ends at
the value on the page.

:func:`chart` turns samples into the geometry of a server-rendered SVG (step lines:
an offset keeps its value until the next sample); ``exactly/web/templates/_chart.html``
draws it.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flask import Flask

from exactly.storage.errors import KafkaError, KafkaStorageError, RequestTimedOutError

if TYPE_CHECKING:
    from exactly.app.engine import Engine

log = logging.getLogger(__name__)

SAMPLE_INTERVAL_S = 2.0
WINDOW_S = 600
#: samples kept per partition: the window at the sampling rate, plus slack for page observations
MAX_SAMPLES = int(WINDOW_S / SAMPLE_INTERVAL_S) * 2
#: a sample is a few dictionary reads on the loop; a loop busier than this skips one
CALL_TIMEOUT_S = 2.0
#: the chart never spans less than this, so the first samples do not fill its whole width
MIN_SPAN_MS = 60_000


@dataclass(frozen=True, slots=True)
class Sample:
    time_ms: int
    high_watermark: int
    last_stable_offset: int


class History:
    """Ring buffers of (time, high watermark, LSO) per partition, fed by a sampler thread."""

    def __init__(self, engine: "Engine", interval_s: float = SAMPLE_INTERVAL_S,
                 window_s: float = WINDOW_S) -> None:
        self.engine = engine
        self.interval_s = interval_s
        self.window_ms = int(window_s * 1000)
        self._series: dict[tuple[str, int], deque[Sample]] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    # -- feeding --------------------------------------------------------------------------

    def sample(self) -> None:
        """Read every partition once (on the engine's loop) and record it."""
        from exactly.app.engine import read_models

        topics = self.engine.call(read_models.topics, self.engine, True, timeout=CALL_TIMEOUT_S)
        now = self.engine.clock.now_ms()
        seen = set()
        for topic in topics:
            for p in topic["partitions"]:
                key = (p["topic_name"], p["partition_id"])
                seen.add(key)
                self.observe(*key, now, p["high_watermark"], p["last_stable_offset"])
        with self._lock:
            for gone in set(self._series) - seen:  # deleted topics
                del self._series[gone]

    def observe(self, topic: str, partition: int, time_ms: int, high_watermark: int,
                last_stable_offset: int) -> None:
        """Record one reading; readings older than the window fall off."""
        with self._lock:
            series = self._series.setdefault((topic, partition), deque(maxlen=MAX_SAMPLES))
            if series and series[-1].time_ms > time_ms:
                return  # a page's reading raced a newer sample
            series.append(Sample(time_ms, high_watermark, last_stable_offset))
            while series and series[0].time_ms < time_ms - self.window_ms:
                series.popleft()

    def series(self, topic: str, partition: int) -> list[Sample]:
        with self._lock:
            return list(self._series.get((topic, partition), ()))

    # -- the sampler thread ---------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> "History":
        if self.running:
            return self
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name="exactly-ui-history", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self.sample()
            except (KafkaStorageError, RuntimeError):
                return  # the broker is closed (or its loop is): nothing more to sample
            except RequestTimedOutError:
                pass  # a busy or stopping loop: try again next round
            except KafkaError as error:  # expected (a topic deleted meanwhile ...): one line
                log.warning("sampling LSO and high watermark failed: %s: %s", error.name, error)
            except Exception:  # the chart must never take the console down
                log.exception("sampling LSO and high watermark failed")
            self._stopping.wait(self.interval_s)

    def stop(self) -> None:
        """Stop the thread after its current sample; idempotent."""
        self._stopping.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)


def init_app(app: Flask) -> History:
    """Attach a :class:`History` of the app's engine; start sampling unless TESTING."""
    history = History(app.extensions["exactly.engine"])
    app.extensions["exactly.history"] = history
    if not app.testing:
        history.start()
    return history


# -- the chart ------------------------------------------------------------------------------


def _ticks(low: int, high: int, count: int = 4) -> list[int]:
    if high <= low:
        return [low]
    step = max(1, round((high - low) / (count - 1)))
    ticks = list(range(low, high, step))
    if high - ticks[-1] < step / 2 and len(ticks) > 1:
        ticks.pop()
    return ticks + [high]


def chart(samples: list[Sample], now_ms: int, width: int = 1200, height: int = 210) -> dict[str, Any]:
    """Geometry of the LSO-vs-high-watermark chart: step paths for both lines, the
    amber area between them (offsets a read_committed consumer cannot read yet),
    and axis ticks. Empty when there is nothing to draw."""
    if not samples:
        return {"empty": True, "width": width, "height": height}
    left, right, top, bottom = 56, 12, 12, 26
    plot_w, plot_h = width - left - right, height - top - bottom
    span = min(max(now_ms - samples[0].time_ms, MIN_SPAN_MS), WINDOW_S * 1000)
    start = now_ms - span
    low = min(s.last_stable_offset for s in samples)
    high = max(s.high_watermark for s in samples)
    if high == low:
        low, high = max(0, low - 1), high + 1

    def x(t: int) -> float:
        return round(left + (max(t, start) - start) / span * plot_w, 1)

    def y(offset: int) -> float:
        return round(top + (high - offset) / (high - low) * plot_h, 1)

    def step_points(field: str) -> list[tuple[float, float]]:
        points: list[tuple[float, float]] = []
        for i, s in enumerate(samples):
            value = y(getattr(s, field))
            if i:
                points.append((x(s.time_ms), points[-1][1]))
            points.append((x(s.time_ms), value))
        points.append((x(now_ms), points[-1][1]))  # the last reading holds until now
        return points

    hw, lso = step_points("high_watermark"), step_points("last_stable_offset")

    def path(points: list[tuple[float, float]]) -> str:
        return "M" + " L".join(f"{px},{py}" for px, py in points)

    gap = path(hw + list(reversed(lso))) + " Z"
    last = samples[-1]
    return {
        "empty": False, "width": width, "height": height,
        "left": left, "right": width - right, "top": top, "bottom": height - bottom,
        "hw_path": path(hw), "lso_path": path(lso), "gap_path": gap,
        "y_ticks": [{"y": y(v), "label": v} for v in _ticks(low, high)],
        "x_ticks": [{"x": x(now_ms - back), "label": _ago_label(back)}
                    for back in (span, span // 2, 0)],
        "last": last, "gap_now": last.high_watermark - last.last_stable_offset,
        "max_gap": max(s.high_watermark - s.last_stable_offset for s in samples),
        "samples": len(samples), "span_ms": span,
    }


def _ago_label(ms: int) -> str:
    if ms <= 0:
        return "now"
    seconds = round(ms / 1000)
    return f"−{seconds // 60} min" if seconds >= 120 else f"−{seconds} s"
