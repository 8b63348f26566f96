// Command informer-go is the client-go side of `cargo xtask bench informer`: a SharedInformer
// (informers.SharedInformerFactory, Kubernetes 1.36 client-go) on the pods of one namespace.
//
// Protocol (same for the three peers): arguments
// <kubeconfig> <namespace> <expected pods> <none|transform|metadata|metadata-transform> <expected updates> <settle ms>
// [protobuf|json] (this peer only: the wire format; default protobuf, which client-go's typed
// Pod client asks for on its own);
// JSON lines on stdout: "synced" (time from starting the informer to HasSynced, RSS), "steady"
// (RSS after the settle time), then, after a line on stdin, "burst" (update events counted by an
// OnUpdate handler and their first-to-last rate).
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// rss returns VmRSS and VmHWM of this process in bytes.
func rss() (uint64, uint64) {
	data, _ := os.ReadFile("/proc/self/status")
	var cur, peak uint64
	for _, line := range strings.Split(string(data), "\n") {
		field := func(name string) (uint64, bool) {
			rest, ok := strings.CutPrefix(line, name)
			if !ok {
				return 0, false
			}
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb * 1024, err == nil
		}
		if v, ok := field("VmRSS:"); ok {
			cur = v
		}
		if v, ok := field("VmHWM:"); ok {
			peak = v
		}
	}
	return cur, peak
}

// stripManagedFields drops metadata.managedFields before an object is cached. client-go has no
// ready-made transform for this (controller-runtime's cache.TransformStripManagedFields is the
// usual one, and does the same).
func stripManagedFields(obj any) (any, error) {
	if accessor, err := meta.Accessor(obj); err == nil && accessor.GetManagedFields() != nil {
		accessor.SetManagedFields(nil)
	}
	return obj, nil
}

func emit(fields map[string]any) {
	line, _ := json.Marshal(fields)
	fmt.Println(string(line))
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(2)
}

func main() {
	if len(os.Args) != 7 && len(os.Args) != 8 {
		fail("usage: %s <kubeconfig> <namespace> <pods> <transform|none> <updates> <settle-ms> [protobuf|json]", os.Args[0])
	}
	kubeconfig, namespace := os.Args[1], os.Args[2]
	expected, err := strconv.Atoi(os.Args[3])
	if err != nil {
		fail("pods: %v", err)
	}
	var transform, metadataOnly bool
	switch os.Args[4] {
	case "transform":
		transform = true
	case "metadata":
		metadataOnly = true
	case "metadata-transform":
		metadataOnly, transform = true, true
	case "none":
	default:
		fail("variant must be none, transform, metadata or metadata-transform, not %s", os.Args[4])
	}
	updates, err := strconv.ParseInt(os.Args[5], 10, 64)
	if err != nil {
		fail("updates: %v", err)
	}
	settleMs, err := strconv.Atoi(os.Args[6])
	if err != nil {
		fail("settle-ms: %v", err)
	}

	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		fail("kubeconfig: %v", err)
	}
	// No client-side rate limit, as for the other peers (paged lists would otherwise wait on it).
	config.QPS = -1
	if len(os.Args) == 8 {
		switch os.Args[7] {
		case "protobuf":
			// client-go's default for built-in types: the typed client asks for
			// "application/vnd.kubernetes.protobuf,application/json" unless a content type is set.
		case "json":
			// The wire format the Rust peers use (k8s-openapi types have no protobuf codec).
			config.ContentType = "application/json"
			config.AcceptContentTypes = "application/json"
		default:
			fail("wire format must be protobuf or json, not %s", os.Args[7])
		}
	}
	var informer cache.SharedIndexInformer
	if metadataOnly {
		// client-go's metadata client asks for PartialObjectMetadata, protobuf first, whatever
		// the config's content type.
		client, err := metadata.NewForConfig(config)
		if err != nil {
			fail("metadata client: %v", err)
		}
		factory := metadatainformer.NewFilteredSharedInformerFactory(client, 0, namespace, nil)
		informer = factory.ForResource(corev1.SchemeGroupVersion.WithResource("pods")).Informer()
		if transform {
			// What kube-controller-manager's metadatainformer.WithTransform does; that option
			// cannot be combined with a namespace filter, so it is set on the informer.
			if err := informer.SetTransform(stripManagedFields); err != nil {
				fail("transform: %v", err)
			}
		}
	} else {
		client, err := kubernetes.NewForConfig(config)
		if err != nil {
			fail("client: %v", err)
		}
		options := []informers.SharedInformerOption{informers.WithNamespace(namespace)}
		if transform {
			options = append(options, informers.WithTransform(stripManagedFields))
		}
		factory := informers.NewSharedInformerFactoryWithOptions(client, 0, options...)
		informer = factory.Core().V1().Pods().Informer()
	}

	var counting atomic.Bool
	var seen atomic.Int64
	var firstNs, lastNs atomic.Int64
	epoch := time.Now()
	_, err = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, newObj any) {
			if !counting.Load() {
				return
			}
			now := time.Since(epoch).Nanoseconds()
			if seen.Add(1) == 1 {
				firstNs.Store(now)
			}
			lastNs.Store(now)
		},
	})
	if err != nil {
		fail("add handler: %v", err)
	}

	stop := make(chan struct{})
	start := time.Now()
	go informer.Run(stop)
	// Poll every millisecond rather than WaitForCacheSync's 100 ms, so the time is not rounded up.
	for !informer.HasSynced() {
		time.Sleep(time.Millisecond)
	}
	syncMs := float64(time.Since(start).Nanoseconds()) / 1e6
	cur, peak := rss()
	emit(map[string]any{"event": "synced", "sync_ms": syncMs, "objects": len(informer.GetStore().ListKeys()), "expected": expected, "rss_bytes": cur, "hwm_bytes": peak})
	time.Sleep(time.Duration(settleMs) * time.Millisecond)
	cur, peak = rss()
	emit(map[string]any{"event": "steady", "objects": len(informer.GetStore().ListKeys()), "rss_bytes": cur, "hwm_bytes": peak})

	// Wait for the driver's go-ahead, then count the burst.
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	if updates == 0 {
		return
	}
	counting.Store(true)
	emit(map[string]any{"event": "counting"})
	deadline := time.Now().Add(10 * time.Minute)
	for seen.Load() < updates && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	n := seen.Load()
	span := float64(lastNs.Load()-firstNs.Load()) / 1e9
	rate := 0.0
	if span > 0 {
		rate = float64(n-1) / span
	}
	cur, peak = rss()
	emit(map[string]any{"event": "burst", "updates": n, "span_ms": span * 1e3, "events_per_sec": rate, "rss_bytes": cur, "hwm_bytes": peak})
	close(stop)
}
