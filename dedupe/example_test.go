package dedupe_test

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/dedupe"
)

func ExampleEventKey() {
	// Two nodes receive the same webhook; one decoded it into a map, the
	// other kept the raw body with different key order and whitespace.
	decoded := map[string]any{"order": 1234, "status": "paid"}
	raw := json.RawMessage(`{ "status": "paid", "order": 1234 }`)

	k1, _ := dedupe.EventKey("billing", "on-paid", "", decoded)
	k2, _ := dedupe.EventKey("billing", "on-paid", "", raw)
	fmt.Println(k1 == k2)

	// With an event id from the producer, the id is the key's last part.
	k3, _ := dedupe.EventKey("billing", "on-paid", "evt_01", decoded)
	fmt.Println(k3)
	// Output:
	// true
	// event:billing:on-paid:evt_01
}

func ExampleScheduleKey() {
	nyc := time.FixedZone("EDT", -4*3600)
	fired := time.Date(2026, 6, 5, 1, 0, 3, 250_000_000, nyc) // timer fired 3.25s late
	key, _ := dedupe.ScheduleKey("reports", "nightly", dedupe.CronWindow(fired))
	fmt.Println(key)
	// Output:
	// schedule:reports:nightly:2026-06-05T05:00:00Z
}

func ExampleCanonical() {
	b, _ := dedupe.Canonical(json.RawMessage(`{ "b": 1.50, "a": "<a&b>" }`))
	fmt.Println(string(b))
	// Output:
	// {"a":"<a&b>","b":1.50}
}
