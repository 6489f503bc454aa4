"""``exactly audit GROUP --input T --output U [--until P:O] [--http URL]``: was it exactly once?

Asks a running broker's HTTP API for the exactly-once audit of a consumer group
(``GET /v3/clusters/<id>/consumer-groups/<group>/audit``, ``exactly/app/http/api/audit.py``) and
prints what it could check (lineage, counts, or the offsets alone), the chain of committed
transactions per input partition, the aborted attempts with their cause, and the verdict
with every violation's exact offsets and likely cause. The exit
status is the verdict, for a test or a CI step: 0 only when exactly-once held, 1 when
it was violated, 2 on a usage error or when the broker cannot be asked.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from exactly.app.cli import http_api_client
from exactly.app.cli.http_api_client import HttpApiError, quote

HELD, VIOLATED, CANNOT_ASK = 0, 1, 2
#: an audit reads the group's logs: longer than a plain call
TIMEOUT_S = 60


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("group", help="the consumer group that commits its offsets in transactions")
    parser.add_argument("--input", required=True, help="the topic the group consumes")
    parser.add_argument("--output", required=True, help="the topic its transactions write")
    parser.add_argument("--records-per-input", type=int, default=None,
                        help="output records per input record (1 for a 1:1 transform): then counts are checked too")
    parser.add_argument("--until", action="append", default=[], metavar="PARTITION:OFFSET",
                        help="audit that input partition up to OFFSET, not its high watermark (repeatable)")


def fetch_audit(args: argparse.Namespace) -> dict[str, Any]:
    """The audit resource, from the broker's one cluster."""
    api = http_api_client.api(args)
    return api.call("GET", f"{api.cluster()}/consumer-groups/{quote(args.group)}/audit",
                    params={"input": args.input, "output": args.output,
                            "records_per_input": args.records_per_input, "until": args.until}, timeout=TIMEOUT_S)


def _transaction(t: dict[str, Any]) -> str:
    inputs = ", ".join(f"[{r['from_offset']}, {r['to_offset']})" for r in t["inputs"])
    who = f"{t['transactional_id'] or '?'} (producer {t['producer_id']} epoch {t['producer_epoch']})"
    cause = f", cause {t['abort_cause']} ({t['abort_actor']})" if t["abort_cause"] else ""
    return f"{t['outcome']:6} {who}: input {inputs or '-'} -> {t['output_records']} output records " \
           f"in {len(t['outputs'])} batch(es){cause}"


def render(audit: dict[str, Any]) -> str:
    """What was checked, the chain per input partition, the aborted attempts and the
    verdict, as text."""
    lines = [f"audit of group {audit['consumer_group_id']}: {audit['input_topic_name']} -> "
             f"{audit['output_topic_name']}", f"checked: {audit['checked']}"]
    for p in audit["partitions"]:
        until = f", audited to {p['audited_to']}" if p["audited_to"] != p["high_watermark"] else ""
        lines.append(f"{audit['input_topic_name']}-{p['partition_id']}: log start {p['log_start_offset']}, "
                     f"high watermark {p['high_watermark']}, committed {p['committed_offset']}{until}")
        for t in audit["transactions"]:
            for r in t["inputs"]:
                if r["partition_id"] == p["partition_id"]:
                    lines.append(f"  [{r['from_offset']}, {r['to_offset']}) {_transaction(t)}")
    lines += [f"aborted: {_transaction(t)}" for t in audit["aborted"]]
    for v in audit["violations"]:
        lines.append(f"VIOLATION {v['kind']} {v['topic_name']}-{v['partition_id']} [{v['start_offset']}, "
                     f"{v['end_offset']}){' producer ' + str(v['producer_id']) if v['producer_id'] is not None else ''}"
                     f": {v['detail']}")
        if v["likely_cause"]:
            lines.append(f"  likely cause: {v['likely_cause']}")
    lines.append("exactly once: held" if audit["ok"] else f"exactly once: VIOLATED ({len(audit['violations'])})")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    try:
        audit = fetch_audit(args)
    except HttpApiError as e:
        print(f"exactly audit: {e}", file=sys.stderr)
        return CANNOT_ASK
    print(render(audit), flush=True)
    return HELD if audit["ok"] else VIOLATED
