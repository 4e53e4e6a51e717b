# Every target is a thin wrapper over scripts/*, which work from any directory.
.DEFAULT_GOAL := help
SHELL := /bin/bash
ARGS ?=
NAME ?=

.PHONY: help venv demo test lint docs docs-serve services-up services-down services-status bench clean-state

help: ## list the targets
	@echo "harness-run make targets:"
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'
	@echo "pytest arguments: make test ARGS='-k infra'"

venv: ## create/refresh .venv (harness-run editable + test,server,sandbox extras)
	scripts/bootstrap

demo: ## run the offline demo (harness-run demo)
	scripts/demo

test: ## the full test run: system packages, venv, dockerd + registry, base image, pytest
	scripts/test $(ARGS)

lint: ## ruff check, ruff format --check, pyright
	scripts/lint

docs: ## build the documentation site into site/ (mkdocs build --strict)
	scripts/docs build

docs-serve: ## preview the documentation on http://127.0.0.1:8000 (mkdocs serve)
	scripts/docs serve

services-up: ## start our dockerd + local registry (then: eval "$(scripts/services env)")
	scripts/services start
	@scripts/services env

services-down: ## stop them (by PID)
	scripts/services stop

services-status: ## are they running?
	scripts/services status

bench: ## run one benchmark: make bench NAME=turn_cost ARGS='--variant phases' (no NAME: list them)
	scripts/bench $(NAME) $(ARGS)

clean-state: ## stop the services and delete their state (.ci-state, /tmp/hr-ci-*)
	scripts/services clean
