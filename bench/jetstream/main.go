// Command jetstream is the helper of bench/jetstream.sh:
//
//	jetstream nats    -store DIR -listen ADDR            run an embedded JetStream server with the MCP_AUDIT stream until SIGTERM
//	jetstream watch   -http ADDR -count N -pid PID        wait for a serve daemon to be ready, then until it stored N messages; print seconds and its peak RSS
//	jetstream discard -store DIR -listen ADDR -count N    drain the stream with a consumer that discards (the transport ceiling); print seconds
//	jetstream inproc  -store DIR -listen ADDR -count N -db FILE [-cpuprofile F]
//	                                                      drain with server.Run in this process (for profiling); print seconds
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	_ "net/http/pprof" // inproc: PPROF=addr serves profiles
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/server"
)

func main() {
	if len(os.Args) < 2 {
		fail(fmt.Errorf("usage: jetstream nats|watch|discard [flags]"))
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	store := fs.String("store", "", "JetStream store directory")
	listen := fs.String("listen", "127.0.0.1:4222", "NATS listen address")
	httpAddr := fs.String("http", "127.0.0.1:8474", "serve's http.listen")
	count := fs.Int("count", 1_000_000, "messages to wait for")
	pid := fs.Int("pid", 0, "serve's process id (for its peak RSS)")
	batch := fs.Int("batch", ingest.DefaultBatchSize, "messages per transaction (inproc)")
	fetch := fs.Int("fetch", ingest.DefaultFetchSize, "messages per fetch")
	acks := fs.String("acks", "auto", "discard: how to acknowledge: auto (as serve: none on this server), all (one AckAll per fetch) or explicit (every message)")
	db := fs.String("db", "", "database file (inproc)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile (inproc)")
	_ = fs.Parse(os.Args[2:])

	var err error
	switch os.Args[1] {
	case "nats":
		err = runNATS(*store, *listen)
	case "watch":
		err = watch(*httpAddr, *count, *pid)
	case "discard":
		err = discard(*store, *listen, *count, *fetch, *acks)
	case "inproc":
		err = inproc(*store, *listen, *db, *count, *batch, *fetch, *cpuprofile)
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "jetstream:", err)
	os.Exit(1)
}

func embedded(store, listen string) (*natsserver.Server, *nats.Conn, jetstream.JetStream, error) {
	host, port, _ := strings.Cut(listen, ":")
	p, err := strconv.Atoi(port)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("listen %q: %w", listen, err)
	}
	ns, err := natsserver.NewServer(&natsserver.Options{Host: host, Port: p, JetStream: true, StoreDir: store, NoSigs: true, NoLog: true, MaxPayload: 128 << 10})
	if err != nil {
		return nil, nil, nil, err
	}
	// A port still held (by a process that just exited, or taken since as
	// some connection's local port) makes the server fail to listen, which
	// it reports only in its log: try the port first to say why.
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("nats server cannot listen: %w", err)
	}
	l.Close()
	ns.Start()
	if !ns.ReadyForConnections(60 * time.Second) {
		return nil, nil, nil, fmt.Errorf("nats server on %s did not start", listen)
	}
	nc, err := nats.Connect(ns.ClientURL(), nats.InProcessServer(ns))
	if err != nil {
		return nil, nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, nil, nil, err
	}
	return ns, nc, js, nil
}

// runNATS serves the stream for the publisher until SIGTERM.
func runNATS(store, listen string) error {
	ns, nc, js, err := embedded(store, listen)
	if err != nil {
		return err
	}
	if _, err := ingest.EnsureStream(context.Background(), js, ingest.StreamSpec{Name: "MCP_AUDIT", Subjects: []string{"mcp.audit.>"}}); err != nil {
		return err
	}
	fmt.Println("ready")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	nc.Close()
	ns.Shutdown()
	ns.WaitForShutdown()
	return nil
}

