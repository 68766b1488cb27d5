# Two commands do all the set-up on a fresh machine:
#   make demo   build the bundled digits CNN for the STM32F746, train it on its QEMU twin over
#               the serial link, report memory and accuracy, export the trained model
#   make test   run the test suite
# Both create .venv and install what they need (set PYTHON to choose the interpreter); both
# install the ARM toolchain and QEMU with apt-get when they are missing.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
OUT ?= out

# The demo needs only the package and scikit-learn (for the digits data): a ~360 MB
# virtualenv. The tests add their oracles (PyTorch, onnxruntime, LiteRT: over 1 GB).
$(VENV)/.installed-demo: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[example]'
	touch $@

$(VENV)/.installed-test: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,example]'
	touch $@ $(VENV)/.installed-demo $(VENV)/.installed-fleet

install: $(VENV)/.installed-test
demo-env: $(VENV)/.installed-demo

# The Cortex-M cross compiler, newlib and QEMU (Debian/Ubuntu package names).
ARM_PACKAGES = gcc-arm-none-eabi libnewlib-arm-none-eabi libstdc++-arm-none-eabi-newlib qemu-system-arm
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
toolchain:
	@if ! command -v arm-none-eabi-gcc >/dev/null || ! command -v qemu-system-arm >/dev/null \
		|| [ ! -e /usr/lib/arm-none-eabi/newlib ] || [ ! -e /usr/include/newlib/c++ ]; then \
		echo "installing $(ARM_PACKAGES)"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install \
			-y -qq --no-install-recommends $(ARM_PACKAGES) >/dev/null; fi

BOARD ?= stm32f746
EPOCHS ?= 4

demo: $(VENV)/.installed-demo toolchain
	$(BIN)/python examples/digits/make_data.py $(OUT)
	$(BIN)/tinytrain build examples/digits/digits_cnn.onnx --board $(BOARD) \
		--out $(OUT)/digits --lr 0.05 --momentum 0.9 --batch 16
	$(BIN)/tinytrain run $(OUT)/digits --qemu --data $(OUT)/digits_train.npz \
		--eval $(OUT)/digits_test.npz --epochs $(EPOCHS) --shuffle --seed 1 \
		--metrics $(OUT)/digits_metrics.jsonl --save $(OUT)/digits_state.npz --checkpoint
	$(BIN)/tinytrain export $(OUT)/digits --state $(OUT)/digits_state.npz \
		--out $(OUT)/digits_trained.onnx

# The same on this machine's CPU, no toolchain needed: 15 epochs in about 10 s.
demo-host: $(VENV)/.installed-demo
	$(BIN)/python examples/digits/make_data.py $(OUT)
	$(BIN)/tinytrain build examples/digits/digits_cnn.onnx --board host --out $(OUT)/digits-host \
		--lr 0.05 --momentum 0.9 --batch 16
	$(BIN)/tinytrain run $(OUT)/digits-host --data $(OUT)/digits_train.npz \
		--eval $(OUT)/digits_test.npz --epochs 15 --shuffle --seed 1

# A fleet: 100 simulated devices of three SRAM budgets (each plan chosen by --update auto)
# federated by Flower for 20 rounds on label-skewed turned digits, against centralised
# training and each device alone (bench/fleet.py; ~6 minutes on 2 cores): the classes aligned
# (built with --receive the 40 KB class's plan, one average of every tensor), SGD devices with
# SCAFFOLD's correction at lr 0.15 x 0.93 a round, FedAdam on the server, centralised SGD at
# the reference setting.
FLEET_DEMO = --max-sram 9,12.9,40 --share all --receive tte:n_bias=3,idx=2,ratio=0.5 \
	--correction scaffold --local-epochs 5 --lr 0.15 --lr-decay 0.93 --momentum 0 \
	--server-optimizer adam --server-lr 0.4 --server-beta1 0.5 --server-lr-decay 0.97 \
	--central-lr 0.02 --central-momentum 0.9
$(VENV)/.installed-fleet: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[fleet,example]'
	touch $@ $(VENV)/.installed-demo

fleet-demo: $(VENV)/.installed-fleet
	$(BIN)/python bench/fleet.py $(FLEET_DEMO)

# The full suite (what CI runs), and the fast tier: everything not marked `slow` (twin runs, big
# networks, the fleet, packaging, sanitizers), which still checks every op's numerics, the
# planner, the code generator and the CLI's errors. bench/ci_time.sh times both.
PYTEST_ARGS ?=
test: $(VENV)/.installed-test toolchain
	$(BIN)/python -m pytest -n auto -q $(PYTEST_ARGS)

test-fast: $(VENV)/.installed-test toolchain
	$(BIN)/python -m pytest -n auto -q -m "not slow" $(PYTEST_ARGS)

lint: $(VENV)/.installed-test
	$(BIN)/ruff check tinytrain tests bench examples docs/hooks.py

bench: $(VENV)/.installed-test toolchain
	$(BIN)/python bench/compile_memory.py
	$(BIN)/python bench/qemu_instructions.py

# examples/timeseries: a Conv1D net, a GRU and an LSTM adapting to a turned smartwatch on the
# STM32F746's twin; memory on both boards and instructions per sample (~3 minutes).
timeseries-bench: $(VENV)/.installed-test toolchain
	$(BIN)/python bench/timeseries.py

# The README's memory plot, docs/memory.png: the demo's build, drawn with the `plot` extra.
memory-plot: $(VENV)/.installed-demo toolchain
	$(BIN)/python -m pip install -q -e '.[plot]'
	$(BIN)/python bench/plot_memory.py --out docs/memory.png

# The auto planner's frontier for the untrained demo model on the demo's digits,
# docs/frontier.png (`tinytrain plan --plot`; nothing is linked, so no toolchain; ~2 minutes).
frontier-plot: $(VENV)/.installed-demo
	$(BIN)/python -m pip install -q -e '.[plot]'
	$(BIN)/python bench/plot_frontier.py --out docs/frontier.png

# fleet-demo's mixed-budget fleet, its accuracy after every round, docs/fleet-rounds.png.
fleet-plot: $(VENV)/.installed-fleet
	$(BIN)/python -m pip install -q -e '.[plot]'
	$(BIN)/python bench/fleet.py $(FLEET_DEMO) --plot docs/fleet-rounds.png

# Every picture of the docs, each from the command that makes it.
pictures: memory-plot frontier-plot fleet-plot

# The documentation site (mkdocs.yml, docs/) into site/; --strict fails on a broken link or
# anchor, and docs/hooks.py generates the command-line, ops and boards references from the code.
$(VENV)/.installed-docs: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[docs]'
	touch $@

docs: $(VENV)/.installed-docs
	$(BIN)/mkdocs build --strict --site-dir site

clean:
	rm -rf $(OUT) build

.PHONY: install demo-env toolchain demo demo-host fleet-demo test test-fast lint bench memory-plot \
	frontier-plot fleet-plot pictures docs clean timeseries-bench
