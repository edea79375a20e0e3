#!/bin/bash
# cluster.sh BIN DIR: start three `BIN serve --pprof` nodes on 127.0.0.1
# (ports 17010-17032), run one client locking and releasing for 8 s
# (`BIN bench --workload uncontended --clients 1`), and 3 s in save a 2 s
# execution trace of every node as DIR/n1.trace … n3.trace; then stop the
# nodes and print the bench's output and which node led. Count the
# wake-ups in a trace with wakes.py (see BENCHMARKS.md, "Goroutine
# hand-offs on the commit path"). Kills only the processes it started.
set -u
BIN=$1
OUT=$2
rm -rf "$OUT"
mkdir -p "$OUT"
PIDS=()
peers="n1=127.0.0.1:17012,n2=127.0.0.1:17022,n3=127.0.0.1:17032"
for i in 1 2 3; do
	base=$((17000 + i * 10))
	"$BIN" serve --insecure --pprof --node-id n$i --bootstrap $peers --data-dir "$OUT/d$i" --grpc-addr 127.0.0.1:$base \
		--metrics-addr 127.0.0.1:$((base + 1)) --raft-addr 127.0.0.1:$((base + 2)) --log-level warn --lock-delay 0 >"$OUT/n$i.log" 2>&1 &
	PIDS+=($!)
done
sleep 3
timeout 30 "$BIN" bench --insecure --workload uncontended --clients 1 --duration 8s \
	--server 127.0.0.1:17010,127.0.0.1:17020,127.0.0.1:17030 >"$OUT/bench.txt" 2>&1 &
BENCH=$!
sleep 3
for i in 1 2 3; do
	curl -s -o "$OUT/n$i.trace" "127.0.0.1:$((17000 + i * 10 + 1))/debug/pprof/trace?seconds=2" &
done
wait $BENCH
for i in 1 2 3; do
	curl -s 127.0.0.1:$((17000 + i * 10 + 1))/metrics | grep '^fence_is_leader ' | sed "s/^/n$i /"
done
for p in "${PIDS[@]}"; do kill "$p"; done
wait
cat "$OUT/bench.txt"
