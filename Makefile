# Set-up and entry points. `make run` and `make test` each create the virtual
# environment on first use, so both work on a fresh clone.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# The benchmark root: $METROBENCH_DATA, else the shared copy beside the checkout,
# else a clone of the pinned release under .data/ (fetched on first use).
DATA   ?= $(or $(METROBENCH_DATA),$(wildcard ../shared/metrollm-bench),.data/metrollm-bench)

.PHONY: install run test bench clean

$(BIN)/metrobench: pyproject.toml constraints/ci.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints/ci.txt -e ".[test]"
	touch $@

install: $(BIN)/metrobench

.data/metrollm-bench: | $(BIN)/metrobench
	$(BIN)/metrobench fetch-data --dest $@

run: $(BIN)/metrobench | $(DATA)
	$(BIN)/metrobench verify-data --data $(DATA)
	$(BIN)/metrobench partition --data $(DATA) --out results/partition.json

test: $(BIN)/metrobench | $(DATA)
	METROBENCH_DATA=$(abspath $(DATA)) $(BIN)/python -m pytest -q

bench: $(BIN)/metrobench | $(DATA)
	METROBENCH_DATA=$(abspath $(DATA)) $(BIN)/python benchmarks/tools_throughput.py

clean:
	rm -rf $(VENV) results .pytest_cache
