package scan

import (
	"testing"

	"github.com/tidemark/tidemark/internal/configtest"
)

// Every zero field of a Config literal means its default (the fields
// whose default is their zero value listed with why).
func TestConfigLiteralZeroValuesAreTheDefaults(t *testing.T) {
	got, err := Config{}.withDefaults()
	if err != nil {
		t.Fatalf("the zero Config: %v", err)
	}
	configtest.ZeroMeansDefault(t, got, map[string]string{
		"Strategy":     "StrategyProbe is the zero Strategy",
		"Hooks":        "no hooks",
		"BatchTimeout": "none: the caller's context bounds a Resolve",
	})
	if got.Strategy != StrategyProbe {
		t.Errorf("the default Strategy = %v, want StrategyProbe", got.Strategy)
	}
}
