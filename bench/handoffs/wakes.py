"""Count goroutine wake-ups in an execution trace, by what woke them.

usage: go tool trace -d=parsed n1.trace > n1.parsed && python3 wakes.py n1.parsed [N]

Reads the debug dump of `go tool trace -d=parsed` (Go 1.26's format; it is
not a stable interface) and counts the StateTransition events that take a
goroutine from Waiting to Runnable, grouped by the first frame of the
waker's stack outside the runtime, sync and internal packages ("no stack":
woken by the netpoller, a timer or the scheduler). Prints the trace's span
and the N (default 25) most frequent wakers.
"""
import sys, re, collections

def frames_after(lines, i):
    fr = []
    j = i + 1
    if j < len(lines) and lines[j].startswith('Stack='):
        j += 1
        while j < len(lines) and lines[j].startswith('\t'):
            if not lines[j].startswith('\t\t'):
                fr.append(lines[j].strip().split(' @ ')[0])
            j += 1
    return fr
lines = open(sys.argv[1]).read().split('\n')
c = collections.Counter()
t0 = t1 = None
for i, l in enumerate(lines):
    m = re.search(r'Time=(\d+)', l)
    if m:
        t = int(m.group(1)); t0 = t if t0 is None else t0; t1 = t
    if 'Waiting->Runnable' not in l:
        continue
    fr = frames_after(lines, i)
    site = None
    for f in fr:
        if f.startswith('runtime.') or f.startswith('sync.') or f.startswith('internal/'):
            continue
        site = f; break
    if site is None:
        site = '(no stack: netpoll/timer)' if not fr else fr[0]
    c[site] += 1
span = (t1 - t0) / 1e9
print(f"span {span:.3f}s, wakes {sum(c.values())}")
for s, n in c.most_common(int(sys.argv[2]) if len(sys.argv) > 2 else 25):
    print(f"{n:7d}  {s}")
