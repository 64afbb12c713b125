// cgoprog: a Go program with cgo for test/e2e/golang.py (issue 9). Go's
// runtime takes over the signals at start (through libc's sigaction, which
// the preload interposes, because cgo is on), runs goroutines on small
// stacks it grows itself, preempts them with SIGURG, and stops the world
// for the GC. Under the preload all of that meets our sampling signal.
//
// For about 1.5 s: CPU-bound goroutines, a channel pipeline, a contended
// mutex, sleeping goroutines, goroutines in C (sleeping and spinning), a
// garbage-heavy goroutine with explicit GCs, a sync.Cond, select with
// timers, and os/exec of itself ("cgoprog child"), whose output is relayed.
// Everything printed is deterministic (no times, no counts that depend on
// scheduling), so stdout and stderr must be the same with and without the
// preload. Exit status 0. "cgoprog cexit" does the same, then ends through
// libc's exit() (C.exit) instead of Go's own exit (a raw exit_group).
package main

/*
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static uint64_t c_spin(uint64_t n)
{
	uint64_t x = 88172645463325252ULL;
	for (uint64_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
	}
	return x;
}

static void c_nap(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0)
		;
}

static void c_exit(int status)
{
	exit(status);
}
*/
import "C"

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"
)

// xorshift chain: deterministic CPU work in Go.
func spin(seed, n uint64) uint64 {
	x := seed | 1
	for i := uint64(0); i < n; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x
}

// Recursion deep enough to make the goroutine's stack grow (it starts at a
// few KB and is copied when it grows).
func deep(n int, acc uint64) uint64 {
	var pad [64]uint64
	pad[n%64] = acc
	if n == 0 {
		return acc
	}
	return deep(n-1, spin(acc+pad[n%64], 50))
}

func cpuWorkers(out map[string]string, mu *sync.Mutex, wg *sync.WaitGroup) {
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			var x uint64
			for round := 0; round < 12; round++ {
				x ^= spin(uint64(w*1000+round), 3000000)
				x ^= deep(400, x)
			}
			mu.Lock()
			out[fmt.Sprintf("cpu%d", w)] = fmt.Sprintf("%016x", x)
			mu.Unlock()
		}(w)
	}
}

// A four-stage pipeline over unbuffered channels.
func pipeline() uint64 {
	src := make(chan uint64)
	go func() {
		for i := uint64(1); i <= 20000; i++ {
			src <- i
		}
		close(src)
	}()
	stage := func(in <-chan uint64, f func(uint64) uint64) <-chan uint64 {
		out := make(chan uint64)
		go func() {
			for v := range in {
				out <- f(v)
			}
			close(out)
		}()
		return out
	}
	c := stage(src, func(v uint64) uint64 { return v * 3 })
	c = stage(c, func(v uint64) uint64 { return spin(v, 20) })
	c = stage(c, func(v uint64) uint64 { return v % 1000003 })
	var sum uint64
	for v := range c {
		sum += v
	}
	return sum
}

// Contended mutex with short sleeps while holding and between.
func mutexes() int {
	var mu sync.Mutex
	var wg sync.WaitGroup
	counts := map[int]int{}
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				mu.Lock()
				counts[i%7]++
				if i%10 == 0 {
					time.Sleep(200 * time.Microsecond)
				}
				mu.Unlock()
				if i%5 == 0 {
					time.Sleep(2 * time.Millisecond)
				}
			}
		}(g)
	}
	wg.Wait()
	total := 0
	for _, n := range counts {
		total += n
	}
	return total
}

// Many goroutines in time.Sleep for about a second.
func sleepers() int {
	var wg sync.WaitGroup
	var mu sync.Mutex
	ticks := 0
	for g := 0; g < 50; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				time.Sleep(time.Duration(20+g%10) * time.Millisecond)
				mu.Lock()
				ticks++
				mu.Unlock()
			}
		}(g)
	}
	wg.Wait()
	return ticks
}

// Goroutines in C: two sleep in nanosleep, one spins; Go meanwhile has to
// hand their Ps to other threads (sysmon retakes them).
func cgoCalls() string {
	var wg sync.WaitGroup
	res := make([]uint64, 3)
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 4; i++ {
				C.c_nap(C.int(250))
				res[g]++
			}
		}(g)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 4; i++ {
			res[2] ^= uint64(C.c_spin(C.uint64_t(30000000 + i)))
		}
	}()
	wg.Wait()
	return fmt.Sprintf("%d %d %016x", res[0], res[1], res[2])
}

