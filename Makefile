# Convenience targets. The README's commands work without make.

.PHONY: build dist test ci chaos chaos-proof chaos-e2e sim sim-proof fuzz bench mutants mutants-ci

CHAOS_DURATION ?= 10m
CHAOS_SEED ?= $(shell date +%s)
SIM_SEEDS ?= 1000
SIM_SEED ?= 1

# The version stamped into build and dist: the nearest tag (git describe;
# the commit's short hash while there is none), "-dirty" with uncommitted
# changes. make dist VERSION=v1.2.3 names a release. The commit is stamped
# too, as GOFLAGS may hold -buildvcs=false (then Go records none itself).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
MODIFIED ?= $(shell test -n "$$(git status --porcelain 2>/dev/null)" && echo true)
BUILDINFO = github.com/fencehq/fence/internal/buildinfo
GOBUILD = CGO_ENABLED=0 go build -trimpath \
  -ldflags '-s -w -X $(BUILDINFO).version=$(VERSION) -X $(BUILDINFO).commit=$(COMMIT) -X $(BUILDINFO).modified=$(MODIFIED)'
# The release archives' platforms; their binary is the slim build
# (-tags fence_slim: no database driver, which only 'fence demo --dsn' uses).
PLATFORMS ?= linux/amd64 linux/arm64 darwin/arm64

build:          ## ./fence, static, with VERSION and the commit stamped in (every command, fence demo --dsn included)
	$(GOBUILD) -o fence ./cmd/fence
	./fence version

dist:           ## dist/fence-VERSION-OS-ARCH.tar.gz for each of PLATFORMS (slim binary, README, systemd unit and env file) and dist/SHA256SUMS
	rm -rf dist && mkdir dist
	set -e; for p in $(PLATFORMS); do \
	  os=$${p%/*}; arch=$${p#*/}; name=fence-$(VERSION)-$$os-$$arch; \
	  mkdir dist/$$name; \
	  GOOS=$$os GOARCH=$$arch $(GOBUILD) -tags fence_slim -o dist/$$name/fence ./cmd/fence; \
	  go version -m dist/$$name/fence | grep -q "GOOS=$$os" && go version -m dist/$$name/fence | grep -q "GOARCH=$$arch"; \
	  cp README.md packaging/systemd/fence.service packaging/systemd/fence.env dist/$$name/; \
	  tar -C dist --owner=0 --group=0 --numeric-owner -czf dist/$$name.tar.gz $$name; \
	done
	cd dist && sha256sum *.tar.gz > SHA256SUMS && cat SHA256SUMS
	@native=dist/fence-$(VERSION)-$$(go env GOOS)-$$(go env GOARCH)/fence; \
	if [ -x $$native ]; then \
	  $$native version; $$native version | grep -qF "fence $(VERSION) (commit $(COMMIT)" || { echo "dist: $$native does not say version $(VERSION), commit $(COMMIT)"; exit 1; }; \
	fi

test:           ## the README's test command
	go test ./...

ci:             ## what CI runs
	.ci/run

chaos:          ## the fault harness for CHAOS_DURATION (10m) with CHAOS_SEED (printed; replays the schedule)
	go run ./test/chaos --duration $(CHAOS_DURATION) --seed $(CHAOS_SEED)

chaos-proof:    ## the harness sees failure: the control run loses updates, each planted bug is caught
	go run ./test/chaos --duration 30s --fencing=false --locks-only --faults pause-worker
	go run ./test/chaos --duration 30s --locks-only --bug regrant
	go run ./test/chaos --duration 30s --locks-only --bug token
	go run ./test/chaos --duration 30s --locks-only --bug deposed

chaos-e2e:      ## long e2e fault runs: 50 leader kills under load, 100 single-node kill -9 rounds
	FENCE_E2E_LEADER_KILLS=50 FENCE_E2E_KILLS=100 go test ./test/e2e -run 'TestClusterLeaderKills|TestKill9Durability' -count 1 -v -timeout 60m

