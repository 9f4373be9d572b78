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

.PHONY: venv run test clean

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

test: venv
	$(VENV_PYTHON) -m pytest -q $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) $(ROCKETMQ_VENV) $(ROCKETMQ_TX_VENV) build dist *.egg-info .hypothesis
