# Two commands set everything up on a fresh machine: `make demo` and `make test`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
OUT := out

.PHONY: precompile bench-idle bench-starvation bench-preemption bench-burst bench-startup bench-startup-burst bench-restart setup demo images test verify format test-fast test-unit test-integration typecheck protos check-protos clean bench-replay tools bench bench-quick chaos chaos-sentinel soak peer-scheduler bench-k8s bench-k8s-combined bench-k8s-large e2e-compose e2e-image

$(STAMP): pyproject.toml
	@scripts/ensure-system-deps.sh
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@# matplotlib builds its font cache (running fc-list) the first time a chart is drawn: built here, so the
	@# report tests of `make test-fast`, whose layer starts no process, pass on a fresh machine too.
	@MPLBACKEND=Agg $(PY) -c "import matplotlib.font_manager" 2>/dev/null || true
	@touch $(STAMP)

setup: $(STAMP)

## Phalanx's modules compiled to bytecode, as the container image has them (an editable install under
## PYTHONDONTWRITEBYTECODE=1 would otherwise compile them at every service start, ~0.1 CPU s each): the
## start-up benchmarks measure the services as deployed. The same for the code their dataclasses generate
## (phalanx.dataclass_code).
precompile: $(STAMP)
	@$(PY) -m compileall -q -j 0 libs services
	@$(PY) -m phalanx.precompile >/dev/null

## The main job: seed 003's deadlock pod by pod, and the same workload as gangs, side by side.
demo: $(STAMP)
	@mkdir -p $(OUT)
	@echo "== pod by pod (kube-scheduler alone): two 5-GPU jobs on 8 GPUs =="
	$(VENV)/bin/phalanx simulate -f examples/demo-two-jobs.yaml --mode pod --until 1h -o $(OUT)/demo-pod.json
	@echo "== as gangs (Phalanx) =="
	$(VENV)/bin/phalanx simulate -f examples/demo-two-jobs.yaml --mode gang --until 1h -o $(OUT)/demo-gang.json
	@echo
	$(VENV)/bin/phalanx compare $(OUT)/demo-pod.json $(OUT)/demo-gang.json --labels "pod by pod" "gang"

## Real etcd + kube-apiserver, Kubeflow's training-operator and kwok (the job-controller tests), helm and (when
## docker has no compose plugin) Docker Compose for the API-server, chart and compose tests, built from Go
## modules into a cache outside the work tree (minutes on a new machine, instant afterwards). Without Go,
## make test stops here.
tools:
	@command -v go >/dev/null 2>&1 || { echo "Go is missing: it builds kube-apiserver, etcd, training-operator, kwok, helm and Compose for the tests (https://go.dev/dl/)" >&2; exit 1; }
	@bash hack/build-k8s-binaries.sh >/dev/null && bash hack/build-job-controllers.sh >/dev/null \
	  && bash hack/build-helm.sh >/dev/null \
	  && { docker compose version >/dev/null 2>&1 || bash hack/build-compose.sh >/dev/null; }

## podman, runc, debootstrap (scripts/ensure-system-deps.sh --containers) and the Debian 12 base image
## (hack/build-base-image.sh, from Debian's packages) for the image tests in tests/container: about 2 minutes
## on a new machine, instant afterwards.
images: $(STAMP)
	@scripts/ensure-system-deps.sh --containers
	@hack/build-base-image.sh >/dev/null

## Everything but the compose stack (make e2e-compose): the image tests run here (PHALANX_IMAGE_TESTS=1) and
## fail, rather than skip, when podman cannot run them.
test: $(STAMP) tools images
	PHALANX_IMAGE_TESTS=1 PHALANX_NO_SKIPS=1 $(PY) -m pytest -q

## Formats the Python code as `make verify` checks it.
format: $(STAMP)
	$(VENV)/bin/ruff format libs services tests

