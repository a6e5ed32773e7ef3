package scan

import (
	"reflect"
	"testing"
)

// Every zero field of a Config literal means its default: after defaults,
// a field is either set or one whose default is its zero value (listed
// with why). A field added later whose zero means something else (as
// kinesisload's SinkRetries 0 once meant "no retry") fails here.
func TestConfigLiteralZeroValuesAreTheDefaults(t *testing.T) {
	zeroIsDefault := map[string]string{
		"Strategy":     "StrategyProbe is the zero Strategy",
		"Hooks":        "no hooks",
		"BatchTimeout": "none: the caller's context bounds a Resolve",
	}
	got, err := Config{}.withDefaults()
	if err != nil {
		t.Fatalf("the zero Config: %v", err)
	}
	v := reflect.ValueOf(got)
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		if _, ok := zeroIsDefault[name]; ok {
			continue
		}
		if v.Field(i).IsZero() {
			t.Errorf("Config{}.%s is still zero after defaults: a zero that is not documented as its default", name)
		}
	}
	if got.Strategy != StrategyProbe {
		t.Errorf("the default Strategy = %v, want StrategyProbe", got.Strategy)
	}
}
