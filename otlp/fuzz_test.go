package otlp

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/mcptrail/mcptrail/audit"
)

// FuzzDecode: no body, in either encoding and for either signal, makes the
// decoder or the mapping panic, and every event it gives is valid.
func FuzzDecode(f *testing.F) {
	req := traces(gatewayResource, toolSpan(kv("gen_ai.tool.call.arguments", `{"a":[1,{"b":null}]}`), kv("mcp.session.id", "s")))
	pb, _ := proto.Marshal(req)
	js, _ := MarshalJSON(req)
	f.Add(pb)
	f.Add(js)
	f.Add([]byte(`{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"timeUnixNano":"1","traceId":"0af7651916cd43dd8448eb211c80319c",` +
		`"attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"execute_tool"}},{"key":"tool.name","value":{"intValue":"3"}}]}]}]}]}`))
	f.Add([]byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId" :"\"","spanId":"zz"}]}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, enc := range []Encoding{Protobuf, JSON} {
			for _, signal := range []string{Traces, Logs} {
				res, err := Decode(data, enc, signal, Options{StoreArgs: true})
				if err != nil {
					continue
				}
				for i := range res.Events {
					if err := res.Events[i].Validate(audit.Options{}); err != nil {
						t.Fatalf("invalid event %+v: %v", res.Events[i], err)
					}
				}
				if res.Records < len(res.Events)+res.RejectedCount() {
					t.Fatalf("records %d < events %d + rejected %d", res.Records, len(res.Events), res.RejectedCount())
				}
			}
		}
	})
}
