"""Flake hunt: the test suite N times under CPU load, and every test that failed at least once.

``make soak-tests N=5`` runs the whole suite as ``make test`` does, five times, each run
with every core kept busy beside it -- by ``stress-ng --cpu 0`` (Debian's stress-ng, which
the Makefile installs) or, without it, by one spinning Python process per core -- and
prints, per test that failed (or errored) in any run, how many runs it failed in, with
the first line of its last failure. A test that fails in one run of five is a flake to
fix: CI runs on a machine as busy as this. Paste the summary (its date and command) into
bench/RESULTS.md.

    .venv/bin/python bench/soak_tests.py --runs 5 -- -n 4 --dist loadgroup
    .venv/bin/python bench/soak_tests.py --runs 1 --load none -- tests/test_config.py

Everything after ``--`` goes to pytest (default: the whole suite, as ``make test`` runs
it). Exits 1 when any test failed in any run, 0 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

REPO = Path(__file__).resolve().parents[1]
#: what `make test` passes pytest besides its workers (Makefile)
SUITE = ["-n", str(2 * (os.cpu_count() or 1)), "--dist", "loadgroup", "--no-loadscope-reorder"]
#: a Python CPU hog: one of these per core when stress-ng is missing
SPIN = "while True: pass"


@dataclass
class Run:
    """One run of the suite: its exit status, seconds, and the tests that failed in it."""

    number: int
    returncode: int
    seconds: float
    tests: int
    failed: dict[str, str] = field(default_factory=dict)


@contextlib.contextmanager
def cpu_load(kind: str) -> Iterator[str]:
    """Every core busy while the block runs; yields what loads them."""
    cores = os.cpu_count() or 1
    if kind == "none":
        yield "no load"
        return
    stress = shutil.which("stress-ng")
    if kind == "stress-ng" and stress is None:
        sys.exit("stress-ng is missing: `sudo apt-get install stress-ng`, or --load python")
    if kind in ("auto", "stress-ng") and stress is not None:
        commands = [[stress, "--cpu", "0", "--cpu-method", "all", "--quiet"]]
        what = f"stress-ng --cpu 0 ({cores} cores)"
    else:
        commands = [[sys.executable, "-c", SPIN] for _ in range(cores)]
        what = f"{cores} spinning Python processes"
    hogs = [subprocess.Popen(c, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)
            for c in commands]
    try:
        yield what
    finally:
        for hog in hogs:  # each is its own process group: stress-ng's workers go with it
            with contextlib.suppress(ProcessLookupError):
                os.killpg(hog.pid, signal.SIGKILL)
            hog.wait()


def failures(report: Path) -> tuple[int, dict[str, str]]:
    """How many tests a JUnit XML report holds, and the failed or errored ones: test id ->
    the first line of its message."""
    if not report.exists():
        return 0, {}
    tests, failed = 0, {}
    for case in ET.parse(report).getroot().iter("testcase"):
        tests += 1
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        if problem is not None:
            path = case.get("classname", "").replace(".", "/")
            test_id = f"{path}.py::{case.get('name')}" if path else str(case.get("name"))
            text = (problem.get("message") or problem.text or "").strip()
            failed[test_id] = text.splitlines()[0][:160] if text else ""
    return tests, failed


def run_suite(number: int, pytest_args: list[str], workdir: Path) -> Run:
    report = workdir / f"run-{number}.xml"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}",
               *pytest_args]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as `make test`
    started = time.monotonic()
    done = subprocess.run(command, cwd=REPO, env=env, stdin=subprocess.DEVNULL)
    tests, failed = failures(report)
    return Run(number, done.returncode, time.monotonic() - started, tests, failed)


def summary(runs: list[Run], load: str, command: str) -> str:
    """The result as a bench/RESULTS.md section."""
    counts = Counter(test for run in runs for test in run.failed)
    last = {test: message for run in runs for test, message in run.failed.items()}
    lines = [f"### Soak: {len(runs)} run(s) of the suite under CPU load "
             f"({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)", "",
             f"`{command}`, load: {load}, {os.cpu_count()} cores", "",
             "| run | exit | tests | failed | minutes |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {r.number} | {r.returncode} | {r.tests} | {len(r.failed)} | {r.seconds / 60:.1f} |" for r in runs]
    lines.append("")
    if counts:
        lines += ["| test | failed in | last failure |", "| --- | --- | --- |"]
        lines += [f"| `{test}` | {n}/{len(runs)} | {last[test].replace('|', '/')} |"
                  for test, n in sorted(counts.items(), key=lambda item: (-item[1], item[0]))]
    else:
        lines.append("No test failed in any run.")
    broken = [r.number for r in runs if r.returncode not in (0, 1)]
    if broken:
        lines += ["", f"Runs {broken} ended without a verdict (exit status other than 0 or 1): see their output."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    ours, pytest_args = (args[:args.index("--")], args[args.index("--") + 1:]) if "--" in args else (args, [])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="how many times to run the suite (default 5)")
    parser.add_argument("--load", choices=("auto", "stress-ng", "python", "none"), default="auto",
                        help="what keeps the cores busy: stress-ng if installed (auto), else a Python hog per core")
    options = parser.parse_args(ours)
    if options.runs < 1:
        parser.error("--runs must be at least 1")
    pytest_args = pytest_args or SUITE
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="soak-") as workdir:
        for number in range(1, options.runs + 1):
            with cpu_load(options.load) as load:
                print(f"soak run {number}/{options.runs} under {load}: pytest {shlex.join(pytest_args)}", flush=True)
                runs.append(run_suite(number, pytest_args, Path(workdir)))
            print(f"soak run {number}: exit {runs[-1].returncode}, {len(runs[-1].failed)} failed "
                  f"of {runs[-1].tests} in {runs[-1].seconds / 60:.1f} min", flush=True)
    command = shlex.join(["bench/soak_tests.py", *args])
    print("\n" + summary(runs, load, command))
    return 1 if any(r.failed or r.returncode != 0 for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
