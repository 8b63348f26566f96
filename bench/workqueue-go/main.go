// Command workqueue-go is the client-go side of `cargo xtask bench workqueue`.
//
// It runs the same workloads as the Rust peer (xtask/src/bench/workqueue/peer.rs)
// against k8s.io/client-go/util/workqueue and prints one JSON object per line.
// The xtask driver starts it several times, alternating with the Rust peer, and
// reports medians.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// result is one JSON line; the field names are shared with the Rust peer.
type result struct {
	Impl      string  `json:"impl"`
	Workload  string  `json:"workload"`
	Producers int     `json:"producers,omitempty"`
	Consumers int     `json:"consumers,omitempty"`
	Keys      int     `json:"keys,omitempty"`
	Adds      int     `json:"adds,omitempty"`
	Rounds    int     `json:"rounds,omitempty"`
	Processed int     `json:"processed,omitempty"`
	ElapsedNs int64   `json:"elapsed_ns"`
	OpsPerSec float64 `json:"ops_per_sec,omitempty"`
	NsPerOp   float64 `json:"ns_per_op,omitempty"`
	P50Ns     int64   `json:"p50_ns,omitempty"`
	P99Ns     int64   `json:"p99_ns,omitempty"`
}

func emit(r result) {
	r.Impl = "client-go"
	line, err := json.Marshal(r)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(line))
}

func keyNames(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("namespace-%d/object-%d", i%97, i)
	}
	return keys
}

// throughputRound runs one round: producers add `adds` items (key i%len(keys)),
// consumers Get/Done until the queue reports shutdown. Returns items processed.
func throughputRound(producers, consumers, adds int, keys []string) int {
	q := workqueue.NewTyped[string]()
	var processed sync.WaitGroup
	counts := make([]int, consumers)
	processed.Add(consumers)
	for c := 0; c < consumers; c++ {
		go func(c int) {
			defer processed.Done()
			n := 0
			for {
				item, shutdown := q.Get()
				if shutdown {
					break
				}
				q.Done(item)
				n++
			}
			counts[c] = n
		}(c)
	}
	var added sync.WaitGroup
	added.Add(producers)
	for p := 0; p < producers; p++ {
		go func(p int) {
			defer added.Done()
			for i := p; i < adds; i += producers {
				q.Add(keys[i%len(keys)])
			}
		}(p)
	}
	added.Wait()
	q.ShutDown()
	processed.Wait()
	total := 0
	for _, n := range counts {
		total += n
	}
	return total
}

func throughput(producers, consumers, keyCount, adds, totalAdds int) {
	keys := keyNames(keyCount)
	rounds := max(1, totalAdds/adds)
	// One untimed warm-up round.
	throughputRound(producers, consumers, adds, keys)
	processed := 0
	start := time.Now()
	for r := 0; r < rounds; r++ {
		processed += throughputRound(producers, consumers, adds, keys)
	}
	elapsed := time.Since(start)
	emit(result{
		Workload: "throughput", Producers: producers, Consumers: consumers, Keys: keyCount,
		Adds: adds, Rounds: rounds, Processed: processed, ElapsedNs: elapsed.Nanoseconds(),
		OpsPerSec: float64(adds*rounds) / elapsed.Seconds(),
	})
}

// work is the consumers' "little work per item" in the controller-shaped workload: FNV-1a
// over the key, workRounds times (the Rust peer does the same).
const workRounds = 16

func work(key string) uint64 {
	h := uint64(14695981039346656037)
	for r := 0; r < workRounds; r++ {
		for i := 0; i < len(key); i++ {
			h ^= uint64(key[i])
			h *= 1099511628211
		}
	}
	return h
}

// sink keeps the work from being optimized away.
var sink atomic.Uint64

