# Everything a developer or CI needs: `make run` and `make test` set up the venv first.
PYTHON ?= python3
VENV := .venv
VENV_PYTHON := $(VENV)/bin/python
# Re-install only when pyproject.toml changes; the stamp lives inside the venv it describes.
VENV_STAMP := $(VENV)/.installed-from-pyproject
PYTEST_ARGS ?=
# The real C++ RocketMQ client (PyPI rocketmq 0.4.4) for tests/interop, in a venv of its own:
# its top-level `rocketmq` package must not meet anything else.
ROCKETMQ_VENV := .venv-rocketmq
ROCKETMQ_STAMP := $(ROCKETMQ_VENV)/.installed-rocketmq-0.4.4
# The 0.4.4 C API has no transaction producer; the 0.5.0rc2 pre-release bundles a librocketmq that
# has one. Its `rocketmq` package would overwrite 0.4.4's, hence a third venv.
ROCKETMQ_TX_VENV := .venv-rocketmq-tx
ROCKETMQ_TX_STAMP := $(ROCKETMQ_TX_VENV)/.installed-rocketmq-client-python-0.5.0rc2
# The RocketMQ 5 gRPC client (PyPI rocketmq-python-client 5.1.2) for tests/grpc: its `rocketmq` package too.
ROCKETMQ5_VENV := .venv-rocketmq5
ROCKETMQ5_STAMP := $(ROCKETMQ5_VENV)/.installed-rocketmq-python-client-5.1.2

# The real references (Apache RocketMQ 4.9.x, Kafka, Spark's Kafka connector; poms under references/) and
# the Java scenario runner, fetched and compiled into a cache outside the repo. Nothing here is committed.
REFERENCES_DIR ?= $(HOME)/.cache/sparkmq/references
REFERENCE_NAMES := rocketmq rocketmq5 kafka spark-kafka rocketmq5-client
RUNNER_STAMP := $(REFERENCES_DIR)/runner/.compiled-from-sources
# The RocketMQ 5 Java client's scenarios (references/rocketmq5-runner) for tests/grpc.
RUNNER5_STAMP := $(REFERENCES_DIR)/rocketmq5-runner/.compiled-from-sources
# Delta Lake's jars for Spark (jars/delta/pom.xml): the main job, the table tests and bench/table_read_bench.py.
SPARK_JARS_DIR ?= $(HOME)/.cache/sparkmq/jars
DELTA_JARS := $(SPARK_JARS_DIR)/delta/.fetched-from-pom

rocketmq5-venv: $(ROCKETMQ5_STAMP)

.PHONY: rocketmq5-venv venv run test test-suite test-python native-check clean references delta-jars

venv: $(VENV_STAMP) $(ROCKETMQ_STAMP) $(ROCKETMQ_TX_STAMP) $(ROCKETMQ5_STAMP)
	@command -v java >/dev/null 2>&1 || { \
		echo "java not found: installing openjdk-17-jre-headless (Spark needs a JVM)"; \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y openjdk-17-jre-headless; \
	}
	@test -x /usr/bin/chromium || { \
		echo "chromium not found: installing Debian's chromium (tests/ops drive the dashboard in it)"; \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; \
	}

