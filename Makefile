# Set-up and entry points. Each target creates what it needs of the virtual environment
# on first use, so all of them work on a fresh clone:
#   make baseline   core packages only (about a minute), then the rule baseline: 84.60
#   make run        everything (llama.cpp built once, portably), then the CPU study
#   make mini-study everything, then the CPU mini-study: does the student beat its base?
#   make rehearsal  everything, then the paper config's whole workflow with stand-ins (CPU)
#   make test       everything, then the test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# The benchmark root: $METROBENCH_DATA, else the shared copy beside the checkout,
# else a clone of the pinned release under .data/ (fetched on first use).
DATA   ?= $(or $(METROBENCH_DATA),$(wildcard ../shared/metrollm-bench),.data/metrollm-bench)
# Extra CMake arguments for llama.cpp, e.g. on an RTX 5090 (docs/paper-study.md):
#   make install LLAMA_CMAKE_ARGS="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=120"
LLAMA_CMAKE_ARGS ?=
# Qwen3.5's gated-delta kernels (the train-cuda extra: flash-linear-attention, causal-conv1d),
# installed by `make install` where they build (scripts/install-train-cuda.sh; a package that
# does not build is one message, and training takes the PyTorch path for it): by default with
# the CUDA arguments above, TRAIN_CUDA=1 to ask for them anyway, TRAIN_CUDA=0 to leave them out.
TRAIN_CUDA ?= $(if $(findstring -DGGML_CUDA=ON,$(LLAMA_CMAKE_ARGS)),1,0)
# The locked Python stack: every package at the version CI and the rehearsal ran
# (constraints/stack.txt; `metrobench doctor` shows drift from it).
PIP    := $(BIN)/pip install --progress-bar off -c constraints/stack.txt
# The package's bytecode, written once as pip does for a regular install: an editable
# install leaves it to the first import, which writes nothing where PYTHONDONTWRITEBYTECODE
# is set, so every one of the workflow's processes would compile the package again. The study
# targets refresh it first (a second or so after a pull; nothing when it is current).
BYTECODE = $(BIN)/python -m compileall -q metrobench

SYSTEMS := marta doha bart taipei cta beijing

.PHONY: install install-core builds baseline run demo mini-study rehearsal test doctor bench clean

# Core: the harness, scoring, statistics and tables (no model, no compiler).
$(VENV)/.core: pyproject.toml constraints/stack.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --progress-bar off --upgrade pip
	$(PIP) -e .
	$(BYTECODE)
	touch $@

# llama.cpp, compiled once for both the Python bindings and llama-server (about 10 min
# on 2 cores; the compiler's progress is shown), then the model, training and test packages.
$(VENV)/.full: $(VENV)/.core scripts/install-llama-cpp.sh
	LLAMA_CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" scripts/install-llama-cpp.sh $(VENV)
	$(PIP) -e ".[test]"
	$(BYTECODE)
	touch $@

# The gated-delta kernels: the script writes the stamp only when every package installed.
$(VENV)/.train-cuda: $(VENV)/.full scripts/install-train-cuda.sh
	scripts/install-train-cuda.sh $(VENV)

install-core: $(VENV)/.core
install: $(VENV)/.full $(if $(filter 1,$(TRAIN_CUDA)),$(VENV)/.train-cuda)

# The llama.cpp builds a study config serves its rows on (serving.build: the paper config's
# b8642 and b10398), each built from its tag with LLAMA_CMAKE_ARGS into the folder serving.build
# looks in (metrobench/agents/llama_builds.py, `metrobench builds`). The source: LLAMA_CPP_SOURCE=PATH, a llama.cpp
# git checkout holding the tags, else a shallow clone of the tag from github.com/ggml-org/llama.cpp
# (LLAMA_CPP_REPO); LLAMA_CPP_SOURCE=vendored installs the vendored tree under each name instead.
# Another config: make builds CONFIG="config/config.yaml my.yaml"; FORCE=1 builds installed ones
# again. On an RTX 5090:
#   make builds LLAMA_CMAKE_ARGS="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=120"
builds: $(VENV)/.full
	LLAMA_CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/metrobench builds --venv $(VENV) \
	  $(foreach c,$(or $(CONFIG),config/config.yaml),--config $(c)) $(if $(FORCE),--force)

.data/metrollm-bench: | $(VENV)/.core
	$(BIN)/metrobench fetch-data --dest $@

# A first look in about a minute: verify the data, partition it, run the rule baseline on
# all 955 cases, score it (judge off) and print its held-out headline, the paper's 84.60
# Tier 1. Runs and scores go to results/quickstart/, apart from the workflow's results.
baseline: $(VENV)/.core | $(DATA)
	$(BYTECODE)
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
run: $(VENV)/.full | $(DATA)
	$(BYTECODE)
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/snakemake --configfile config/demo.yaml --cores 2 \
	  --config data='{path: $(abspath $(DATA)), commit: 28f7eacbe0244cdaab0ac70afbcfff9be4dcbc70}'

demo: run

# The CPU mini-study (config/mini-study.yaml): SmolLM2-135M-Instruct against its student
# distilled from the rule agent's traces, 36 held-out cases each, Tables 4, 9, 10 and the
# category matrix under results/ (about an hour on 2 cores; docs/mini-study.md).
mini-study: $(VENV)/.full | $(DATA)
	$(BYTECODE)
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/snakemake --configfile config/mini-study.yaml --cores 2 \
	  --config data='{path: $(abspath $(DATA)), commit: 28f7eacbe0244cdaab0ac70afbcfff9be4dcbc70}'

# The dress rehearsal (metrobench/rehearsal.py, config/rehearsal.yaml): the paper config's
# whole workflow - every table, figure and the report - on the CPU, with one tiny random
# Qwen3.5 for every model and base (fetched by name through the lock from a local hub
# stand-in), local stand-ins for the hosted APIs and the judge, one held-out case per system
# and two training steps per student. In results-rehearsal/, never results/; prints the time
# per phase and per stage.
rehearsal: $(VENV)/.full | $(DATA)
	$(BYTECODE)
	$(BIN)/python -m metrobench.rehearsal --data $(abspath $(DATA)) --workdir results-rehearsal --cores 2

# Chromium, slurm-wlm and munge for the browser and SLURM tests: installed when missing and
# possible (root with apt-get), else one line says how, and those tests skip (as in .ci/run).
test: $(VENV)/.full | $(DATA)
	scripts/install-test-deps.sh
	METROBENCH_DATA=$(abspath $(DATA)) $(BIN)/python -m pytest -q

doctor: $(VENV)/.core | $(DATA)
	$(BIN)/metrobench doctor --data $(DATA) --config config/demo.yaml

bench: $(VENV)/.full | $(DATA)
	METROBENCH_DATA=$(abspath $(DATA)) $(BIN)/python benchmarks/tools_throughput.py
	METROBENCH_DATA=$(abspath $(DATA)) $(BIN)/python benchmarks/baseline_e2e.py
	METROBENCH_DATA=$(abspath $(DATA)) $(BIN)/python benchmarks/stats.py

clean:
	rm -rf $(VENV) results results-rehearsal .pytest_cache
