package simulate_test

import (
	"context"
	"fmt"
	"time"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/simulate"
)

func ExampleGenerate() {
	now := time.Date(2025, 6, 4, 12, 0, 0, 0, time.UTC)
	st, err := simulate.Generate(context.Background(), simulate.Options{Scenario: "small", Seed: 1, Count: 3, Now: now},
		func(e audit.Event) error {
			fmt.Println(e.ID, e.Grant, e.Tool, e.Decision, e.Status)
			return nil
		})
	if err != nil {
		panic(err)
	}
	fmt.Println(st.Events, "events")
	// Output:
	// sim-1-1 ops-bot get_cluster_status allowed ok
	// sim-1-2 ops-bot get_vm_status allowed ok
	// sim-1-3 ops-bot get_vm_rrddata allowed ok
	// 3 events
}