sim:            ## the deterministic simulation over SIM_SEEDS (1000) seeds from SIM_SEED (1); a failing seed replays exactly
	FENCE_SIM_SEEDS=$(SIM_SEEDS) FENCE_SIM_SEED=$(SIM_SEED) go test ./internal/node -run '^TestSimulation$$' -count=1

sim-proof:      ## how many of 100 seeds find each planted bug
	for bug in regrant token deposed replay applyuncommitted; do \
	  FENCE_SIM_COUNT=1 FENCE_SIM_SEEDS=100 go test -tags fence_bug_$$bug ./internal/node -run '^TestSimulationFindsThePlantedBug$$' -count=1 -v | grep -E 'seeds found|FAIL'; \
	done

fuzz:           ## about a minute per fuzz target (counts: see .ci/run)
	go test ./internal/fsm -run '^$$' -fuzz '^FuzzDecodeBatch$$' -fuzztime 1800000x
	go test ./internal/fsm -run '^$$' -fuzz '^FuzzUnmarshal$$' -fuzztime 1800000x
	go test ./internal/server -run '^$$' -fuzz '^FuzzRequestValidation$$' -fuzztime 120000x
	go test ./internal/server -run '^$$' -fuzz '^FuzzGateway$$' -fuzztime 120000x
	go test ./internal/transport -run '^$$' -fuzz '^FuzzDecodeBatch$$' -fuzztime 420000x
	go test ./internal/transport -run '^$$' -fuzz '^FuzzReceiveSnapshot$$' -fuzztime 900000x
	go test ./internal/transport -run '^$$' -fuzz '^FuzzServe$$' -fuzztime 600000x
	go test ./internal/policy -run '^$$' -fuzz '^FuzzParse$$' -fuzztime 600000x
	go test ./fencing -run '^$$' -fuzz '^FuzzVerify$$' -fuzztime 300000x
	go test ./internal/backup -run '^$$' -fuzz '^FuzzRead$$' -fuzztime 1000000x

bench:          ## micro-benchmarks, 3 runs each
	go test ./internal/fsm -run '^$$' -bench . -count 3
	go test ./internal/server -run '^$$' -bench AcquireRelease -count 3 -benchtime 3s

# Mutation testing (docs/mutation.md). One package at a time, one worker: the
# machine has two cores. -count=1: gremlins times each mutant against the
# coverage run, which a cached test result makes look instant (every mutant
# then "times out"). -failfast: a killed mutant stops at its first failing test.
GREMLINS = go run github.com/go-gremlins/gremlins/cmd/gremlins@v0.6.0 unleash --workers 1 --timeout-coefficient 5
MUTANT_ENV = FENCE_REQUIRE_DB=1 GOFLAGS="-count=1 -failfast"
# internal/node: only the lessor (the rest is covered by slower tests elsewhere).
NODE_NOT_LESSOR = '(core|datadir|group|members|membership|node|proposer|raftlog|replica|waiters)\.go$$'

mutants:        ## gremlins over the safety core and fencing, one package at a time (about 1 h on 2 cores, plus fencing)
	$(MUTANT_ENV) $(GREMLINS) ./internal/fsm
	$(MUTANT_ENV) $(GREMLINS) ./client
	$(MUTANT_ENV) $(GREMLINS) ./internal/node -E $(NODE_NOT_LESSOR)
	$(MUTANT_ENV) $(GREMLINS) ./fencing

# gremlins v0.6.0 exits 0 even below --threshold-efficacy, so the slice
# checks its summary itself: no mutant may live.
mutants-ci:     ## the CI slice (2-3 min): the lessor's deadline/slack/tick math against its unit tests, every mutant killed
	out=$$(mktemp); FENCE_REQUIRE_DB=1 GOFLAGS="-count=1 -failfast -run=^Test(Takeover|Due|Suspended|SlowDuties|Lessor|LazyTakeover)" \
	  $(GREMLINS) ./internal/node -E $(NODE_NOT_LESSOR) --threshold-efficacy 100 >$$out 2>&1; status=$$?; cat $$out; \
	  grep -q 'Lived: 0,' $$out || { echo "mutants-ci: a mutant lived; every one must be killed"; exit 1; }; exit $$status
