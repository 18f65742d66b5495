# Set-up and entry points. `make run` and `make test` each create the virtual
# environment on first use, so both work on a fresh clone.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# The benchmark root: $METROBENCH_DATA, else the shared copy beside the checkout,
# else a clone of the pinned release under .data/ (fetched on first use).
DATA   ?= $(or $(METROBENCH_DATA),$(wildcard ../shared/metrollm-bench),.data/metrollm-bench)

SYSTEMS := marta doha bart taipei cta beijing

.PHONY: install run demo test bench clean

$(BIN)/metrobench: pyproject.toml constraints/ci.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints/ci.txt -e ".[test]"
	touch $@

install: $(BIN)/metrobench

.data/metrollm-bench: | $(BIN)/metrobench
	$(BIN)/metrobench fetch-data --dest $@

# Verify the data, partition it, run the rule baseline on all 955 cases, score it
# (judge off) and print its held-out headline: the paper's 84.60 Tier 1. Runs and scores
# go to results/quickstart/, apart from the workflow's results/runs and results/scores
# (the demo scores a sample of cases; sharing the folder would mix the two).
run: $(BIN)/metrobench | $(DATA)
	$(BIN)/metrobench verify-data --data $(DATA)
	$(BIN)/metrobench partition --data $(DATA) --out results/partition.json
	for s in $(SYSTEMS); do \
	  $(BIN)/metrobench rule-agent --data $(DATA) --system $$s --split results/partition.json \
	    --out results/quickstart/runs/rule-agent/$$s.jsonl || exit 1; done
	$(BIN)/metrobench score --data $(DATA) --split results/partition.json --out results/quickstart/scores \
	  $(foreach s,$(SYSTEMS),--run results/quickstart/runs/rule-agent/$(s).jsonl)
	$(BIN)/metrobench summary --scores results/quickstart/scores --partition holdout

# The whole study on the CPU (config/demo.yaml): runs, teacher, two SmolLM2 students,
# tables and figures under results/.
demo: $(BIN)/metrobench | $(DATA)
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/snakemake --configfile config/demo.yaml --cores 2 \
	  --config data='{path: $(abspath $(DATA)), commit: 28f7eacbe0244cdaab0ac70afbcfff9be4dcbc70}'

test: $(BIN)/metrobench | $(DATA)
	METROBENCH_DATA=$(abspath $(DATA)) $(BIN)/python -m pytest -q

bench: $(BIN)/metrobench | $(DATA)
	METROBENCH_DATA=$(abspath $(DATA)) $(BIN)/python benchmarks/tools_throughput.py
	METROBENCH_DATA=$(abspath $(DATA)) $(BIN)/python benchmarks/baseline_e2e.py
	METROBENCH_DATA=$(abspath $(DATA)) $(BIN)/python benchmarks/stats.py

clean:
	rm -rf $(VENV) results .pytest_cache
