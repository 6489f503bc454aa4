# Two commands on a fresh machine: `make run` and `make test`.
# The virtual environment lives in .venv/ at the repository root.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
#: one stamp per set of extras: `make run` installs the broker alone, `make pipeline`
#: adds PySpark, `make test` everything (a change to pyproject.toml redoes each)
BROKER_STAMP := $(VENV)/.installed-broker
SPARK_STAMP  := $(VENV)/.installed-spark
TEST_STAMP   := $(VENV)/.installed-test
#: the tests' archive of Spark's classes (tests/spark/class_archive.py): a Spark
#: session starts in about half the time with it
SPARK_ARCHIVE := $(VENV)/spark-classes.jsa
#: Apache Kafka's jars -- broker, clients, tools, Streams -- at the version tests/kafka/pom.xml
#: pins, from Maven Central (tests/kafka/jars.py writes this stamp last): the real Kafka the
#: tests run beside Exactly (tests/kafka/) and bench/bench_kafka.py measures it against
KAFKA_JARS := $(VENV)/kafka-jars/.resolved

#: the data directory `make run` serves and `make pipeline` reports on
DATA_DIR  ?= ./data
#: flags for run.py, e.g. ARGS="--kafka-port 19092 --config log.segment.bytes=1048576"
ARGS      ?=
#: the Kafka address `make pipeline` connects to (the broker `make run` serves)
BOOTSTRAP ?= 127.0.0.1:9092
#: pytest-xdist workers for `make test`: two per core. Most tests wait -- on fsync,
#: sockets, child processes and JVMs starting -- so one worker per core leaves about
#: half the CPU idle (measured: 15 CPU-minutes in a 17-minute run on 2 cores)
TEST_WORKERS ?= $(shell echo $$(( 2 * $$(nproc 2>/dev/null || echo 1) )))
#: runs of the whole suite `make soak-tests` makes, each under CPU load
N ?= 5

CHROMIUM := /usr/bin/chromium
KCAT     := /usr/bin/kcat
JAVA     := /usr/bin/java
JDBC_JAR := /usr/share/java/sqlite-jdbc.jar
CURL     := /usr/bin/curl
JQ       := /usr/bin/jq
MVN      := /usr/bin/mvn
JAVAC    := /usr/bin/javac
STRESS_NG := /usr/bin/stress-ng
SUDO     := $(shell [ "$$(id -u)" = 0 ] || ! command -v sudo >/dev/null 2>&1 || echo sudo)

.PHONY: run test check soak-tests bench install pipeline clean

$(BROKER_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	touch $(BROKER_STAMP)

$(SPARK_STAMP): $(BROKER_STAMP)
	$(PY) -m pip install --quiet -e '.[spark]'
	touch $(SPARK_STAMP)

$(TEST_STAMP): $(BROKER_STAMP)
	$(PY) -m pip install --quiet -e '.[test,spark]'
	touch $(SPARK_STAMP) $(TEST_STAMP)

## install: the environment with everything (the tests' tools and PySpark included)
install: $(TEST_STAMP)

## run: create the environment, install the broker alone (no test tools, no PySpark), migrate the SQLite mirror, start the broker on ./data (127.0.0.1), with KIP-939 two-phase commit on for `make pipeline`'s sink
run: $(BROKER_STAMP)
	$(PY) -m exactly db upgrade --data-dir $(DATA_DIR)
	$(PY) run.py --data-dir $(DATA_DIR) --config transaction.two.phase.commit.enable=true $(ARGS)

## test: install everything the tests need (the environment with the Kafka clients and
## PySpark, Debian's chromium for the browser test, kcat for the Kafka tests, Java and
## the SQLite JDBC driver for Spark, curl and jq for the HTTP docs' examples; an archive of
## Spark's classes the tests' JVMs share, built once; Apache Kafka's jars from Maven Central,
## resolved once, with Maven and a JDK (javac) for the tests' Java programs), then run the whole suite on parallel workers
## (a test file per worker, in collection order: tests marked slow first, tests/conftest.py;
## xdist would otherwise send the files with the most tests first and the long Spark jobs last)
## Bytecode caches are written whatever the environment says (PYTHONDONTWRITEBYTECODE; the
## __pycache__ folders are ignored by git): without them each xdist worker compiles and
## assertion-rewrites ~640 modules (17 s of CPU instead of 7.5 s), and every broker, CLI and
## child process the tests start compiles the project's modules again.
test: $(TEST_STAMP) $(CHROMIUM) $(KCAT) $(JAVA) $(JDBC_JAR) $(CURL) $(JQ) $(SPARK_ARCHIVE) $(KAFKA_JARS)
	env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

## check: the fast tier while editing (under a minute on 2 cores): every test that needs no
## child process, JVM, browser, network client or broker of its own -- storage, coordinator,
## codecs, state machines, models, the layering and the types (tests/conftest.py marks them
## `fast` from each module's imports); `make test` stays the whole suite, and what CI runs
check: $(TEST_STAMP)
	env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) -m fast

