# Everything a developer or CI needs: `make run` and `make test` set up the venv first.
PYTHON ?= python3
VENV := .venv
VENV_PYTHON := $(VENV)/bin/python
# Re-install only when pyproject.toml changes; the stamp lives inside the venv it describes.
VENV_STAMP := $(VENV)/.installed-from-pyproject
PYTEST_ARGS ?=

.PHONY: venv run test clean

venv: $(VENV_STAMP)
	@command -v java >/dev/null 2>&1 || { \
		echo "java not found: installing openjdk-17-jre-headless (Spark needs a JVM)"; \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y openjdk-17-jre-headless; \
	}

$(VENV_STAMP): pyproject.toml
	test -x $(VENV_PYTHON) || $(PYTHON) -m venv $(VENV)
	$(VENV_PYTHON) -m pip install --quiet -e '.[test]'
	touch $@

run: venv
	$(VENV_PYTHON) -m jobs.main

test: venv
	$(VENV_PYTHON) -m pytest -q $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build dist *.egg-info .hypothesis
