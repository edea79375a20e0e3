# Convenience targets. The README's commands work without make.

.PHONY: test ci chaos chaos-proof chaos-e2e fuzz bench

CHAOS_DURATION ?= 10m
CHAOS_SEED ?= $(shell date +%s)

test:           ## the README's test command
	go test ./...

ci:             ## what CI runs
	.ci/run

chaos:          ## the fault harness for CHAOS_DURATION (10m) with CHAOS_SEED (printed; replays the schedule)
	go run ./test/chaos --duration $(CHAOS_DURATION) --seed $(CHAOS_SEED)

chaos-proof:    ## the harness sees failure: the control run loses updates, each planted bug is caught
	go run ./test/chaos --duration 30s --fencing=false --faults pause-worker
	go run ./test/chaos --duration 30s --bug regrant
	go run ./test/chaos --duration 30s --bug token
	go run ./test/chaos --duration 30s --bug deposed

chaos-e2e:      ## long e2e fault runs: 50 leader kills under load, 100 single-node kill -9 rounds
	FENCE_E2E_LEADER_KILLS=50 FENCE_E2E_KILLS=100 go test ./test/e2e -run 'TestClusterLeaderKills|TestKill9Durability' -count 1 -v -timeout 60m

fuzz:           ## a minute per fuzz target
	go test ./internal/fsm -run '^$$' -fuzz '^FuzzDecodeBatch$$' -fuzztime 60s
	go test ./internal/fsm -run '^$$' -fuzz '^FuzzUnmarshal$$' -fuzztime 60s
	go test ./internal/server -run '^$$' -fuzz '^FuzzRequestValidation$$' -fuzztime 60s

bench:          ## micro-benchmarks, 3 runs each
	go test ./internal/fsm -run '^$$' -bench . -count 3
	go test ./internal/server -run '^$$' -bench AcquireRelease -count 3 -benchtime 3s
