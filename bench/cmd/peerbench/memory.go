package main

import (
	"fmt"
	"os"
	"slices"

	"github.com/fencehq/fence/bench/peers"
)

// procs is a system made of processes this bench started.
type procs interface {
	Procs() []*peers.Proc
}

// rss reads each member's resident memory (0 where it cannot be read).
func rss(sys system) []int64 {
	p, ok := sys.(procs)
	if !ok {
		return nil
	}
	var out []int64
	for _, proc := range p.Procs() {
		b, err := proc.RSS()
		if err != nil {
			fmt.Fprintln(os.Stderr, "rss:", err)
		}
		out = append(out, b)
	}
	return out
}

func mib(b []int64) []int64 {
	out := make([]int64, len(b))
	for i, v := range b {
		out[i] = v >> 20
	}
	return out
}

// largest is the largest member's figure in a round.
func largest(b []int64) float64 {
	if len(b) == 0 {
		return 0
	}
	return float64(slices.Max(b)) / (1 << 20)
}