## Static checks (CI runs them before the tests): lint (ruff: unused and undefined names, import order),
## formatting (ruff format; `make format` applies it), the import contracts in pyproject.toml (import-linter),
## types (mypy), generated protobuf code up to date, the Helm chart (helm lint).
verify: $(STAMP) tools
	$(VENV)/bin/ruff check libs services tests
	$(VENV)/bin/ruff format --check libs services tests
	$(VENV)/bin/lint-imports
	$(PY) -m mypy
	PYTHON=$(PY) scripts/check-protos.sh
	"$$(bash hack/build-helm.sh 2>/dev/null | tail -1)" lint --strict deploy/helm/phalanx

## The tests that start no process and need no redis-server: tests/unit minus those using the redis_server
## fixture or marked starts_processes, and the deploy files' plugin names; ~40 CPU s. tests/fast_layer.py switches
## process creation off for the run, so a test that starts one fails here instead of slowing the layer down.
## `make test` still runs everything.
test-fast: $(STAMP)
	$(PY) -m pytest -q --fast tests/unit tests/deploy/test_plugin_names.py

test-unit: $(STAMP)
	$(PY) -m pytest -q tests/unit

test-integration: $(STAMP)
	$(PY) -m pytest -q tests/integration

## Static type check of libs/phalanx and the three services (settings and files: [tool.mypy] in pyproject.toml).
typecheck: $(STAMP)
	$(PY) -m mypy

## scheduler_perf-style benchmark through the three services and Redis (about 12 minutes: every workload
## BENCH_REPEAT times, the median run kept); results kept in bench/.
BENCH_REPEAT ?= 3
bench: $(STAMP)
	$(VENV)/bin/phalanx bench --repeat $(BENCH_REPEAT) --output bench/results.json --table bench/results.txt

## A short run of small shapes (CI smoke, under a minute).
bench-quick: $(STAMP)
	@mkdir -p $(OUT)
	$(VENV)/bin/phalanx bench --quick --output $(OUT)/bench-quick.json

## Regenerates the committed protobuf code; check-protos fails if it is stale.
protos: $(STAMP)
	PYTHON=$(PY) scripts/gen-protos.sh

check-protos: $(STAMP)
	PYTHON=$(PY) scripts/check-protos.sh

clean:
	rm -rf $(OUT) .pytest_cache

## Replay the openb GPU trace through the services (speed, linear growth), and the FGD experiment on every
## openb variant, four policies, ten seeds (about 15 minutes on 2 cores); results in bench/, plot in docs/.
bench-replay: $(STAMP)
	@mkdir -p bench
	$(VENV)/bin/phalanx replay-bench --output bench/replay.json --plot docs/images/fgd-policies.png | tee bench/replay.txt

## Large gangs behind a stream of small ones: the starvation bound off and on (bench/starvation.{json,txt}).
bench-starvation: $(STAMP)
	$(VENV)/bin/phalanx starvation-bench --out bench

## Launch to first binding of Phalanx as deployed (Redis with a password, the three services with mutual TLS and
## leader election) on a fresh kube-apiserver with 50 nodes and 100 gangs of 3 created first (needs `make
## tools`): STARTUP_RUNS runs, medians, the steps of the start from the services' logs, CPU until the first
## binding and the machine's load; about 15 s a run. bench/startup.txt and .json keep the label "before" (the
## commit before issue 25's start-up work) beside this one.
STARTUP_RUNS ?= 5
STARTUP_LABEL ?= after
bench-startup: $(STAMP) tools precompile
	$(PY) -m phalanx.bench.startup --runs $(STARTUP_RUNS) --label "$(STARTUP_LABEL)" --out bench

## The same launch on bench-k8s's gang burst (500 nodes, 1,000 PodGroups of 3 created first: issue 25's measure of
## the first binding), the two layouts alternating run by run, STARTUP_RUNS each; about 30 s a run.
## bench/startup-burst.txt and .json, labels "services" and "combined".
bench-startup-burst: $(STAMP) tools precompile
	for i in $$(seq $(STARTUP_RUNS)); do again=$$([ $$i = 1 ] || echo --append); \
	  for layout in services combined; do \
	    $(PY) -m phalanx.bench.startup --shape burst --runs 1 --layout $$layout --label $$layout $$again --out bench \
	      || exit 1; \
	  done; \
	done

