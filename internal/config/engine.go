package config

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/switchyard/switchyard/engine"
)

// Engine fields that are not engine.Config fields of the same name and type.
var engineOwn = []string{"Picker", "Cooldowns"}

// copyEngine copies each mirrored field of Engine between the config section
// and engine.Config, by name; the test checks that every field maps.
func copyEngine(dst, src reflect.Value) {
	section := reflect.TypeFor[Engine]()
	for i := range section.NumField() {
		name := section.Field(i).Name
		if slices.Contains(engineOwn, name) {
			continue
		}
		dst.FieldByName(name).Set(src.FieldByName(name))
	}
}

// engineDefaults is the section filled with the engine's defaults.
func engineDefaults() Engine {
	var s Engine
	d := engine.DefaultConfig()
	copyEngine(reflect.ValueOf(&s).Elem(), reflect.ValueOf(d))
	for name, newPicker := range pickers {
		if reflect.TypeOf(newPicker()) == reflect.TypeOf(d.Picker) {
			s.Picker = name
		}
	}
	return s
}

// pickers are the names engine.picker may take.
var pickers = map[string]func() engine.Picker{
	"weighted_random": func() engine.Picker { return engine.WeightedRandom{} },
	"power_of_two":    func() engine.Picker { return engine.PowerOfTwo{} },
}

// EngineConfig is the engine.Config the section describes. Overridden
// cooldowns get a copy of the default rule table whose version says so, so
// recorded events tell which rules produced them.
func (s Engine) EngineConfig() (engine.Config, error) {
	var c engine.Config
	copyEngine(reflect.ValueOf(&c).Elem(), reflect.ValueOf(s))
	newPicker, ok := pickers[s.Picker]
	if !ok {
		return c, &Error{Key: "engine.picker", Msg: fmt.Sprintf("%q: want power_of_two or weighted_random", s.Picker)}
	}
	c.Picker = newPicker()
	if len(s.Cooldowns) > 0 {
		rules := engine.DefaultRules()
		names := make([]string, 0, len(s.Cooldowns))
		for name, d := range s.Cooldowns {
			class, err := engine.ParseClass(name)
			if err != nil {
				return c, &Error{Key: "engine.cooldowns." + name, Msg: "not an outcome class"}
			}
			if d <= 0 {
				return c, &Error{Key: "engine.cooldowns." + name, Msg: "must be positive"}
			}
			rules.Class[class].Cooldown = d
			names = append(names, name)
		}
		slices.Sort(names)
		rules.Version += "+cooldowns(" + strings.Join(names, ",") + ")"
		c.Rules = &rules
	}
	if err := c.Validate(); err != nil {
		if ce, ok := err.(*engine.ConfigError); ok {
			f, _ := reflect.TypeFor[Engine]().FieldByName(ce.Field)
			return c, &Error{Key: "engine." + f.Tag.Get("toml"), Msg: "must be " + tomlNames(ce.Want)}
		}
		return c, err
	}
	return c, nil
}

// tomlNames rewrites the Go field names in an engine range ("at least
// SuspectAfter") as the keys a config file uses.
func tomlNames(want string) string {
	section := reflect.TypeFor[Engine]()
	for i := range section.NumField() {
		f := section.Field(i)
		want = strings.ReplaceAll(want, f.Name, f.Tag.Get("toml"))
	}
	return want
}
