"""The transactions report: a batch Spark job over the mirror's finished transactions.

    python -m exactly.app.spark.report_job --data-dir ./data [--out PATH] [--top N]

It reads the ``transactions`` table of ``<data-dir>/exactly.db`` over JDBC
(``exactly/app/spark/jdbc.py``: read-only, one snapshot) and reports

* commits and aborts per transactional id;
* transaction durations (end minus start, ms): p50, p95, p99 (exact, interpolated
  between the two nearest values as Spark's ``percentile`` does, to 0.1 ms) and max;
* the longest LSO holds: an open transaction holds the last stable offset of every
  partition it wrote to until its marker is written. The mirror records when the
  transaction started (its first AddPartitions) and ended (its Complete record), not
  when each partition got its first record, so a hold is the transaction's duration
  on each of its partitions: an upper bound of that partition's hold.

The report is written as JSON and as a Markdown table (``PATH`` and ``PATH`` with
``.md``; by default ``<data-dir>/reports/transactions-<UTC time>.json``) and the
Markdown is printed; progress lines go to stderr. The broker may be running.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

from exactly.app.spark.jdbc import finished_transactions, mirror_path

PERCENTILES = {"p50": 0.50, "p95": 0.95, "p99": 0.99}
DEFAULT_TOP = 10
REPORTS_DIR = "reports"

Report = dict[str, Any]


def build_report(spark, data: Path | str, top: int = DEFAULT_TOP,
                 progress: Callable[[str], None] = lambda line: None) -> Report:
    """The report of the mirror of ``data``, from one snapshot of its finished transactions."""
    from pyspark.sql import functions as F

    progress(f"reading finished transactions from {mirror_path(data)} over JDBC")
    started = F.col("start_ms") >= 0  # -1: no start recorded, so no duration and no hold
    finished = (finished_transactions(spark, data)
                .withColumn("duration_ms", F.when(started, F.col("end_ms") - F.col("start_ms")))
                .localCheckpoint())  # one read: every figure below comes from the same snapshot
    is_commit = F.col("outcome") == "COMMIT"
    per_id = (finished.groupBy("transactional_id")
              .agg(F.count_if(is_commit).alias("commits"), F.count_if(~is_commit).alias("aborts"))
              .orderBy(F.desc(F.col("commits") + F.col("aborts")), "transactional_id")
              .collect())
    totals = finished.agg(F.count("*").alias("total"), F.count_if(is_commit).alias("committed"),
                          F.percentile("duration_ms", list(PERCENTILES.values())).alias("percentiles"),
                          F.max("duration_ms").alias("max")).first()
    progress(f"{totals.total} finished transactions ({totals.committed} committed, "
             f"{totals.total - totals.committed} aborted) of {len(per_id)} transactional ids")
    holds = (finished.where(started).select("transactional_id", "producer_id", "producer_epoch", "outcome",
                             F.explode("partitions").alias("partition"), "start", "end", "duration_ms")
             .orderBy(F.desc("duration_ms"), "end", "partition")
             .limit(top).collect())
    percentiles = [round(value, 1) for value in totals.percentiles or []] or [None] * len(PERCENTILES)
    return {
        "mirror": str(mirror_path(data)),
        "transactions": {"total": totals.total, "committed": totals.committed,
                         "aborted": totals.total - totals.committed},
        "by_transactional_id": [row.asDict() for row in per_id],
        "duration_ms": {**dict(zip(PERCENTILES, percentiles)), "max": totals.max},
        "longest_lso_holds": [{**row.asDict(), "start": _iso(row.start), "end": _iso(row.end)} for row in holds],
    }


def _iso(moment: datetime | None) -> str | None:
    """Spark hands timestamps back as naive local times."""
    return None if moment is None else moment.astimezone(timezone.utc).isoformat(timespec="milliseconds")


def to_markdown(report: Report, top: int = DEFAULT_TOP) -> str:
    """The report as Markdown tables (the ``top`` busiest transactional ids)."""
    txns, durations = report["transactions"], report["duration_ms"]
    lines = [f"# Transactions report: {report['mirror']}", "",
             f"{txns['total']} finished transactions: {txns['committed']} committed, {txns['aborted']} aborted.", ""]
    ids = report["by_transactional_id"]
    lines += _table(["transactional id", "commits", "aborts"],
                    [[row["transactional_id"], row["commits"], row["aborts"]] for row in ids[:top]])
    if len(ids) > top:
        lines.append(f"... and {len(ids) - top} more transactional ids (in the JSON file)")
    lines += ["", "Duration (ms): " + ", ".join(f"{name} {_number(value)}" for name, value in durations.items()),
              "", "Longest LSO holds (the transaction's duration on each partition it wrote to):", ""]
    lines += _table(["partition", "duration ms", "transactional id", "producer id", "epoch", "outcome", "start"],
                    [[h["partition"], h["duration_ms"], h["transactional_id"], h["producer_id"],
                      h["producer_epoch"], h["outcome"], h["start"]] for h in report["longest_lso_holds"]])
    return "\n".join(lines) + "\n"


def _number(value: float | int | None) -> str:
    if value is None:
        return "-"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    if not rows:
        return ["(none)"]
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(str(cell) for cell in row) + " |" for row in rows)]


def write_report(report: Report, out: Path, top: int = DEFAULT_TOP) -> tuple[Path, Path]:
    """Write ``out`` (JSON) and its ``.md`` twin; returns both paths."""
    out.parent.mkdir(parents=True, exist_ok=True)
    markdown = out.with_suffix(".md")
    out.write_text(json.dumps(report, indent=2) + "\n")
    markdown.write_text(to_markdown(report, top))
    return out, markdown


def default_out(data_dir: Path) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return data_dir / REPORTS_DIR / f"transactions-{stamp}.json"


def run(spark, data_dir: Path, out: Path | None = None, top: int = DEFAULT_TOP) -> Report:
    """Build, write and print the report of ``data_dir``."""
    def progress(line: str) -> None:
        print(f"report: {line}", file=sys.stderr, flush=True)

    report = build_report(spark, data_dir, top, progress)
    json_path, markdown_path = write_report(report, out or default_out(data_dir), top)
    progress(f"wrote {json_path} and {markdown_path.name}")
    print(to_markdown(report, top), end="", flush=True)
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m exactly.app.spark.report_job", description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default="data", type=Path, help="the broker's data directory (default ./data)")
    parser.add_argument("--out", type=Path, help="the JSON file to write (and PATH.md); "
                        "default <data-dir>/reports/transactions-<UTC time>.json")
    parser.add_argument("--top", default=DEFAULT_TOP, type=int, help=f"rows of each table (default {DEFAULT_TOP})")
    args = parser.parse_args(argv)
    try:
        mirror_path(args.data_dir)
    except FileNotFoundError as e:
        print(f"report: {e}", file=sys.stderr)
        return 2
    print("report: starting Spark (a few seconds)", file=sys.stderr, flush=True)
    from exactly.app.spark.session import spark_session

    run(spark_session("exactly-report"), args.data_dir, args.out, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