## CPU of each scheduler's processes with nothing to schedule (Phalanx as deployed, and kube-scheduler +
## Coscheduling: needs `make tools peer-scheduler`), 500 nodes, 30 s sampled after one gang bound
## (bench/idle.{json,txt}); about 2 minutes.
IDLE_LABEL ?= now
bench-idle: $(STAMP) tools peer-scheduler precompile
	$(PY) -m phalanx.bench.idle --label "$(IDLE_LABEL)" --out bench

## Phalanx restarted on a fresh kube-apiserver holding 5,000 nodes and 10,000 PodGroups of 3 = 30,000 bound pods
## (issue 25: scheduling again within 10 s): the whole stack launched, then the scheduler alone SIGKILLed and
## restarted, each to a new gang bound; peak RSS and CPU of each process; with kube-scheduler + Coscheduling's
## memory on the same cluster (RESTART_FLAGS=--peer needs `make peer-scheduler`). About 5 minutes of setup.
RESTART_LABEL ?= now
RESTART_FLAGS ?= --peer
bench-restart: $(STAMP) tools precompile
	$(PY) -m phalanx.bench.restart --label "$(RESTART_LABEL)" $(RESTART_FLAGS) --out bench

## NVIDIA knavigator's all-or-nothing gang burst (examples/knavigator-gang-burst.yaml) through the services:
## makespan against its ideal (270 s), gangs started out of turn; under 10 s; bench/burst.txt and .json.
bench-burst: $(STAMP)
	$(PY) -m phalanx.bench.burst --out bench

## Gang preemption on the openb trace with priority classes (multi-GPU gangs high), off and on, through the
## services (about 4 minutes); results in bench/preemption.txt and .json.
bench-preemption: $(STAMP)
	$(VENV)/bin/phalanx preemption-bench --fraction 0.5 --nodes-fraction 0.1 --arrival rate:1 \
		--gang-rule window:300 --wait 3600 --out bench

## Fault injection against a real kube-apiserver (needs `make tools`): Redis and the three services as
## processes, one SIGKILLed (or exiting at a kill point) per trial under ~700 pods, invariants checked.
## 25 trials per process target, 10 with Redis emptied, 5 per kill point, 5 fault-free: 130 trials of
## 30 gangs (~200 pods) each, about 40 minutes on 2 cores (CHAOS_GANGS=100 for ~700 pods); results in bench/.
CHAOS_TRIALS ?= 25
CHAOS_POINT_TRIALS ?= 5
CHAOS_GANGS ?= 30
CHAOS_SEED ?= 1
chaos: $(STAMP) tools
	$(VENV)/bin/phalanx chaos --seed $(CHAOS_SEED) --gangs $(CHAOS_GANGS) --output bench/chaos.json --targets \
	  queue:$(CHAOS_TRIALS) scheduler:$(CHAOS_TRIALS) binder:$(CHAOS_TRIALS) redis:$(CHAOS_TRIALS) \
	  redis-empty:10 binder.between_pods:$(CHAOS_POINT_TRIALS) binder.before_commit:$(CHAOS_POINT_TRIALS) \
	  scheduler.after_commit:$(CHAOS_POINT_TRIALS) none:5

## Redis as a primary, 2 replicas and 3 Sentinels: the primary SIGKILLed, frozen (SIGSTOP, a partition)
## and SIGKILLed with the scheduler leader, at random moments of the gang workload; the time from the kill
## to the next binding, and the WAIT's cost per bind; results in bench/sentinel-failover.{json,txt}.
SENTINEL_TRIALS ?= 30
SENTINEL_LEADER_TRIALS ?= 10
chaos-sentinel: $(STAMP) tools
	$(VENV)/bin/phalanx chaos --seed $(CHAOS_SEED) --gangs $(CHAOS_GANGS) --output bench/sentinel-failover.json \
	  --targets sentinel-primary:$(SENTINEL_TRIALS) sentinel-freeze:$(SENTINEL_TRIALS) \
	  sentinel-primary+scheduler:$(SENTINEL_LEADER_TRIALS)

