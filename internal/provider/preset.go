package provider

import (
	"fmt"
	"strings"
	"time"
)

// Preset is a provider's username convention, written as a template, and
// what else its documentation says of its sessions. Session ids are sent
// only by requests with a session (the optional part), so a request
// without one gets the provider's own rotation, a new IP per request, on
// kept connections.
type Preset struct {
	Name     string
	Template string
	// Idle is how long the provider keeps an unused session's IP; 0 when
	// its documentation found says nothing.
	Idle time.Duration
	// Source is where the convention is documented.
	Source string
}

// Presets are the conventions a route may name with preset=. Only
// parameters seen in each provider's own documentation are filled.
var Presets = []Preset{
	{
		// "brd-customer-[customerID]-zone-[zone name]-[optional
		// parameters]": -country-us, -country-ar-city-buenosaires, and
		// -session-<any string>, the same session keeping its peer.
		Name:     "brightdata",
		Template: "{user}[-country-{region}][-city-{city}][-session-{session}]",
		Source:   "https://docs.brightdata.com/proxy-networks/config-options, https://docs.brightdata.com/proxy-networks/residential/faqs",
	},
	{
		// customer-USERNAME-cc-DE-sessid-abcd1234, -city-london,
		// -sesstime-<minutes>; a session lasts 10 minutes or until 60 s
		// without a request. Oxylabs writes country codes in capitals
		// (region=DE).
		Name:     "oxylabs",
		Template: "customer-{user}[-cc-{region}][-city-{city}][-sessid-{session}-sesstime-{ttl}]",
		Idle:     60 * time.Second,
		Source:   "https://developers.oxylabs.io/products/proxies/residential-proxies/session-control",
	},
	{
		// -session-<id> with -sessionduration-<minutes> (1 to 1440).
		// -country- is the common convention, not in the page found:
		// check it against the provider's own endpoint generator.
		Name:     "decodo",
		Template: "{user}[-country-{region}][-session-{session}-sessionduration-{ttl}]",
		Source:   "https://help.decodo.com/docs/residential-proxy-custom-sticky-sessions",
	},
	{
		// USER-session-<1 to 25 of [A-Za-z0-9_]>-lifetime-<minutes>
		// (3 to 1440).
		Name:     "geonode",
		Template: "{user}[-session-{session}-lifetime-{ttl}]",
		Source:   "https://docs.geonode.com/reference/session-id-lifetime",
	},
}

// PresetByName returns the preset called name.
func PresetByName(name string) (Preset, error) {
	names := make([]string, len(Presets))
	for i, p := range Presets {
		if p.Name == name {
			return p, nil
		}
		names[i] = p.Name
	}
	return Preset{}, fmt.Errorf("unknown preset %q (want one of %s)", name, strings.Join(names, ", "))
}
