package main

import (
	"flag"
	"fmt"
	"io"
	"path/filepath"

	"github.com/switchyard/switchyard/internal/config"
	"github.com/switchyard/switchyard/internal/mitm"
)

const caUsage = `usage: switchyard ca [--config FILE] [--state-dir DIR]

Prints the certificate of the local CA that serve --mitm signs intercepted
sites' certificates with, where it is, and how to make clients trust it.
The CA is generated on first use (by this command or by serve --mitm) in
the state directory, or is the operator's own (mitm.ca_cert, mitm.ca_key).
Its key never leaves that directory and is never printed.

flags:
`

// caCmd is the ca command.
func caCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ca", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, caUsage)
		fs.PrintDefaults()
	}
	path := fs.String("config", "", "TOML config file whose [mitm] section names the CA (default: none, the default state directory)")
	stateDir := fs.String("state-dir", "", "the CA's state directory (default: mitm.state_dir, "+mitm.DefaultStateDir()+")")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	cfg := config.Default()
	if *path != "" {
		loaded, err := config.Load(config.Source{Path: *path})
		if err != nil {
			fmt.Fprintln(stderr, "switchyard ca:", err)
			return 1
		}
		cfg = *loaded
	}
	m := cfg.MITM
	if *stateDir != "" {
		m.StateDir, m.CACert, m.CAKey = *stateDir, "", ""
	}
	var ca *mitm.Authority
	var err error
	created := false
	switch {
	case m.CACert != "":
		ca, err = mitm.Load(m.CACert, m.CAKey, mitm.Options{})
	case m.StateDir == "":
		err = fmt.Errorf("no default state directory without a home directory: give --state-dir")
	default:
		ca, created, err = mitm.LoadOrCreate(m.StateDir, mitm.Options{})
	}
	if err != nil {
		fmt.Fprintln(stderr, "switchyard ca:", err)
		return 1
	}
	cert, proxy := ca.CertPath(), "http://"+cfg.Listen.Proxy
	state := "in use"
	if created {
		state = "generated now"
	}
	key := m.CAKey
	if key == "" {
		key = filepath.Join(filepath.Dir(cert), mitm.KeyFile)
	}
	fmt.Fprintf(stdout, `Switchyard's local CA (%s): %s

Clients of "switchyard serve --mitm" must trust it:
  curl       curl --cacert %[2]s -x %[3]s https://example.com/
  Python     REQUESTS_CA_BUNDLE=%[2]s (requests, Scrapy); SSL_CERT_FILE=%[2]s (urllib, httpx)
  Go         SSL_CERT_FILE=%[2]s (crypto/x509 reads it on Linux)
  Node.js    NODE_EXTRA_CA_CERTS=%[2]s
  Chromium   --ignore-certificate-errors-spki-list=%[4]s
             or: certutil -d sql:$HOME/.pki/nssdb -A -t C,, -n switchyard -i %[2]s (libnss3-tools)
  Debian     cp %[2]s /usr/local/share/ca-certificates/switchyard.crt && update-ca-certificates

The key, %[5]s, is a secret: whoever holds it can impersonate any site
to the clients that trust this CA. Keep it 0600; never copy it to clients.

`, state, cert, proxy, ca.SPKIHash(), key)
	stdout.Write(ca.CertPEM())
	return 0
}