## soak-tests: the flake hunt -- the whole suite N times (`make soak-tests N=5`), as `make test`
## runs it, with every core kept busy beside it (Debian's stress-ng, installed here when it
## can be; else one spinning Python process per core), then every test that failed in any
## run, with how many runs it failed in (bench/soak_tests.py; record the summary in bench/RESULTS.md)
soak-tests: $(TEST_STAMP) $(CHROMIUM) $(KCAT) $(JAVA) $(JDBC_JAR) $(CURL) $(JQ) $(SPARK_ARCHIVE) $(KAFKA_JARS)
	-@$(MAKE) --no-print-directory $(STRESS_NG)
	env -u PYTHONDONTWRITEBYTECODE $(PY) bench/soak_tests.py --runs $(N) -- -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

$(SPARK_ARCHIVE): $(TEST_STAMP) $(JAVA) $(JDBC_JAR)
	$(PY) -m tests.spark.class_archive $@ || echo "no archive of Spark's classes: the tests' JVMs start without one"

$(KAFKA_JARS): tests/kafka/pom.xml $(TEST_STAMP) $(MVN) $(JAVAC)
	$(PY) -m tests.kafka.jars

# System packages the tests need, from Debian, installed only when missing: as root, or
# through sudo when not root. Debian's chromium drives the browser tests through the
# playwright package (`playwright install` is never run: it downloads a browser); kcat the
# Kafka tests; Spark runs on the JVM (Java 17+; Debian 12's default is 17) and reads the
# SQLite mirror through Debian's JDBC driver (the jar plus its JNI library); curl and jq
# run docs/http-api.md's examples as written (tests/test_docs_shell.py); Maven resolves Apache
# Kafka's jars and the JDK compiles the tests' Java programs against them (tests/kafka/).
define apt-install
	$(SUDO) apt-get update
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y $(1)
endef

$(CHROMIUM):
	$(call apt-install,chromium)
$(KCAT):
	$(call apt-install,kcat)
$(JAVA):
	$(call apt-install,default-jre-headless)
$(JDBC_JAR):
	$(call apt-install,libxerial-sqlite-jdbc-java)
$(CURL):
	$(call apt-install,curl)
$(JQ):
	$(call apt-install,jq)
$(MVN):
	$(call apt-install,maven)
$(JAVAC):
	$(call apt-install,default-jdk-headless)
$(STRESS_NG):
	$(call apt-install,stress-ng)

## pipeline: the end-to-end Spark pipeline on the broker `make run` serves (start it first,
## in another terminal): install what Spark needs, copy the topic pipeline-in to
## pipeline-out exactly once (1000 seeded records), then report on the transactions
pipeline: $(SPARK_STAMP) $(JAVA) $(JDBC_JAR)
	@$(PY) -m exactly.app.spark.broker_check $(BOOTSTRAP)
	$(PY) -m exactly.app.spark.copy_job --bootstrap $(BOOTSTRAP) --input pipeline-in --output pipeline-out \
		--checkpoint $(DATA_DIR)/spark-checkpoints/copy --seed 1000 --available-now
	$(PY) -m exactly.app.spark.report_job --data-dir $(DATA_DIR)

## bench: storage (append, fetch, restart), transaction, broker-lifecycle, embedded-producer, maintenance, group-lag, Kafka wire (beside a real Kafka) and Spark figures (see bench/RESULTS.md)
bench: $(TEST_STAMP) $(JAVA) $(JDBC_JAR) $(KAFKA_JARS)
	$(PY) bench/bench_storage.py
	$(PY) bench/bench_transactions.py
	$(PY) bench/bench_lifecycle.py
	$(PY) bench/bench_producer.py
	$(PY) bench/bench_maintenance.py
	$(PY) bench/bench_lag.py
	$(PY) bench/bench_kafka.py
	$(PY) bench/bench_spark.py

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .hypothesis .mypy_cache