// controllerRound: producers yield to the scheduler after every add (as informer handlers
// wait for the next event), consumers do a little work per item.
func controllerRound(producers, consumers, adds int, keys []string) int {
	q := workqueue.NewTyped[string]()
	var processed sync.WaitGroup
	counts := make([]int, consumers)
	processed.Add(consumers)
	for c := 0; c < consumers; c++ {
		go func(c int) {
			defer processed.Done()
			n := 0
			var acc uint64
			for {
				item, shutdown := q.Get()
				if shutdown {
					break
				}
				acc += work(item)
				q.Done(item)
				n++
			}
			sink.Add(acc)
			counts[c] = n
		}(c)
	}
	var added sync.WaitGroup
	added.Add(producers)
	for p := 0; p < producers; p++ {
		go func(p int) {
			defer added.Done()
			for i := p; i < adds; i += producers {
				q.Add(keys[i%len(keys)])
				runtime.Gosched()
			}
		}(p)
	}
	added.Wait()
	q.ShutDown()
	processed.Wait()
	total := 0
	for _, n := range counts {
		total += n
	}
	return total
}

func controller(producers, consumers, keyCount, adds, totalAdds int) {
	keys := keyNames(keyCount)
	rounds := max(1, totalAdds/adds)
	controllerRound(producers, consumers, adds, keys)
	processed := 0
	start := time.Now()
	for r := 0; r < rounds; r++ {
		processed += controllerRound(producers, consumers, adds, keys)
	}
	elapsed := time.Since(start)
	emit(result{
		Workload: "controller", Producers: producers, Consumers: consumers, Keys: keyCount,
		Adds: adds, Rounds: rounds, Processed: processed, ElapsedNs: elapsed.Nanoseconds(),
		OpsPerSec: float64(adds*rounds) / elapsed.Seconds(),
	})
}

func addAfter(n int) {
	keys := keyNames(n)
	rng := rand.New(rand.NewSource(1))
	delays := make([]time.Duration, n)
	for i := range delays {
		delays[i] = time.Duration(1 + rng.Int63n(int64(10*time.Minute)))
	}
	q := workqueue.NewTypedDelayingQueue[string]()
	start := time.Now()
	for i, key := range keys {
		q.AddAfter(key, delays[i])
	}
	elapsed := time.Since(start)
	q.ShutDown()
	emit(result{
		Workload: "add_after", Adds: n, ElapsedNs: elapsed.Nanoseconds(),
		NsPerOp: float64(elapsed.Nanoseconds()) / float64(n),
	})
}

func lateness(n int, spread time.Duration) {
	keys := keyNames(n)
	index := make(map[string]int, n)
	for i, k := range keys {
		index[k] = i
	}
	rng := rand.New(rand.NewSource(2))
	delays := make([]time.Duration, n)
	for i := range delays {
		delays[i] = time.Millisecond + time.Duration(rng.Int63n(int64(spread)))
	}
	readyAt := make([]time.Time, n)
	late := make([]int64, 0, n)
	q := workqueue.NewTypedDelayingQueue[string]()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for len(late) < n {
			item, shutdown := q.Get()
			if shutdown {
				return
			}
			now := time.Now()
			late = append(late, now.Sub(readyAt[index[item]]).Nanoseconds())
			q.Done(item)
		}
	}()
	start := time.Now()
	for i, key := range keys {
		readyAt[i] = time.Now().Add(delays[i])
		q.AddAfter(key, delays[i])
	}
	<-done
	elapsed := time.Since(start)
	q.ShutDown()
	slices.Sort(late)
	emit(result{
		Workload: "timer_lateness", Adds: n, ElapsedNs: elapsed.Nanoseconds(),
		P50Ns: late[len(late)/2], P99Ns: late[len(late)*99/100],
	})
}

func main() {
	quick := flag.Bool("quick", false, "smaller workloads for a fast smoke run")
	flag.Parse()
	scale := 1
	if *quick {
		scale = 10
	}
	fmt.Fprintf(os.Stderr, "client-go peer: GOMAXPROCS=%d %s\n", runtime.GOMAXPROCS(0), runtime.Version())

	for _, pc := range [][2]int{{1, 1}, {2, 2}, {8, 2}} {
		throughput(pc[0], pc[1], 1_000, 1_000, 2_000_000/scale)
		throughput(pc[0], pc[1], 100_000, 100_000, 2_000_000/scale)
		throughput(pc[0], pc[1], 100, 100_000, 2_000_000/scale)
	}
	controller(2, 2, 1_000, 10_000, 200_000/scale)
	addAfter(200_000 / scale)
	lateness(2_000/scale, 200*time.Millisecond)
}
