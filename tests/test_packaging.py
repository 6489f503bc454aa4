"""The built wheel installs a working broker: every package, the console's templates and
static files, the migrations, and nothing of the tests.

The wheel is built from a copy of the source tree, installed with its dependencies
into a fresh virtual environment, and ``exactly serve`` is run from a directory
outside the repository with no ``PYTHONPATH``: what a user who ran ``pip install``
gets, not what the checkout happens to provide.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory

from coordinator.mirror_db import alembic_config
from storage import filenames
from tests.test_cli import free_port
from tests.waiting import eventually

REPO = Path(__file__).resolve().parents[1]
#: the top-level packages the wheel installs
PACKAGES = ("app", "storage", "coordinator")
#: what a copy of the checkout leaves behind: environments, data, build outputs, caches
NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", "data", "build", "dist", "*.egg-info",
                                    "__pycache__", "*.pyc", ".pytest_cache", ".hypothesis",
                                    "test-artifacts", ".work")
BUILD_TIMEOUT_S = 300
INSTALL_TIMEOUT_S = 400
START_TIMEOUT_S = 60

pytestmark = [pytest.mark.slow, pytest.mark.timeout(BUILD_TIMEOUT_S + INSTALL_TIMEOUT_S + 3 * START_TIMEOUT_S)]


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    #: a directory outside the repository to run from
    elsewhere: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(args, cwd=self.elsewhere, env=clean_env(), capture_output=True,
                              text=True, timeout=timeout)


def clean_env() -> dict[str, str]:
    """The environment without anything that would point Python at the checkout."""
    return {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")}


def check(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, f"{result.args} failed:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("packaging")
    source = root / "source"
    shutil.copytree(REPO, source, ignore=NOT_SOURCE)
    dist = root / "dist"
    check(subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet",
                          "--wheel-dir", str(dist), str(source)],
                         cwd=root, env=clean_env(), capture_output=True, text=True,
                         timeout=BUILD_TIMEOUT_S))
    (wheel,) = dist.glob("exactly-*.whl")
    venv = root / "venv"
    # this environment's pip installs into the new one (--python): the same files as the
    # new one's own pip would, without copying pip in and byte-compiling every dependency
    # (25 s of CPU against 7 s); the modules compile as they are first imported
    check(subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], env=clean_env(),
                         capture_output=True, text=True, timeout=120))
    check(subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
                          "--quiet", "--no-compile", str(wheel)], cwd=root, env=clean_env(),
                         capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S))
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    return Installed(wheel, venv, elsewhere)


def source_files() -> set[str]:
    """Every file of the installed packages in the checkout, as wheel paths."""
    found = set()
    for package in PACKAGES:
        for path in (REPO / package).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                found.add(path.relative_to(REPO).as_posix())
    return found


def test_wheel_holds_every_module_template_static_file_and_migration(installed: Installed):
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    expected = source_files()
    assert {"app/http/web/templates/base.html", "app/http/web/static/htmx.min.js",
            "coordinator/migrations/env.py", "coordinator/migrations/script.py.mako",
            "coordinator/migrations/versions/0001_initial.py"} <= expected
    assert expected - names == set(), "files the wheel leaves out"
    assert "pyspark_exactly.py" in names  # Spark's discovery of the data source


def test_wheel_and_installed_files_have_no_tests(installed: Installed):
    names = zipfile.ZipFile(installed.wheel).namelist()
    tops = {name.split("/", 1)[0] for name in names if "/" in name}
    assert tops == {*PACKAGES, next(t for t in tops if t.endswith(".dist-info"))}
    listed = json.loads(check(installed.run(
        str(installed.python), "-c",
        "import importlib.metadata as m, json; print(json.dumps([str(f) for f in m.files('exactly')]))"
    )).stdout)
    assert not [f for f in listed if f.startswith(("tests/", "bench/"))]


def test_imports_resolve_to_the_environment_not_the_checkout(installed: Installed):
    where = json.loads(check(installed.run(
        str(installed.python), "-c",
        "import json, sysconfig, app, storage, coordinator; "
        "print(json.dumps([sysconfig.get_paths()['purelib'], app.__file__, storage.__file__, "
        "coordinator.__file__]))")).stdout)
    site_packages = Path(where[0]).resolve()
    assert site_packages.is_relative_to(installed.venv.resolve())
    for module_file in where[1:]:
        assert Path(module_file).resolve().is_relative_to(site_packages), module_file
        assert not Path(module_file).resolve().is_relative_to(REPO)


def head_revision() -> str:
    """The newest migration of the checkout."""
    return ScriptDirectory.from_config(alembic_config(":memory:")).get_current_head()


def http_get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.headers.get("Content-Type", ""), response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read()


def wait_until_answering(proc: subprocess.Popen, url: str, log: Path) -> None:
    def answers() -> bool:
        assert proc.poll() is None, f"exactly serve exited with {proc.returncode}:\n{log.read_text()}"
        try:
            http_get(url)
            return True
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False
    eventually(answers, START_TIMEOUT_S, f"{url} to answer", interval=0.1)


def test_installed_exactly_serve_runs_from_any_directory(installed: Installed):
    data = installed.elsewhere / "data"
    http_port = free_port()
    log = installed.elsewhere / "serve.log"
    base = f"http://127.0.0.1:{http_port}"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [str(installed.venv / "bin" / "exactly"), "serve", "--data-dir", str(data),
             "--http-port", str(http_port), "--kafka-port", str(free_port())],
            cwd=installed.elsewhere, env=clean_env(), stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until_answering(proc, f"{base}/v3/clusters", log)
        status, kind, body = http_get(f"{base}/")
        assert (status, kind.split(";")[0]) == (200, "text/html")
        assert b"Exactly</title>" in body                       # the console's template
        status, _, css = http_get(f"{base}/static/console.css")  # its static files
        assert status == 200 and css == (REPO / "app/http/web/static/console.css").read_bytes()
        status, kind, body = http_get(f"{base}/v3/clusters")
        assert (status, kind) == (200, "application/json")
        cluster_id = re.search(r"^cluster\.id=(\S+)$", (data / filenames.META_PROPERTIES).read_text(),
                               re.MULTILINE).group(1)
        assert [c["cluster_id"] for c in json.loads(body)["data"]] == [cluster_id]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=START_TIMEOUT_S) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert "stopped cleanly" in log.read_text()
    assert (data / filenames.CLEAN_SHUTDOWN_FILE).exists()
    with sqlite3.connect(data / "exactly.db") as db:               # the migrations ran
        assert db.execute("SELECT version_num FROM alembic_version").fetchall() == [(head_revision(),)]