// watch times a serve daemon from /readyz to N stored messages (events and
// dead letters) from its /metrics, then prints "seconds peak_rss_kib
// cpu_seconds written_mib system_cpu_seconds page_faults", the last four
// while it drained (page faults: minor ones, each a first touch of a page).
func watch(addr string, n, pid int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if resp, err := http.Get("http://" + addr + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("serve not ready at %s", addr)
		}
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	written := procIO(pid, "write_bytes:")
	cpu, sys, faults := procCPU(pid), procStat(pid, statSystem), procStat(pid, statMinorFaults)
	deadline = start.Add(10 * time.Minute)
	var maxRSS int
	var maxAt time.Duration
	defer func() {
		if os.Getenv("DEBUG") != "" {
			fmt.Fprintf(os.Stderr, "highest sampled RSS %d MiB at %.1fs\n", maxRSS/1024, maxAt.Seconds())
		}
	}()
	for {
		if r := rss(pid, "VmRSS:"); r > maxRSS {
			maxRSS, maxAt = r, time.Since(start)
		}
		got, err := stored(addr)
		if err != nil {
			return err
		}
		if got >= n {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d stored after 10 minutes", got, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	secs := time.Since(start).Seconds()
	fmt.Printf("%.3f %d %.2f %d %.2f %.0f\n", secs, peakRSS(pid), procCPU(pid)-cpu, (procIO(pid, "write_bytes:")-written)>>20,
		(procStat(pid, statSystem)-sys)/100, procStat(pid, statMinorFaults)-faults)
	return nil
}

// procIO reads one counter of /proc/PID/io (bytes).
func procIO(pid int, key string) int64 {
	n, _ := strconv.ParseInt(procField(pid, "io", key), 10, 64)
	return n
}

// procCPU reads the user and system CPU seconds of a process from
// /proc/PID/stat.
func procCPU(pid int) float64 {
	return (procStat(pid, statUser) + procStat(pid, statSystem)) / 100 // USER_HZ, 100 on Linux
}

// Fields of /proc/PID/stat, counted from the one after the command.
const (
	statMinorFaults = 7  // minflt
	statUser        = 11 // utime, in USER_HZ
	statSystem      = 12 // stime, in USER_HZ
)

// procStat reads field i (a stat* constant) of /proc/PID/stat.
func procStat(pid, i int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command (which may hold spaces) in parentheses.
	j := strings.LastIndexByte(string(b), ')')
	if j < 0 {
		return 0
	}
	f := strings.Fields(string(b[j+1:]))
	if len(f) <= i {
		return 0
	}
	v, _ := strconv.ParseFloat(f[i], 64)
	return v
}

// stored sums the ingested, duplicate and rejected counters.
func stored(addr string) (int, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	total := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "mcptrail_events_ingested_total{") && !strings.HasPrefix(line, "mcptrail_events_rejected_total{") &&
			!strings.HasPrefix(line, "mcptrail_events_duplicate_total{") {
			continue
		}
		if i := strings.LastIndexByte(line, ' '); i > 0 {
			v, _ := strconv.ParseFloat(line[i+1:], 64)
			total += v
		}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return int(total), sc.Err()
}

// peakRSS reads VmHWM of a process in KiB.
func peakRSS(pid int) int { return rss(pid, "VmHWM:") }

// rss reads one memory line of /proc/PID/status in KiB.
func rss(pid int, key string) int {
	kb, _ := strconv.Atoi(strings.TrimSuffix(procField(pid, "status", key), " kB"))
	return kb
}

// procField is the value after key on its line of /proc/PID/file, trimmed;
// "" when there is none.
func procField(pid int, file, key string) string {
	if pid == 0 {
		return ""
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, key); ok {
			return strings.TrimSpace(rest)
		}
	}
	return ""
}

