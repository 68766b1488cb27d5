# Two commands do all the set-up on a fresh machine:
#   make demo   build the bundled digits CNN, train it on real data, report memory, export it
#   make test   run the test suite
# Both create .venv and install what they need (set PYTHON to choose the interpreter).

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
OUT ?= out

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,example]'
	touch $@

install: $(VENV)/.installed

demo: $(VENV)/.installed
	$(BIN)/python examples/digits/make_data.py $(OUT)
	$(BIN)/tinytrain build examples/digits/digits_cnn.onnx --board host --out $(OUT)/digits \
		--lr 0.05 --momentum 0.9 --batch 16
	$(BIN)/tinytrain run $(OUT)/digits --data $(OUT)/digits_train.npz \
		--eval $(OUT)/digits_test.npz --epochs 15 --shuffle --seed 1 \
		--metrics $(OUT)/digits_metrics.jsonl --save $(OUT)/digits_state.npz
	$(BIN)/tinytrain export $(OUT)/digits --state $(OUT)/digits_state.npz \
		--out $(OUT)/digits_trained.onnx

test: $(VENV)/.installed
	$(BIN)/python -m pytest -n auto -q

lint: $(VENV)/.installed
	$(BIN)/ruff check tinytrain tests bench examples

bench: $(VENV)/.installed
	$(BIN)/python bench/compile_memory.py

clean:
	rm -rf $(OUT) build

.PHONY: install demo test lint bench clean