type node struct {
	left, right *node
	val         uint64
	pad         []byte
}

func tree(depth int, v uint64) *node {
	n := &node{val: v, pad: make([]byte, 64)}
	if depth > 0 {
		n.left = tree(depth-1, v*2)
		n.right = tree(depth-1, v*2+1)
	}
	return n
}

func (n *node) sum() uint64 {
	if n == nil {
		return 0
	}
	return n.val + n.left.sum() + n.right.sum()
}

// Garbage: trees built and dropped, slices churned, explicit GCs.
func garbage() uint64 {
	var total uint64
	keep := make([][]byte, 64)
	for round := 0; round < 30; round++ {
		t := tree(12, uint64(round))
		total += t.sum()
		for i := 0; i < 256; i++ {
			b := make([]byte, 4096+i)
			b[0] = byte(i)
			keep[(round*256+i)%len(keep)] = b
		}
		if round%10 == 9 {
			runtime.GC()
		}
	}
	return total + uint64(len(keep))
}

// A sync.Cond ping-pong and a select with timers.
func condAndSelect() string {
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	turn := 0
	var wg sync.WaitGroup
	for p := 0; p < 2; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				mu.Lock()
				for turn%2 != p {
					cond.Wait()
				}
				turn++
				cond.Broadcast()
				mu.Unlock()
			}
		}(p)
	}
	wg.Wait()

	ch := make(chan int)
	go func() {
		for i := 0; i < 20; i++ {
			time.Sleep(3 * time.Millisecond)
			ch <- i
		}
		close(ch)
	}()
	// A timer in every select; whether it ever fires depends on the load
	// of the machine, so it is not printed.
	got, timeouts := 0, 0
	for done := false; !done; {
		select {
		case v, ok := <-ch:
			if !ok {
				done = true
			} else {
				got += v
			}
		case <-time.After(200 * time.Millisecond):
			timeouts++
		}
	}
	_ = timeouts
	return fmt.Sprintf("turns %d, select %d", turn, got)
}

// os/exec of ourselves; the child's stdout is relayed, its stderr too
// except the library's own lines (its profile is its own business).
func child() string {
	cmd := exec.Command(os.Args[0], "child")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	sc := bufio.NewScanner(&errb)
	for sc.Scan() {
		if !strings.Contains(sc.Text(), "wallprof:") {
			fmt.Fprintf(os.Stderr, "child stderr: %s\n", sc.Text())
		}
	}
	if err != nil {
		return fmt.Sprintf("%s(error: %v)", out.String(), err)
	}
	return out.String()
}

func childMain() {
	var wg sync.WaitGroup
	res := make([]uint64, 4)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			res[g] = spin(uint64(2*g+1), 500000)
			time.Sleep(50 * time.Millisecond)
			res[g] ^= uint64(C.c_spin(1000))
		}(g)
	}
	wg.Wait()
	fmt.Printf("child: %016x %016x %016x %016x\n", res[0], res[1], res[2], res[3])
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "child" {
		childMain()
		return
	}
	// More Ps than CPUs: more threads run Go code at the same time, all
	// of them signalled at every tick.
	runtime.GOMAXPROCS(8)
	results := map[string]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	set := func(k, v string) {
		mu.Lock()
		results[k] = v
		mu.Unlock()
	}
	cpuWorkers(results, &mu, &wg)
	jobs := map[string]func() string{
		"pipeline": func() string { return fmt.Sprint(pipeline()) },
		"mutexes":  func() string { return fmt.Sprint(mutexes()) },
		"sleepers": func() string { return fmt.Sprint(sleepers()) },
		"cgo":      cgoCalls,
		"garbage":  func() string { return fmt.Sprint(garbage()) },
		"cond":     condAndSelect,
		"child":    func() string { return strings.TrimSpace(child()) },
	}
	for k, f := range jobs {
		wg.Add(1)
		go func(k string, f func() string) {
			defer wg.Done()
			set(k, f())
		}(k, f)
	}
	wg.Wait()
	keys := make([]string, 0, len(results))
	for k := range results {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Printf("%s: %s\n", k, results[k])
	}
	fmt.Println("cgoprog: done")
	if len(os.Args) > 1 && os.Args[1] == "cexit" {
		// Through libc's exit() (atexit handlers, destructors), which a
		// Go program's own exit (a raw exit_group system call) skips.
		C.c_exit(0)
	}
}
