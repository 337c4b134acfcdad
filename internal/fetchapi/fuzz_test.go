package fetchapi

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pb "github.com/switchyard/switchyard/proto/switchyard/v1"
)

// FuzzFetchJSON decodes a JSON fetch request and its validators as
// POST /v1/fetch does: it never panics, a request that decodes survives a
// round trip, and every refusal of its fields is a *fieldError naming the
// field, which the API answers 400 with.
func FuzzFetchJSON(f *testing.F) {
	for _, seed := range []string{
		`{"url":"http://example.com/","method":"POST","body":"aGk=","timeoutMs":"500","maxAttempts":2}`,
		`{"url":"http://example.com/","headers":[{"name":"Accept","value":"text/html"}],"labels":[{"key":"region","value":"us"}]}`,
		`{"url":"http://example.com/","validators":{"acceptStatus":[200,404],"mustMatch":"price \\d+","mustNotMatch":"captcha","minBodyBytes":"10","requireHeader":"ETag"}}`,
		`{"url":"http://example.com/","validators":{"must_match":"(unclosed"}}`,
		`{"url":"http://example.com/","validators":{"acceptStatus":[42]}}`,
		`{"url":"http://example.com/","labels":[{"key":"a","value":"b"},{"key":"a","value":"c"}]}`,
		`{"url":"","session":"s-1","strict":true,"target":"example.com"}`,
		`{"url":"http://example.com/","timeoutMs":"-1"}`,
		`{"colour":"red"}`,
		`[]`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req := &pb.FetchRequest{}
		if err := decodeJSON(data, req); err != nil {
			return
		}
		again := &pb.FetchRequest{}
		b, err := protojson.Marshal(req)
		if err != nil {
			t.Fatalf("re-encoding %v: %v", req, err)
		}
		if err := protojson.Unmarshal(b, again); err != nil || !proto.Equal(req, again) {
			t.Fatalf("round trip of %s: %v, %v", b, again, err)
		}
		if _, err := fetchRequest(req, "", nil); err != nil {
			var fe *fieldError
			if !errors.As(err, &fe) || fe.field == "" || fe.msg == "" {
				t.Fatalf("refusal %v names no field", err)
			}
		}
	})
}
