# The two commands of the README's quick start.
.PHONY: demo test setup

setup:
	bash scripts/setup.sh

# The app on the bundled CPU demo profile (headless when there is no terminal).
demo: setup
	.venv/bin/fttui --profile tiny-lora

# The whole test suite.
test: setup
	bash scripts/test.sh
