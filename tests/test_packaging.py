"""The built wheel installs a working broker: every package, the console's templates and
static files, the migrations, and nothing of the tests.

The wheel is built from a copy of the source tree, installed with its dependencies
into a fresh virtual environment, and ``exactly serve`` is run from a directory
outside the repository with no ``PYTHONPATH``: what a user who ran ``pip install``
gets, not what the checkout happens to provide.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest
from alembic.script import ScriptDirectory

from exactly.coordinator.mirror_db import alembic_config
from exactly.storage import filenames
from tests.docs import blocks, section
from tests.test_cli import free_port
from tests.waiting import eventually

REPO = Path(__file__).resolve().parents[1]
#: the one top-level package the wheel installs (beside the pyspark_exactly module)
PACKAGES = ("exactly",)
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
    assert {"exactly/web/templates/base.html", "exactly/web/static/htmx.min.js",
            "exactly/migrations/env.py", "exactly/migrations/script.py.mako",
            "exactly/migrations/versions/0001_initial.py"} <= expected
    assert expected - names == set(), "files the wheel leaves out"
    assert "pyspark_exactly.py" in names  # Spark's discovery of the data source


def test_wheel_and_installed_files_have_no_tests(installed: Installed):
    names = zipfile.ZipFile(installed.wheel).namelist()
    tops = {name.split("/", 1)[0] for name in names if "/" in name}
    assert tops == {*PACKAGES, next(t for t in tops if t.endswith(".dist-info"))}
    assert {name for name in names if "/" not in name} == {"pyspark_exactly.py"}  # one import name
    listed = json.loads(check(installed.run(
        str(installed.python), "-c",
        "import importlib.metadata as m, json; print(json.dumps([str(f) for f in m.files('exactly')]))"
    )).stdout)
    assert not [f for f in listed if f.startswith(("tests/", "bench/"))]


def test_imports_resolve_to_the_environment_not_the_checkout(installed: Installed):
    where = json.loads(check(installed.run(
        str(installed.python), "-c",
        "import json, sysconfig, importlib.util, exactly, exactly.app, exactly.storage, exactly.coordinator; "
        "print(json.dumps([sysconfig.get_paths()['purelib'], exactly.__file__, exactly.app.__file__, "
        "exactly.storage.__file__, exactly.coordinator.__file__, "
        "importlib.util.find_spec('pyspark_exactly').origin]))")).stdout)  # its import needs the spark extra
    site_packages = Path(where[0]).resolve()
    assert site_packages.is_relative_to(installed.venv.resolve())
    for module_file in where[1:]:
        assert Path(module_file).resolve().is_relative_to(site_packages), module_file
        assert not Path(module_file).resolve().is_relative_to(REPO)


#: a user's project as people write them: a Flask app in ``app/``, its own ``storage/`` and
#: ``config.py`` -- the names Exactly's own rooms have inside ``exactly/``
USER_PROJECT = {
    "app/__init__.py": """
        from flask import Flask

        def create_app():
            app = Flask("orders")
            app.config["TOPIC"] = "orders"
            return app
    """,
    "storage/__init__.py": """
        BUCKET = "the user's storage"
    """,
    "config.py": """
        TOPIC = "orders"
    """,
    "pyproject.toml": """
        [tool.pytest.ini_options]
        pythonpath = ["."]
    """,
    "tests/test_orders.py": """
        import config
        import storage
        from app import create_app
        from exactly import Broker  # the embedded broker, imported under Exactly's one name

        def test_the_projects_own_modules():
            assert create_app().config["TOPIC"] == config.TOPIC
            assert storage.BUCKET == "the user's storage"
            assert Broker.__module__ == "exactly.app.broker"

        def test_the_fixture(exactly_broker):
            broker = exactly_broker.broker
            broker.create_topic(config.TOPIC, partitions=1)
            producer = broker.producer(transactional_id="orders-1")
            producer.init_transactions()
            producer.begin_transaction()
            producer.send(config.TOPIC, b"order-42")
            producer.commit_transaction()
            consumer = broker.consumer(isolation_level="read_committed", auto_offset_reset="earliest")
            consumer.assign([(config.TOPIC, 0)])
            assert [r.value for r in consumer.poll(timeout_ms=5_000)] == [b"order-42"]
    """,
}


def test_a_project_with_its_own_app_storage_and_config_uses_the_fixture(installed: Installed):
    """Issue 27: a Flask project with its own ``app/`` could not start pytest once Exactly
    was installed (the plugin's ``app.testing`` was not found; ``from app import`` found
    Exactly's). With one import name, both the project's modules and the fixture work."""
    project = installed.elsewhere / "orders-service"
    for name, text in USER_PROJECT.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(textwrap.dedent(text).lstrip())
    check(subprocess.run([sys.executable, "-m", "pip", "--python", str(installed.python), "install", "--quiet",
                          "--no-compile", "pytest"], env=clean_env(), capture_output=True, text=True,
                         timeout=INSTALL_TIMEOUT_S))
    result = subprocess.run([str(installed.venv / "bin" / "pytest"), "-q", "-p", "no:cacheprovider"],
                            cwd=project, env=clean_env(), capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout


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


@dataclass
class Served:
    """``exactly serve`` from the installed environment, outside the repository."""

    proc: subprocess.Popen
    data: Path
    log: Path
    http_url: str
    bootstrap: str


@contextlib.contextmanager
def served(installed: Installed) -> Iterator[Served]:
    """The installed ``exactly serve`` on a new data directory and free ports, answering;
    killed if the test has not stopped it."""
    data = installed.elsewhere / f"data-{free_port()}"
    http_port, kafka_port = free_port(), free_port()
    log = data.with_suffix(".log")
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [str(installed.venv / "bin" / "exactly"), "serve", "--data-dir", str(data),
             "--http-port", str(http_port), "--kafka-port", str(kafka_port)],
            cwd=installed.elsewhere, env=clean_env(), stdout=out, stderr=subprocess.STDOUT)
    try:
        server = Served(proc, data, log, f"http://127.0.0.1:{http_port}", f"127.0.0.1:{kafka_port}")
        wait_until_answering(proc, f"{server.http_url}/v3/clusters", log)
        yield server
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def test_installed_exactly_serve_runs_from_any_directory(installed: Installed):
    with served(installed) as server:
        base, data, log, proc = server.http_url, server.data, server.log, server.proc
        status, kind, body = http_get(f"{base}/")
        assert (status, kind.split(";")[0]) == (200, "text/html")
        assert b"Exactly</title>" in body                       # the console's template
        status, _, css = http_get(f"{base}/static/console.css")  # its static files
        assert status == 200 and css == (REPO / "exactly/web/static/console.css").read_bytes()
        status, kind, body = http_get(f"{base}/v3/clusters")
        assert (status, kind) == (200, "application/json")
        cluster_id = re.search(r"^cluster\.id=(\S+)$", (data / filenames.META_PROPERTIES).read_text(),
                               re.MULTILINE).group(1)
        assert [c["cluster_id"] for c in json.loads(body)["data"]] == [cluster_id]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=START_TIMEOUT_S) == 0, log.read_text()
    assert "stopped cleanly" in log.read_text()
    assert (data / filenames.CLEAN_SHUTDOWN_FILE).exists()
    with sqlite3.connect(data / "exactly.db") as db:               # the migrations ran
        assert db.execute("SELECT version_num FROM alembic_version").fetchall() == [(head_revision(),)]


def test_the_readmes_example_runs_as_written_after_make_run_and_runs_again(installed: Installed):
    """Issue 35: the README's example, in an environment with the broker alone (what
    `make run` installs) and the one install command the README gives before it, prints
    what the README shows; run again on the same broker, it bills the next six orders."""
    section_text = section("README.md", "What it is for")
    (install,) = [line for block in blocks(section_text, "sh") for line in block.splitlines()
                  if "pip install" in line]
    packages = install.split("pip install", 1)[1].split()
    check(subprocess.run([sys.executable, "-m", "pip", "--python", str(installed.python), "install", "--quiet",
                          "--no-compile", *packages], env=clean_env(), capture_output=True, text=True,
                         timeout=INSTALL_TIMEOUT_S))
    (code,) = blocks(section_text, "python")
    (expected,) = blocks(section_text, "text")
    with served(installed) as server:
        example = installed.elsewhere / "billing.py"
        example.write_text(code.replace("127.0.0.1:9092", server.bootstrap))
        first = check(installed.run(str(installed.python), str(example), timeout=150)).stdout
        again = check(installed.run(str(installed.python), str(example), timeout=150)).stdout
    assert first == expected
    assert again == expected.replace("[(0, 3), (1, 3)]", "[(0, 6), (1, 6)]")
    assert "[(0, 6), (1, 6)]" in section_text  # what the README says a second run prints


def test_the_development_install_shows_spark_its_data_source_from_any_directory(tmp_path: Path):
    """Issue 35: make's editable install mapped the packages through an import finder, which
    Spark's discovery (pkgutil's scan of the path, on its Python workers) does not see, so
    ``format("exactly")`` was unknown outside the checkout. It is a plain path entry now."""
    found = subprocess.run([sys.executable, "-c", "import pkgutil; print(sorted(m.name for m in "
                            "pkgutil.iter_modules() if m.name.startswith('pyspark_')))"],
                           cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=60)
    assert "'pyspark_exactly'" in found.stdout, found.stdout + found.stderr
