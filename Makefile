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

# The real references (Apache RocketMQ 4.9.x, Kafka, Spark's Kafka connector; poms under references/) and
# the Java scenario runner, fetched and compiled into a cache outside the repo. Nothing here is committed.
REFERENCES_DIR ?= $(HOME)/.cache/sparkmq/references
REFERENCE_NAMES := rocketmq kafka spark-kafka
RUNNER_STAMP := $(REFERENCES_DIR)/runner/.compiled-from-sources

.PHONY: venv run test clean references

venv: $(VENV_STAMP) $(ROCKETMQ_STAMP) $(ROCKETMQ_TX_STAMP)
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
	$(VENV_PYTHON) -m pip install --quiet -e '.[spark,test]'
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

run: venv
	$(VENV_PYTHON) -m jobs.main

test: venv references
	SPARKMQ_REFERENCES_DIR=$(REFERENCES_DIR) $(VENV_PYTHON) -m pytest -q $(PYTEST_ARGS)

references: $(REFERENCE_NAMES:%=$(REFERENCES_DIR)/%/.fetched-from-pom) $(RUNNER_STAMP)

$(REFERENCES_DIR)/%/.fetched-from-pom: references/%/pom.xml
	@command -v mvn >/dev/null 2>&1 && command -v javac >/dev/null 2>&1 || { \
		echo "mvn or javac not found: installing Debian's maven and openjdk-17-jdk-headless"; \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y maven openjdk-17-jdk-headless; \
	}
	rm -rf $(@D)
	mvn -q -B -f $< dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(abspath $(@D))
	touch $@

$(RUNNER_STAMP): $(wildcard references/runner/*.java) $(REFERENCES_DIR)/rocketmq/.fetched-from-pom
	rm -rf $(@D)
	mkdir -p $(@D)/classes
	javac -nowarn -d $(@D)/classes -cp '$(REFERENCES_DIR)/rocketmq/*' $(filter %.java,$^)
	touch $@

clean:
	rm -rf $(VENV) $(ROCKETMQ_VENV) $(ROCKETMQ_TX_VENV) build dist *.egg-info .hypothesis
