"""``python run.py`` / ``exactly serve``: start-up errors and clean shutdown, as a user meets them."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from exactly.app import Broker
from exactly.storage import filenames
from tests.conftest import data_batch, producer_id
from tests.waiting import eventually

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(data_dir: Path, *extra: str, kafka_port: int | None = None,
          http_port: int | None = None) -> subprocess.Popen:
    args = [sys.executable, str(REPO / "run.py"), "--data-dir", str(data_dir),
            "--kafka-port", str(kafka_port or free_port()), "--http-port", str(http_port or free_port()), *extra]
    return subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_line(proc: subprocess.Popen, needle: str, timeout: float = 30) -> str:
    """The first line of ``proc``'s stdout holding ``needle`` (a line at a time: the
    deadline is for the output stalling; the test's timeout bounds a blocked read)."""
    seen: list[str] = []

    def printed() -> str | None:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            pytest.fail(f"{needle!r} not printed before the process exited ({proc.returncode}); got {seen!r}")
        seen.append(line)
        return line if needle in line else None
    return eventually(printed, timeout, f"{needle!r} to be printed", interval=0)


def run_to_exit(proc: subprocess.Popen, timeout: float = 30) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out, err


def test_bad_flag_exits_non_zero_with_usage(tmp_path: Path) -> None:
    code, _, err = run_to_exit(serve(tmp_path / "d", "--no-such-flag"))
    assert code == 2
    assert "unrecognized arguments: --no-such-flag" in err


def test_unknown_config_key_is_a_clear_error(tmp_path: Path) -> None:
    code, _, err = run_to_exit(serve(tmp_path / "d", "--config", "log.segment.bytez=10"))
    assert code == 1
    assert "INVALID_CONFIG" in err and "log.segment.bytez" in err


def test_malformed_config_pair_is_rejected(tmp_path: Path) -> None:
    code, _, err = run_to_exit(serve(tmp_path / "d", "--config", "novalue"))
    assert code == 2 and "expected key=value" in err


def test_unwritable_data_dir_exits_with_message(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    code, _, err = run_to_exit(serve(blocker / "data"))
    assert code == 1
    assert "cannot use data directory" in err and "KAFKA_STORAGE_ERROR" in err


def test_port_in_use_exits_with_message(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        code, _, err = run_to_exit(serve(tmp_path / "d", kafka_port=port))
    assert code == 1
    assert f"Kafka port 127.0.0.1:{port} is already in use" in err


def test_second_process_on_same_data_dir_is_refused(tmp_path: Path) -> None:
    first = serve(tmp_path / "d")
    try:
        wait_for_line(first, "recovered")
        code, _, err = run_to_exit(serve(tmp_path / "d"))
        assert code == 1
        assert "in use by another process" in err
        assert f"(pid {first.pid}: {sys.executable} {REPO / 'run.py'} --data-dir" in err  # who, and what to do:
        assert "stop that process, or open another data directory" in err
    finally:
        first.send_signal(signal.SIGTERM)
        run_to_exit(first)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_shuts_down_cleanly_with_snapshot_and_marker(tmp_path: Path, signum: int) -> None:
    data = tmp_path / "d"
    with Broker(data) as broker:
        broker.create_topic("t", partitions=1)
        pid = producer_id(broker)
        broker.produce("t", 0, data_batch([b"v"], pid, 0, 0))
    proc = serve(data)
    try:
        line = wait_for_line(proc, "recovered")
        assert "1 topics" in line
        assert not (data / filenames.CLEAN_SHUTDOWN_FILE).exists(), "removed while running"
        proc.send_signal(signum)
        code, out, err = run_to_exit(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0, err
    assert "stopped cleanly" in out
    assert (data / filenames.CLEAN_SHUTDOWN_FILE).exists()
    assert (data / "t-0" / filenames.offset_name(1, filenames.SNAPSHOT_SUFFIX)).exists()
    with Broker(data) as broker:
        assert broker.produce("t", 0, data_batch([b"v"], pid, 0, 0)) == 0, "dedup state survived"


def test_console_script_help_lists_the_flags() -> None:
    out = subprocess.run([sys.executable, "-m", "exactly", "serve", "--help"], cwd=REPO,
                         capture_output=True, text=True, timeout=30).stdout
    for flag in ("--data-dir", "--host", "--kafka-port", "--http-port", "--config"):
        assert flag in out
