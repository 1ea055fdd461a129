package audit

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
)

// Typical lines of each format, about the size gateways write.
var (
	benchNative = []byte(`{"id":"evt-000123","ts":"2026-11-03T09:00:01.123456789Z","server":"proxmox-mcp","tool":"vm_agent_exec_status",` +
		`"decision":"allowed","status":"ok","gateway":"gw-eu-1","grant":"ops-bot","agent":"claude-code","session":"s-7f2a",` +
		`"request_id":"42","latency_ms":12.5,"args":{"node":"pve1","vmid":101,"pid":4242},"policy_version":"14"}`)
	// As the simulator and gateways that send both write it: arg_keys and
	// args_hash beside args, from which they are computed again.
	benchNativeArgKeys = []byte(`{"id":"sim-1-1","ts":"2026-11-15T00:15:09.519Z","server":"proxmox-mcp","tool":"get_vm_status",` +
		`"method":"tools/call","decision":"allowed","status":"ok","gateway":"pl-gw-02","grant":"helpdesk","agent":"support-assistant",` +
		`"session":"34b5bea3-0ee9-4640-b155-41cc9f07f81e","request_id":"2","latency_ms":25.4,` +
		`"args_hash":"sha256:aa3d793a264ee895435a8453c59ecb4a8b7f457196f0d13f0060911d6939b731","arg_keys":["node","vmid"],` +
		`"args":{"node":"pve3","vmid":149},"policy_version":"2025-03-14.2"}`)
	benchNativeNoID = []byte(`{"ts":"2026-11-03T09:00:01.123456789Z","server":"proxmox-mcp","tool":"get_vm_status",` +
		`"decision":"allowed","status":"ok","gateway":"gw-eu-1","grant":"ops-bot","agent":"claude-code","session":"s-7f2a",` +
		`"request_id":"42","latency_ms":12.5,"args":{"node":"pve1","vmid":101}}`)
	benchCloudEvents = []byte(`{"specversion":"1.0","type":"dev.mcptrail.audit.v1","source":"/gateways/gw-eu-1","id":"ce-1001",` +
		`"time":"2026-11-04T08:00:00.5Z","datacontenttype":"application/json","data":{"server":"proxmox-mcp","tool":"get_vm_status",` +
		`"decision":"allowed","status":"ok","gateway":"gw-eu-1","session":"s-a1","args":{"node":"pve1","vmid":101}}}`)
	benchIntercept = []byte(`{"ts":"2026-11-05T08:00:00.412345678Z","type":"tool_call","instance":"9f3a01bc","tool":"get_vm_status",` +
		`"result":"allowed","args_hash":"sha256:18da6ac8fc23043448cc9f3e5e8731d70e5670b91f1e97c18fdc573fc4f97b12"}`)
	benchDocker = []byte(`{"trigger":"tools/call","target_type":"tool","server_name":"proxmox-mcp","tool_name":"get_vm_status",` +
		`"catalog_name":"docker-mcp","result":"allowed","policy_id":"proxmox-readonly","policy_version":"3","client_name":"claude-desktop",` +
		`"session_id":"d-sess-01","trace_id":"0af7651916cd43dd8448eb211c80319c","timestamp":"2026-11-06T12:00:00Z"}`)
)