## No kills: gangs arriving and ending for SOAK_DURATION; pending gangs that fit (must be 0), RSS and
## Redis keys over time (flat is the goal); results in bench/soak.json and bench/soak.txt.
SOAK_DURATION ?= 30m
soak: $(STAMP) tools
	$(VENV)/bin/phalanx chaos --soak $(SOAK_DURATION) --output bench/soak.json

## Side by side on a real kube-apiserver (needs `make tools`): Phalanx (as deployed: Redis + three service
## processes, mutual TLS) vs kube-scheduler + scheduler-plugins' Coscheduling (built from Go modules into
## ~/.cache/phalanx by hack/build-peer-scheduler.sh: ~5 min on 2 cores the first time, instant afterwards).
## Each workload x scheduler BENCH_K8S_REPEATS times, alternating, on a fresh API server every run (about
## 15 minutes); medians and ratios in bench/k8s.txt and bench/k8s.json. BENCH_K8S_FLAGS=--large adds the
## 5,000-node variants; `make bench-k8s-large` runs the 5,000-node, 10,000-gang shape once per scheduler
## (bench/k8s-large.txt and .json).
BENCH_K8S_REPEATS ?= 3
BENCH_K8S_FLAGS ?=
peer-scheduler:
	@if command -v go >/dev/null 2>&1; then bash hack/build-peer-scheduler.sh >/dev/null; \
	else echo "Go is missing: bench-k8s will run Phalanx only" >&2; fi

bench-k8s: $(STAMP) tools peer-scheduler precompile
	$(VENV)/bin/phalanx bench-k8s --repeats $(BENCH_K8S_REPEATS) $(BENCH_K8S_FLAGS) \
	  --output bench/k8s.json --table bench/k8s.txt

## The same with Phalanx in the combined layout (one phalanx-combined process; bench/k8s-combined.txt and .json).
bench-k8s-combined: $(STAMP) tools peer-scheduler precompile
	$(VENV)/bin/phalanx bench-k8s --repeats $(BENCH_K8S_REPEATS) --phalanx-layout combined $(BENCH_K8S_FLAGS) \
	  --output bench/k8s-combined.json --table bench/k8s-combined.txt

bench-k8s-large: $(STAMP) tools peer-scheduler precompile
	$(VENV)/bin/phalanx bench-k8s --large --only gang-5000n-10000x3 --repeats 1 \
	  --output bench/k8s-large.json --table bench/k8s-large.txt

## docker-compose.yml + docker-compose.observability.yml up for real on podman's Docker API (no Docker engine
## or public registry needed): Compose, the collector and Jaeger built from Go modules, the Debian base,
## Redis and Phalanx images built locally (hack/build-otel-images.sh), a gang run through the stack and
## checked in Redis, the services' APIs and /metrics, and Jaeger; then `compose down -v` (tests/e2e/README.md).
## Needs root, podman, runc, netavark, aardvark-dns, debootstrap, Go. Measured on 2 shared cores: 13 min the
## first time (Go builds and images from nothing), under a minute after.
e2e-compose: $(STAMP)
	@scripts/ensure-system-deps.sh --containers
	PHALANX_E2E=1 $(PY) -m pytest -q -rs tests/e2e

## The container image (deploy/docker/Dockerfile) built on a Debian 12 base made from Debian's packages
## (hack/build-base-image.sh: no public registry needed) and run with podman as deployed: non-root, read-only,
## no capabilities, mutual TLS, Redis with a password; size budget, gRPC health from the host, exit 0 on
## SIGTERM within the grace period (tests/container). Needs root, podman, runc, netavark, aardvark-dns,
## debootstrap. About 5 min from a cold cache, 1-2 min after (the image is reused while its sources are unchanged).
e2e-image: $(STAMP)
	@scripts/ensure-system-deps.sh --containers
	hack/build-base-image.sh >/dev/null
	PHALANX_E2E=1 $(PY) -m pytest -q -rs tests/container
