// Package switchyardv1 is the fetch API's wire format, generated from
// fetch.proto (docs/design/009-fetch-api.md). Regenerate with go generate
// (protoc, and the plugins at the versions .ci/run pins: protoc-gen-go
// v1.36.12, protoc-gen-go-grpc v1.6.2); TestGeneratedIsCurrent fails when
// the committed code is stale.
package switchyardv1

//go:generate protoc --proto_path=. --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative fetch.proto
