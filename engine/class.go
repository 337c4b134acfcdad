package engine

import "fmt"

// Class is the normalized outcome of one attempt. Every attempt ends in
// exactly one class; what the class means for the route is decided by the
// rule table (Rules), not by the code that observed it.
type Class uint8

// The outcome classes (docs/design/006-model.md lists what each means
// and its rule).
const (
	OK                 Class = iota // the target answered with a valid result
	ProxyConnectFailed              // could not reach the exit (refused, unreachable)
	ProxyTimeout                    // the exit did not answer in time
	ProxyAuth                       // the exit answered 407: an operator alarm, not evidence about the IP
	TunnelFailed                    // the exit refused or failed the CONNECT tunnel
	DNSFailed                       // the target name did not resolve through this exit
	TLSFailed                       // the TLS handshake with the target failed through this exit
	TargetTimeout                   // the target did not answer in time
	TargetReset                     // the target closed or reset the connection
	RateLimited                     // 429 or Retry-After: slow down on this target
	Blocked                         // 403/451 or a block signature: this exit is banned on this target
	Target5xx                       // the target answered 5xx
	ContentInvalid                  // a validator or late feedback rejected the body (soft ban)
	ClientError                     // other 4xx: the request's fault, never the route's
	Canceled                        // the caller gave up: no evidence either way

	numClasses = iota
)

var classNames = [numClasses]string{
	OK:                 "ok",
	ProxyConnectFailed: "proxy_connect_failed",
	ProxyTimeout:       "proxy_timeout",
	ProxyAuth:          "proxy_auth",
	TunnelFailed:       "tunnel_failed",
	DNSFailed:          "dns_failed",
	TLSFailed:          "tls_failed",
	TargetTimeout:      "target_timeout",
	TargetReset:        "target_reset",
	RateLimited:        "rate_limited",
	Blocked:            "blocked",
	Target5xx:          "target_5xx",
	ContentInvalid:     "content_invalid",
	ClientError:        "client_error",
	Canceled:           "canceled",
}

func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

// ParseClass returns the class named s (as printed by String).
func ParseClass(s string) (Class, error) {
	for i, name := range classNames {
		if name == s {
			return Class(i), nil
		}
	}
	return 0, fmt.Errorf("unknown outcome class %q", s)
}

// MarshalText implements encoding.TextMarshaler.
func (c Class) MarshalText() ([]byte, error) {
	if int(c) >= len(classNames) {
		return nil, fmt.Errorf("invalid outcome class %d", uint8(c))
	}
	return []byte(classNames[c]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (c *Class) UnmarshalText(b []byte) error {
	v, err := ParseClass(string(b))
	if err != nil {
		return err
	}
	*c = v
	return nil
}
