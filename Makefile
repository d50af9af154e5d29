# One entry point per job. Every target sets up what it needs first (idempotent).
PY      ?= .venv/bin/python
PYTEST  ?= $(PY) -m pytest

.PHONY: setup test test-unit test-integration test-nova chart-check e2e bench bench-reconcile bench-scale bench-nova bench-tracker demo release lock clean

setup:            ## project venv with the package and its test dependencies
	bash hack/setup.sh

test:             ## everything CI runs (hack/test.sh sets up the venv beside the peers' installs)
	bash hack/test.sh

test-unit: setup
	$(PYTEST) tests/unit -q

test-integration: setup
	$(PYTEST) tests/integration -q

test-nova: setup  ## the real-Nova tier alone, on three workers as CI runs it
	bash hack/test.sh tests/nova

chart-check: setup
	bash hack/chart-check.sh

e2e: setup        ## kind end-to-end (needs a Docker engine and kind)
	bash hack/kind-e2e.sh

bench: setup      ## pure benchmarks: ring vs tooz, memory at 100k nodes, openstacksdk vs raw reads
	$(PY) bench/ring_bench.py
	$(PY) bench/memory_bench.py
	$(PY) bench/sdk_cost_bench.py

bench-reconcile: setup  ## 10,000 nodes against real Ironic, vs a tooz ring (~8 min)
	$(PY) bench/reconcile_bench.py

bench-scale: setup  ## 100,000 nodes x 200 members against real Ironic: steady polls, failure, adoption, RSS (~15 min)
	$(PY) bench/scale_bench.py

bench-nova: setup  ## on real Nova: one nova-compute, Nova's hash ring, this operator; same 1,000 nodes (~1.5 h)
	$(PY) bench/nova_bench.py $(ARGS)

bench-tracker: setup  ## on real Nova: what a member's update_resources_interval costs Placement and Nova, at two intervals (~20 min)
	$(PY) bench/tracker_cost_bench.py $(ARGS)

demo: setup
	bash hack/demo.sh

release: setup    ## every artefact of pyproject's version into dist/ (docs/releasing.md)
	bash hack/release.sh

lock: setup       ## re-resolve requirements/image.lock (the image's hashed dependencies)
	bash hack/lock.sh

clean:
	rm -rf .venv .tools .run
