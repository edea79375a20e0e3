#!/usr/bin/env bash
# 1,000,000 live leases on a 3-node fence cluster on 127.0.0.1 (ports
# 7300-7322): fill them, read each node's RSS, SIGKILL the leader, time the
# takeover and the first grant, restart the killed node and time its
# catch-up, then check that no lease expired. Used for BENCHMARKS.md. The
# nodes and clients talk plaintext (--insecure): certificates are not what
# it measures.
#
#   bench/million.sh            (from the repository root; ~5 minutes)
#
# PROFILE_DIR=dir also saves the leader's heap profile (heap.pb.gz, read
# with go tool pprof -sample_index=inuse_space dir/fence dir/heap.pb.gz),
# its runtime memory statistics and /proc status after the fill; the nodes
# serve /debug/pprof/ on their loopback metrics port for that. GOGC and
# GOMEMLIMIT in the environment reach the nodes.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d /tmp/fence-million-XXXXXX)
bin=$work/fence
go build -o "$bin" ./cmd/fence
S=127.0.0.1:7300,127.0.0.1:7310,127.0.0.1:7320
P="n1=127.0.0.1:7302,n2=127.0.0.1:7312,n3=127.0.0.1:7322"
declare -A pid

serve() { # node index 1..3
  local b=$((7300 + 10 * ($1 - 1)))
  "$bin" --insecure serve --node-id "n$1" --data-dir "$work/n$1" --grpc-addr "127.0.0.1:$b" \
    --metrics-addr "127.0.0.1:$((b + 1))" --raft-addr "127.0.0.1:$((b + 2))" --bootstrap "$P" \
    --lock-delay 0 --log-level warn --pprof >>"$work/n$1.log" 2>&1 &
  pid[$1]=$!
}
stop() { for i in "${!pid[@]}"; do kill "${pid[$i]}" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap 'stop; rm -rf "$work"' EXIT
metric() { curl -s "127.0.0.1:$1/metrics" | awk -v k="$2" '$1==k{printf "%d\n", $2}'; }
leads() { curl -s -o /dev/null -w "%{http_code}" "127.0.0.1:$1/leaderz"; } # 200: leads, duties started
mport() { echo $((7301 + 10 * ($1 - 1))); }
since() { echo "$(date +%s.%N) - $1" | bc; }

echo "load average $(cut -d' ' -f1-3 /proc/loadavg); GOGC=${GOGC:-} GOMEMLIMIT=${GOMEMLIMIT:-}"
for i in 1 2 3; do serve $i; done
for _ in $(seq 100); do "$bin" --insecure status --server $S million/ready >/dev/null 2>&1 && break; sleep 0.2; done

start=$(date +%s)
"$bin" --insecure bench --server $S --workload many-leases --clients 64 --max-ops 1000000 --ttl 1h --duration 15m | tail -4
echo "fill took $(($(date +%s) - start)) s"
sleep 5
L=""
for i in 1 2 3; do
  echo "n$i rss $(($(awk '/VmRSS/{print $2}' "/proc/${pid[$i]}/status") / 1024)) MiB (peak $(($(awk '/VmHWM/{print $2}' "/proc/${pid[$i]}/status") / 1024)) MiB), leases $(metric "$(mport $i)" fence_active_leases), leaderz $(leads "$(mport $i)")"
  [ "$(leads "$(mport $i)")" = 200 ] && L=$i
done
echo "leader n$L"
if [ -n "${PROFILE_DIR:-}" ]; then
  mkdir -p "$PROFILE_DIR" && cp "$bin" "$PROFILE_DIR/fence"
  curl -s "127.0.0.1:$(mport "$L")/debug/pprof/heap" -o "$PROFILE_DIR/heap.pb.gz"
  curl -s "127.0.0.1:$(mport "$L")/debug/pprof/heap?debug=1" | grep '^# ' >"$PROFILE_DIR/memstats.txt"
  grep -E '^(Vm|Rss)' "/proc/${pid[$L]}/status" >"$PROFILE_DIR/status.txt"
fi
du -sh "$work"/n*/raft/wal "$work"/n*/raft/snap

t0=$(date +%s.%N)
kill -9 "${pid[$L]}"; wait "${pid[$L]}" 2>/dev/null || true; unset "pid[$L]"
NL=""
for _ in $(seq 3000); do
  for i in 1 2 3; do
    [ "$i" = "$L" ] && continue
    if [ "$(leads "$(mport $i)")" = 200 ]; then NL=$i; break 2; fi
  done
  sleep 0.02
done
echo "new leader n$NL leads (/leaderz) $(since "$t0") s after the kill"
"$bin" --insecure run --server $S million/after-kill --ttl 10s --wait 20s -- true
echo "first grant (fence run, incl. process start) $(since "$t0") s after the kill"
NP=$(mport "$NL")
want=$(metric "$NP" fence_active_leases)
echo "leases on the new leader $want, expirations $(metric "$NP" fence_lease_expirations_total)"

t3=$(date +%s.%N)
serve "$L"
for _ in $(seq 1200); do
  got=$(metric "$(mport "$L")" fence_active_leases || true)
  [ -n "$got" ] && [ "$got" -ge $((want - 10)) ] && break
  sleep 0.1
done
echo "killed node restarted, restored and caught up ($got leases) in $(since "$t3") s"
sleep 10
echo "10 s later: expirations on the new leader $(metric "$NP" fence_lease_expirations_total), leases $(metric "$NP" fence_active_leases)"
echo "load average $(cut -d' ' -f1-3 /proc/loadavg)"
for i in "${!pid[@]}"; do echo "n$i rss $(($(awk '/VmRSS/{print $2}' "/proc/${pid[$i]}/status") / 1024)) MiB (peak $(($(awk '/VmHWM/{print $2}' "/proc/${pid[$i]}/status") / 1024)) MiB)"; done
