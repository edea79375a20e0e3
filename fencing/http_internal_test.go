package fencing

import (
	"sync"
	"testing"
)

// TestKeyedMutex: one holder per key at a time, and no entry left behind.
func TestKeyedMutex(t *testing.T) {
	var k keyedMutex
	var wg sync.WaitGroup
	inside := map[string]int{}
	var mu sync.Mutex
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := []string{"a", "b"}[i%2]
			unlock := k.lock(key)
			mu.Lock()
			inside[key]++
			if inside[key] != 1 {
				t.Errorf("%d holders of %q at once", inside[key], key)
			}
			mu.Unlock()
			mu.Lock()
			inside[key]--
			mu.Unlock()
			unlock()
		}()
	}
	wg.Wait()
	unlockA := k.lock("a")
	unlockB := k.lock("b")
	if len(k.m) != 2 {
		t.Fatalf("%d entries while two keys are held", len(k.m))
	}
	unlockA()
	if len(k.m) != 1 {
		t.Fatalf("%d entries after releasing a", len(k.m))
	}
	unlockB()
	if len(k.m) != 0 {
		t.Fatalf("%d entries left behind", len(k.m))
	}
}