# setup.py builds the C extensions in place (docs/native.md): a changed C source (any folder setup.py builds from) reinstalls.
$(VENV_STAMP): pyproject.toml setup.py sparkmq_compiled_pyspark.py $(wildcard sparkmq/native/*.c sparkmq/native/*.h sparkmq/connector/*.c sparkmq/remoting/*.c)
	test -x $(VENV_PYTHON) || $(PYTHON) -m venv $(VENV)
	$(VENV_PYTHON) -m pip install --quiet -e '.[spark,test,grpc]'
	# The project's venv opts in to Spark workers importing pyspark's bytecode (sparkmq_compiled_pyspark.py).
	$(VENV)/bin/sparkmq pyspark-bytecode enable
	touch $@

$(ROCKETMQ_STAMP):
	test -x $(ROCKETMQ_VENV)/bin/python || $(PYTHON) -m venv $(ROCKETMQ_VENV)
	$(ROCKETMQ_VENV)/bin/python -m pip install --quiet rocketmq==0.4.4
	touch $@

$(ROCKETMQ_TX_STAMP):
	test -x $(ROCKETMQ_TX_VENV)/bin/python || $(PYTHON) -m venv $(ROCKETMQ_TX_VENV)
	$(ROCKETMQ_TX_VENV)/bin/python -m pip install --quiet --pre rocketmq-client-python==0.5.0rc2
	touch $@

$(ROCKETMQ5_STAMP):
	test -x $(ROCKETMQ5_VENV)/bin/python || $(PYTHON) -m venv $(ROCKETMQ5_VENV)
	$(ROCKETMQ5_VENV)/bin/python -m pip install --quiet rocketmq-python-client==5.1.2
	touch $@

run: venv delta-jars
	SPARKMQ_JARS_DIR=$(SPARK_JARS_DIR) $(VENV_PYTHON) -m jobs.main

# The whole suite: every test with the C extensions, then the C under sanitizers, then the Python references alone.
test: test-suite native-check test-python

# Two workers, each test file whole on one (its module fixtures start once); the 2-core CI
# machine's suite is mostly waiting on processes, sockets and JVMs.
XDIST := -n 2 --dist loadfile

test-suite: venv references delta-jars
	SPARKMQ_REFERENCES_DIR=$(REFERENCES_DIR) SPARKMQ_JARS_DIR=$(SPARK_JARS_DIR) $(VENV_PYTHON) -m pytest -q $(XDIST) \
		--ignore=tests/native $(PYTEST_ARGS)

references: $(REFERENCE_NAMES:%=$(REFERENCES_DIR)/%/.fetched-from-pom) $(RUNNER_STAMP) $(RUNNER5_STAMP)

delta-jars: $(DELTA_JARS)

$(REFERENCES_DIR)/%/.fetched-from-pom: references/%/pom.xml
	$(FETCH_POM)

$(SPARK_JARS_DIR)/%/.fetched-from-pom: jars/%/pom.xml
	$(FETCH_POM)

# The runtime jars of a pom (Spark's and pyspark's own jars excluded there) copied into a cache folder.
define FETCH_POM
@command -v mvn >/dev/null 2>&1 && command -v javac >/dev/null 2>&1 || { \
	echo "mvn or javac not found: installing Debian's maven and openjdk-17-jdk-headless"; \
	apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y maven openjdk-17-jdk-headless; \
}
rm -rf $(@D)
mvn -q -B -f $< dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(abspath $(@D))
touch $@
endef

$(RUNNER_STAMP): $(wildcard references/runner/*.java) $(REFERENCES_DIR)/rocketmq/.fetched-from-pom
	rm -rf $(@D)
	mkdir -p $(@D)/classes
	javac -nowarn -d $(@D)/classes -cp '$(REFERENCES_DIR)/rocketmq/*' $(filter %.java,$^)
	touch $@

$(RUNNER5_STAMP): $(wildcard references/rocketmq5-runner/*.java) $(REFERENCES_DIR)/rocketmq5-client/.fetched-from-pom
	rm -rf $(@D)
	mkdir -p $(@D)/classes
	javac -nowarn -d $(@D)/classes -cp '$(REFERENCES_DIR)/rocketmq5-client/*' $(filter %.java,$^)
	touch $@

# The parts of the suite the C extensions serve, with SPARKMQ_NATIVE=0: their Python references alone.
# The controller's elections and Raft (tests/broker/ha/test_controller_*) reach no switched path that the
# replication tests here do not (a send's wait for replicas is ha/acks.py's either way).
PYTHON_PATHS := tests/broker tests/client tests/store tests/remoting tests/message \
	$(patsubst %,tests/spark/test_%.py,source_read batch sink sink_flow source_data_loss arrow_columns local_reads \
	direct_pull planned_reads batch_body) --ignore-glob='tests/broker/ha/test_controller_*.py'
test-python: venv
	SPARKMQ_NATIVE=0 $(VENV_PYTHON) -m pytest -q $(XDIST) $(PYTEST_ARGS) $(PYTHON_PATHS)

# The C extensions setup.py lists, built with AddressSanitizer and UBSan into $(SANITIZED) (the in-place
# .so's stay as they are), then tests/native (parity with the Python references, damaged-input fuzzing)
# run on that build (there only: the same tests on the plain build would assert nothing more);
# tests/test_native_build.py (the build and the switch, RSS) is the ordinary suite's.
# A sanitizer report fails the target: UBSan's stops the process (on stderr, which pytest leaves alone),
# ASan's go to $(SANITIZED)/reports from any process the tests start. PYTHONSAFEPATH (python -P in every
# process, pytest's workers too) keeps the checkout's in-place build off sys.path.
SANITIZED := build/sanitized
SANITIZE := -fsanitize=address,undefined -fno-omit-frame-pointer
native-check: venv
	rm -rf $(SANITIZED)
	CFLAGS="$(SANITIZE) -g" LDFLAGS="$(SANITIZE)" $(VENV_PYTHON) setup.py -q build -j 2 \
		--build-base $(SANITIZED) --build-lib $(SANITIZED)/lib
	@libasan=$$(gcc -print-file-name=libasan.so) && test -f "$$libasan" \
		|| { echo "native-check: gcc's AddressSanitizer runtime (libasan.so) is missing"; exit 1; }; \
	mkdir -p $(SANITIZED)/reports; status=0; \
	export SPARKMQ_NATIVE=1 PYTHONPATH=$(SANITIZED)/lib PYTHONSAFEPATH=1 PYTHONMALLOC=malloc LD_PRELOAD=$$libasan \
		ASAN_OPTIONS=detect_leaks=0:log_path=$(CURDIR)/$(SANITIZED)/reports/asan \
		UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1; \
	$(VENV_PYTHON) -c "import sparkmq.native as n, sys; sys.exit(not n.sendlane.__file__.startswith('$(CURDIR)/$(SANITIZED)/'))" \
		|| { echo "native-check: the tests would not import the sanitized build"; exit 1; }; \
	$(VENV_PYTHON) -m pytest -q $(XDIST) --capture=sys --hypothesis-profile=native-check $(PYTEST_ARGS) \
		tests/native || status=$$?; \
	if [ -n "$$(ls $(SANITIZED)/reports)" ]; then cat $(SANITIZED)/reports/*; echo "native-check: sanitizer reports above"; exit 1; fi; \
	exit $$status

clean:
	rm -rf $(VENV) $(ROCKETMQ_VENV) $(ROCKETMQ_TX_VENV) build dist *.egg-info .hypothesis
