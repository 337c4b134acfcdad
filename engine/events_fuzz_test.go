package engine

import (
	"bytes"
	"reflect"
	"testing"
)

// FuzzReadEvents: reading arbitrary input never panics, and whatever reads
// back writes and reads again to the same events.
func FuzzReadEvents(f *testing.F) {
	f.Add([]byte(`{"time":"2026-11-30T12:00:00Z","kind":"outcome","route":"r1","target":"a.com","class":"blocked","latency_ms":12.5}`))
	f.Add([]byte(`{"time":"2026-11-30T12:00:00Z","kind":"state","route":"r1","from":"healthy","to":"cooling","reason":"x"}` + "\n\n"))
	f.Add([]byte(`{"time":"2026-11-30T12:00:00Z","kind":"incident","route":"r","open":true}` + "\r\n"))
	f.Add([]byte(`{"kind":"nope"}`))
	f.Add([]byte(`{"time":"x"}`))
	f.Add([]byte("\x00\xff{"))
	f.Fuzz(func(t *testing.T, data []byte) {
		events, err := ReadEvents(bytes.NewReader(data))
		if err != nil {
			return
		}
		var buf bytes.Buffer
		if err := WriteEvents(&buf, events); err != nil {
			t.Fatalf("write back: %v", err)
		}
		again, err := ReadEvents(&buf)
		if err != nil {
			t.Fatalf("read back: %v\n%s", err, buf.String())
		}
		if len(events) == 0 && len(again) == 0 {
			return
		}
		if !reflect.DeepEqual(events, again) {
			t.Fatalf("round trip changed events:\n%+v\n%+v", events, again)
		}
	})
}
