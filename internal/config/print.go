package config

import (
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/switchyard/switchyard/internal/route"
)

// WriteEffective writes c as TOML, defaults included, with every secret
// shown as its reference or "***" and route credentials as "***:***": what
// check-config prints. The routes follow as comments, one list line each.
func (c *Config) WriteEffective(w io.Writer) error {
	shown := *c
	shown.State.URL = redactURL(c.State.URL)
	if len(c.Routes.Inline) > 0 {
		shown.Routes.Inline = nil
		for _, r := range c.RouteList[c.inlineFrom:] {
			shown.Routes.Inline = append(shown.Routes.Inline, listLine(&r))
		}
	}
	if err := toml.NewEncoder(w).Encode(shown); err != nil {
		return err
	}
	if c.Security.BlockPrivateNetworks == nil {
		fmt.Fprintf(w, "\n# security.block_private_networks unset: in force = %t (on unless listen.proxy and listen.api are loopback)\n", c.BlockPrivate())
	}
	fmt.Fprintf(w, "\n# routes: %d\n", len(c.RouteList))
	for i := range c.RouteList {
		fmt.Fprintf(w, "#   %s\n", listLine(&c.RouteList[i]))
	}
	return nil
}

// listLine is r in the proxy-list syntax, credentials redacted.
func listLine(r *route.Route) string {
	parts := []string{r.Redacted(), "id=" + r.ID}
	if r.Gateway != nil {
		parts = append(parts, r.Gateway.String())
	}
	if len(r.Labels) > 0 {
		parts = append(parts, r.Labels.String())
	}
	if r.MaxInflight > 0 {
		parts = append(parts, "max_inflight="+strconv.Itoa(r.MaxInflight))
	}
	if r.Weight > 0 {
		parts = append(parts, "weight="+strconv.FormatFloat(r.Weight, 'g', -1, 64))
	}
	var prices route.Prices
	if r.Prices != nil {
		prices = *r.Prices
	}
	for _, n := range []struct {
		key string
		v   float64
	}{{"cost", r.Cost}, {"tier", float64(r.Tier)}, {"price_per_request", prices.PerRequest}, {"price_per_gb", prices.PerGB}} {
		if n.v > 0 {
			parts = append(parts, n.key+"="+strconv.FormatFloat(n.v, 'g', -1, 64))
		}
	}
	return strings.Join(parts, " ")
}

// redactURL is u with its user name and password, if any, as "***", as
// route addresses are shown; a URL that does not parse is hidden whole,
// since where its credentials end cannot be told.
func redactURL(u string) string {
	parsed, err := url.Parse(u)
	switch {
	case err != nil:
		return "***"
	case parsed.User == nil:
		return u
	}
	creds := "***@"
	if _, has := parsed.User.Password(); has {
		creds = "***:***@"
	}
	parsed.User = nil
	scheme, rest, _ := strings.Cut(parsed.String(), "://")
	return scheme + "://" + creds + rest
}
