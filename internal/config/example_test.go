package config

import (
	"bytes"
	"testing"
)

func TestExampleFileIsAccepted(t *testing.T) {
	c, err := Load(Source{Path: "../../switchyard.example.toml", Env: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := c.WriteEffective(&b); err != nil {
		t.Fatal(err)
	}
	t.Log(b.String())
}
