package switchyardv1

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

// protocLine is the header line naming protoc's version, which says
// nothing of the code: any protoc will do, the plugins are pinned
// (.ci/run).
var protocLine = regexp.MustCompile(`(?m)^// (\t|- )protoc +v\S+\n`)

// TestGeneratedIsCurrent regenerates the Go code from fetch.proto into a
// temporary directory and fails when the committed files differ: a change
// to the .proto must come with its generated code.
func TestGeneratedIsCurrent(t *testing.T) {
	// go install puts the plugins in GOPATH/bin, often not on PATH.
	if gopath, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		t.Setenv("PATH", os.Getenv("PATH")+string(os.PathListSeparator)+filepath.Join(string(bytes.TrimSpace(gopath)), "bin"))
	}
	for _, tool := range []string{"protoc", "protoc-gen-go", "protoc-gen-go-grpc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (apt-get install protobuf-compiler; go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12 google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2): the generated code is not checked", tool)
		}
	}
	dir := t.TempDir()
	cmd := exec.Command("protoc", "--proto_path=.", "--go_out="+dir, "--go_opt=paths=source_relative",
		"--go-grpc_out="+dir, "--go-grpc_opt=paths=source_relative", "fetch.proto")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("protoc: %v\n%s", err, out)
	}
	for _, name := range []string{"fetch.pb.go", "fetch_grpc.pb.go"} {
		want, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(protocLine.ReplaceAll(got, nil), protocLine.ReplaceAll(want, nil)) {
			t.Errorf("%s is stale: run go generate ./proto/... and commit the result", name)
		}
	}
}
