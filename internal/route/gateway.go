package route

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard/switchyard/internal/provider"
)

// gatewayScheme starts a provider gateway's line (docs/design/014):
// gateway://USER:PASS@host:port, an HTTP proxy whose username each
// attempt builds from a template.
const gatewayScheme = "gateway"

// takeGateway moves the gateway options of a gateway line's rest into
// r.Gateway and returns what is left, the labels:
//
//	preset=NAME             a provider's convention (provider.Presets)
//	template="…"            the username template (provider.Parse); replaces the preset's
//	sessions=N              provider sessions kept at most (default 1000)
//	session_ttl=DURATION    a provider session's lifetime, a minute or more (default 10m)
//	session_idle=DURATION   unused this long, a provider session is gone (default the preset's, else none)
//	session_ids=mint|pass   mint provider session ids (default) or pass the client's through
//
// Options are separated by spaces or tabs; template's value may be
// quoted, and is quoted in errors: it holds no credential.
func (r *Route) takeGateway(rest string) (string, error) {
	gw := r.Gateway
	var kept []string
	seen := map[string]bool{}
	var template string
	for rest = strings.TrimLeft(rest, " \t"); rest != ""; rest = strings.TrimLeft(rest, " \t") {
		tok, value, quoted, after, err := cutOption(rest)
		if err != nil {
			return "", err
		}
		rest = after
		key, _, _ := strings.Cut(tok, "=")
		if !isGatewayOption(key) {
			if quoted {
				return "", fmt.Errorf("label %q: only template= takes a quoted value", key)
			}
			kept = append(kept, tok)
			continue
		}
		if seen[key] {
			return "", fmt.Errorf("gateway option %s given twice", key)
		}
		seen[key] = true
		if err := gw.set(key, value, &template); err != nil {
			return "", fmt.Errorf("gateway option %s: %w", key, err)
		}
	}
	switch {
	case template != "":
		t, err := provider.Parse(template)
		if err != nil {
			return "", err
		}
		gw.Template = t
	case gw.Template == nil:
		return "", errors.New(`a gateway route needs template="…" or preset= (` + presetNames() + `)`)
	}
	if gw.Sessions.Max == 0 {
		gw.Sessions.Max = provider.DefaultMax
	}
	if gw.Sessions.TTL == 0 {
		gw.Sessions.TTL = provider.DefaultTTL
	}
	return strings.Join(kept, " "), nil
}

func isGatewayOption(key string) bool {
	switch key {
	case "preset", "template", "sessions", "session_ttl", "session_idle", "session_ids":
		return true
	}
	return false
}

// set takes one gateway option; template is kept until every option is
// read, so that it replaces a preset's whatever their order.
func (gw *Gateway) set(key, value string, template *string) error {
	switch key {
	case "preset":
		p, err := provider.PresetByName(value)
		if err != nil {
			return err
		}
		t, err := provider.Parse(p.Template)
		if err != nil {
			return err // the presets' test keeps this from happening
		}
		gw.Preset, gw.Template = p.Name, t
		if gw.Sessions.Idle == 0 {
			gw.Sessions.Idle = p.Idle
		}
	case "template":
		*template = value
		if value == "" {
			return errors.New("empty template")
		}
	case "sessions":
		n, err := strconv.Atoi(value)
		if err != nil || n < 1 {
			return errors.New("want a whole number, 1 or more")
		}
		gw.Sessions.Max = n
	case "session_ttl":
		d, err := time.ParseDuration(value)
		if err != nil || d < time.Minute {
			return errors.New("want a duration of a minute or more (providers count it in minutes), such as 10m")
		}
		gw.Sessions.TTL = d
	case "session_idle":
		d, err := time.ParseDuration(value)
		if err != nil || d < 0 {
			return errors.New("want a duration, 0 (none) or more, such as 60s")
		}
		gw.Sessions.Idle = d
	case "session_ids":
		switch value {
		case "mint":
		case "pass":
			gw.PassSessions = true
		default:
			return errors.New("want mint or pass")
		}
	}
	return nil
}

// cutOption cuts the first token off s: key=value, the value in double
// quotes or up to the next space or tab.
func cutOption(s string) (tok, value string, quoted bool, rest string, err error) {
	end := strings.IndexAny(s, " \t")
	if end < 0 {
		end = len(s)
	}
	key, v, hasValue := strings.Cut(s[:end], "=")
	if !hasValue || !strings.HasPrefix(v, `"`) {
		return s[:end], v, false, s[end:], nil
	}
	start := len(key) + 2
	closing := strings.IndexByte(s[start:], '"')
	if closing < 0 {
		return "", "", false, "", fmt.Errorf("%s: the quote is never closed", key)
	}
	after := s[start+closing+1:]
	if after != "" && after[0] != ' ' && after[0] != '\t' {
		return "", "", false, "", fmt.Errorf("%s: want a space after the closing quote", key)
	}
	return s[:start+closing+1], s[start : start+closing], true, after, nil
}

func presetNames() string {
	names := make([]string, len(provider.Presets))
	for i, p := range provider.Presets {
		names[i] = p.Name
	}
	return strings.Join(names, ", ")
}
