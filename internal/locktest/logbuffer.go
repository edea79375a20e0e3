package locktest

import (
	"strings"
	"sync"
)

// LogBuffer collects what a server or process writes (its log) for a test
// to read while it runs.
type LogBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

// Write appends p.
func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Contains reports whether what was written so far contains s.
func (l *LogBuffer) Contains(s string) bool { return strings.Contains(l.String(), s) }
