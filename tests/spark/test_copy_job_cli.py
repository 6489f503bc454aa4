"""The copy job's command line and progress line (no Spark: the crash test in
test_copy_job.py runs the job itself)."""

from __future__ import annotations

import json

import pytest

from exactly.app.spark.copy_job import expected_output, parse_args, progress_line


def test_the_progress_line_names_the_batch_records_offsets_and_times() -> None:
    progress = {"batchId": 3, "numInputRows": 40, "sink": {"description": "exactly", "numOutputRows": -1},
                "sources": [{"endOffset": json.dumps({"in": {"1": 60, "0": 61}})}],
                "durationMs": {"addBatch": 212, "triggerExecution": 1834}}
    assert progress_line(progress) == "batch 3: 40 in, 40 out, offsets in 0:61 1:60, sink 212 ms, batch 1834 ms"


def test_the_transformation_keeps_where_a_record_came_from() -> None:
    assert json.loads(expected_output(1, 17, b"record-17")) == {"partition": 1, "offset": 17, "value": "RECORD-17"}


def test_the_command_needs_its_topics_and_checkpoint(capsys) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--input", "in"])
    assert "--output" in capsys.readouterr().err
    args = parse_args(["--input", "in", "--output", "out", "--checkpoint", "/tmp/ck", "--available-now"])
    assert (args.bootstrap, args.available_now, args.seed) == ("127.0.0.1:9092", True, 0)