// discard drains the stream with its own durable consumer, made as the
// daemon's is (ingest.EnsureConsumer: its state in the server's memory),
// using the same pull and ack pattern, and throws the messages away.
func discard(store, listen string, n, fetch int, acksName string) error {
	want, ok := map[string]ingest.Acks{"auto": ingest.AcksAuto, "all": ingest.AcksBatch, "explicit": ingest.AcksEach}[acksName]
	if !ok {
		return fmt.Errorf("-acks %q: want auto, all or explicit", acksName)
	}
	ns, nc, js, err := embedded(store, listen)
	if err != nil {
		return err
	}
	defer func() { nc.Close(); ns.Shutdown(); ns.WaitForShutdown() }()
	ctx := context.Background()
	name := "discard-" + acksName
	_ = js.DeleteConsumer(ctx, "MCP_AUDIT", name)
	c, err := ingest.EnsureConsumer(ctx, js, ingest.ConsumerSpec{Stream: "MCP_AUDIT", Durable: name, BatchSize: fetch, FetchSize: fetch, Acks: want})
	if err != nil {
		return err
	}
	policy := c.CachedInfo().Config.AckPolicy
	slog.Debug("draining", "consumer", name, "ack_policy", policy)
	// The daemon's pattern: a Consume handler with up to two fetches pulled
	// ahead (bounded in bytes, as batched messages need), and the daemon's
	// acknowledgements: none, one AckAll per fetch-sized chunk, or an ack
	// per message. It pulls 8 MiB ahead where
	// serve pulls 2 (ingest.FetchBytes): for single events the larger pulls
	// drained 1M events ~6% faster here (5.10-5.65 s against 5.58-5.98 s,
	// alternating), and a ceiling is the fastest pattern, not serve's.
	start := time.Now()
	var got int
	done := make(chan error, 1)
	finish := func(err error) {
		select {
		case done <- err:
		default:
		}
	}
	cc, err := c.Consume(func(m jetstream.Msg) {
		if _, err := m.Metadata(); err != nil { // the daemon parses it too
			finish(err)
			return
		}
		got++
		switch {
		case policy == jetstream.AckNonePolicy:
		case policy == jetstream.AckExplicitPolicy:
			_ = m.Ack()
		case got%fetch == 0 || got == n:
			if err := m.DoubleAck(ctx); err != nil {
				finish(err)
				return
			}
		}
		if got == n {
			finish(nil)
		}
	}, jetstream.PullMaxBytes(2*max(fetch<<10, ingest.DefaultMaxMessageBytes)), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		finish(fmt.Errorf("draining %d messages: %w", n, err))
	}))
	if err != nil {
		return err
	}
	err = <-done
	cc.Stop()
	if err != nil {
		return err
	}
	if policy == jetstream.AckExplicitPolicy {
		_ = nc.Flush()
	}
	fmt.Printf("%.3f %s\n", time.Since(start).Seconds(), policy)
	return nil
}

// inproc runs the daemon in this process against a fresh database and times
// the drain, optionally under the CPU profiler.
func inproc(store, listen, db string, n, batch, fetch int, profile string) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := analytics.Open(ctx, db, analytics.Options{})
	if err != nil {
		return err
	}
	defer st.Close()
	if lim := os.Getenv("DUCKDB_MEMORY_LIMIT"); lim != "" {
		if _, err := st.DB().ExecContext(ctx, "SET memory_limit = '"+strings.ReplaceAll(lim, "'", "")+"'"); err != nil {
			return err
		}
	}
	httpAddr := "127.0.0.1:0"
	if l, err := net.Listen("tcp", httpAddr); err == nil {
		httpAddr = l.Addr().String()
		l.Close()
	}
	opts := server.Options{EmbeddedListen: listen, EmbeddedStoreDir: store, JetStream: true, HTTPListen: httpAddr, BatchSize: batch, FetchSize: fetch}
	done := make(chan error, 1)
	log := slog.New(slog.DiscardHandler)
	if os.Getenv("DEBUG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	go func() { done <- server.Run(ctx, st, opts, log, nil) }()
	if addr := os.Getenv("PPROF"); addr != "" {
		go func() { _ = http.ListenAndServe(addr, nil) }()
	}
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	out := make(chan error, 1)
	go func() { out <- watch(httpAddr, n, os.Getpid()) }()
	select {
	case err := <-out:
		cancel()
		<-done
		return err
	case err := <-done:
		return fmt.Errorf("daemon stopped: %w", err)
	}
}
