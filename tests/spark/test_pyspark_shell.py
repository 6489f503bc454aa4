"""docs/spark.md's one ``pyspark`` command line, run as written (a real ``pyspark``
process, from the repository root, nothing activated): ``format("exactly")`` is there
with no registration call (Spark's discovery of ``pyspark_exactly``), the sink creates
its missing output topic as Kafka's auto-creation would, and JDBC reads the SQLite
mirror. One test: a new JVM costs tens of seconds."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs import REPO, page
from tests.kafka_support import TWO_PHASE_COMMIT, KafkaBroker


PAGE = "docs/spark.md"

SCRIPT = """
import os
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()  # the shell's session (its startup file runs only on a terminal)
spark.sparkContext.setLogLevel("ERROR")
bootstrap, db = os.environ["EXACTLY_BOOTSTRAP"], os.environ["EXACTLY_DB"]
rows = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(3)], "key STRING, value STRING")
rows.write.format("exactly").option("kafka.bootstrap.servers", bootstrap).option("topic", "shell-out") \\
    .mode("append").save()
read = spark.read.format("exactly").option("kafka.bootstrap.servers", bootstrap) \\
    .option("subscribe", "shell-out").option("startingOffsets", "earliest").load()
print("EXACTLY", sorted(r.v for r in read.selectExpr("CAST(value AS STRING) AS v").collect()))
mirror = spark.read.format("jdbc").option("url", f"jdbc:sqlite:file:{db}?mode=ro") \\
    .option("driver", "org.sqlite.JDBC").option("dbtable", "mirror_progress").load()
print("JDBC", mirror.count() >= 0)
"""


def readme_command() -> str:
    """The command block under docs/spark.md's ``pyspark-command`` marker, its venv paths
    pointed at the environment running this test."""
    block = re.search(r"<!-- pyspark-command[^>]*-->\n```sh\n(.*?)```", page(PAGE), re.S)
    assert block, f"{PAGE} lost its pyspark command line"
    venv_bin = f"{Path(sys.executable).parent}/"
    return re.sub(r"(\$PWD/)?\.venv/bin/", venv_bin, block.group(1))


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_the_docs_pyspark_shell_reads_writes_and_reads_jdbc(tmp_path: Path) -> None:
    command = readme_command()
    with KafkaBroker(tmp_path / "data", **TWO_PHASE_COMMIT) as served:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK", "PYTHONPATH", "SPARK_"))}
        env.update(EXACTLY_BOOTSTRAP=served.bootstrap, EXACTLY_DB=str(tmp_path / "data" / "exactly.db"))
        done = subprocess.run(["bash", "-c", command], input=SCRIPT, cwd=REPO, env=env, capture_output=True,
                              text=True, timeout=400)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "EXACTLY ['v0', 'v1', 'v2']" in done.stdout, (done.stdout, done.stderr[-3000:])
        assert "JDBC True" in done.stdout, (done.stdout, done.stderr[-3000:])
        assert served.engine.topics.topic_info("shell-out").partitions == served.engine.config.num_partitions