func benchDecode(b *testing.B, line []byte, opts Options) {
	b.Helper()
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(line, opts); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

func BenchmarkDecodeNative(b *testing.B)          { benchDecode(b, benchNative, Options{}) }
func BenchmarkDecodeNativeDerivedID(b *testing.B) { benchDecode(b, benchNativeNoID, Options{}) }
func BenchmarkDecodeNativeArgKeys(b *testing.B)   { benchDecode(b, benchNativeArgKeys, Options{}) }
func BenchmarkDecodeNativeStoreArgs(b *testing.B) {
	benchDecode(b, benchNative, Options{StoreArgs: true})
}
func BenchmarkDecodeCloudEvents(b *testing.B) { benchDecode(b, benchCloudEvents, Options{}) }
func BenchmarkDecodeIntercept(b *testing.B) {
	benchDecode(b, benchIntercept, Options{Server: "proxmox-mcp"})
}
func BenchmarkDecodeDocker(b *testing.B) { benchDecode(b, benchDocker, Options{}) }

// BenchmarkDecodeNativeParallel is the ingest shape: every core decoding.
func BenchmarkDecodeNativeParallel(b *testing.B) {
	b.SetBytes(int64(len(benchNative)))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := Decode(benchNative, Options{}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkStdlibNative is the baseline Decode replaces: encoding/json into
// the Event struct, plus the map decode and re-encode that args_hash needs.
func BenchmarkStdlibNative(b *testing.B) {
	b.SetBytes(int64(len(benchNative)))
	b.ReportAllocs()
	for b.Loop() {
		var e struct {
			Event
			Args json.RawMessage `json:"args"`
		}
		if err := json.Unmarshal(benchNative, &e); err != nil {
			b.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(e.Args, &m); err != nil {
			b.Fatal(err)
		}
		if _, err := json.Marshal(m); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// benchLines is n lines of the simulator's shape whose args come from
// args(i): the argument objects agents repeat, or not.
func benchLines(n int, args func(i int) string) [][]byte {
	lines := make([][]byte, n)
	for i := range lines {
		lines[i] = []byte(fmt.Sprintf(`{"id":"sim-1-%d","ts":"2026-11-15T00:15:09.519Z","server":"proxmox-mcp","tool":"get_vm_status",`+
			`"method":"tools/call","decision":"allowed","status":"ok","gateway":"pl-gw-02","grant":"helpdesk","agent":"support-assistant",`+
			`"session":"34b5bea3-0ee9-4640-b155-41cc9f07f81e","request_id":"2","latency_ms":25.4,`+
			`"args_hash":"sha256:aa3d793a264ee895435a8453c59ecb4a8b7f457196f0d13f0060911d6939b731","arg_keys":["node","vmid"],`+
			`"args":%s,"policy_version":"2025-03-14.2"}`, i, args(i)))
	}
	return lines
}

func benchDecodeLines(b *testing.B, lines [][]byte) {
	b.Helper()
	b.SetBytes(int64(len(lines[0])))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := Decode(lines[i%len(lines)], Options{Borrow: true}); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// repeatedArgsLines are lines whose args agents repeat: a VM id drawn from
// 20,000 by a Zipf law over five nodes (most calls name a few VMs, as in
// simulated traffic: 9,315 distinct objects in 200,000 calls), so that the
// args cache (argscache.go) hits as it does on such traffic.
func repeatedArgsLines() [][]byte {
	z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, 19_999)
	return benchLines(1<<16, func(i int) string {
		v := z.Uint64()
		return fmt.Sprintf(`{"node":"pve%d","vmid":%d}`, v%5, 100+v)
	})
}

// BenchmarkDecodeRepeatedArgs decodes repeatedArgsLines on one core.
func BenchmarkDecodeRepeatedArgs(b *testing.B) { benchDecodeLines(b, repeatedArgsLines()) }

// BenchmarkDecodeUniqueArgs: every line its own args, so that every
// lookup of the args cache misses and replaces an entry (its worst case).
func BenchmarkDecodeUniqueArgs(b *testing.B) {
	benchDecodeLines(b, benchLines(1<<16, func(i int) string {
		return fmt.Sprintf(`{"node":"pve%d","vmid":%d}`, i%5, 100+i)
	}))
}

// BenchmarkDecodeRepeatedArgsParallel is BenchmarkDecodeRepeatedArgs on
// every core, as ingest decodes: the cache's slots shared between them.
func BenchmarkDecodeRepeatedArgsParallel(b *testing.B) {
	lines := repeatedArgsLines()
	b.ReportAllocs()
	b.ResetTimer() // not the lines' making (b.Loop resets it for the others)
	var next atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1)
			if _, err := Decode(lines[int(i)%len(lines)], Options{Borrow: true}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
