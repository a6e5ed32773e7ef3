package dynamo

import (
	"testing"

	"github.com/tidemark/tidemark/internal/configtest"
)

// Every zero field of a Config literal but the required Table means its
// default (the fields whose default is their zero value listed with why);
// the zero Config, without a Table, is refused.
func TestConfigLiteralZeroValuesAreTheDefaults(t *testing.T) {
	c := Config{Table: "leases"}
	got, _, err := c.withDefaults(c.fleetConfig())
	if err != nil {
		t.Fatalf("Config{Table: %q}: %v", c.Table, err)
	}
	configtest.ZeroMeansDefault(t, got, map[string]string{
		"CreateTable": "false: a missing table is an error, not created",
		"BalanceBy":   "BalanceByCount is the zero BalanceBy",
	})
	if _, _, err := (Config{}).withDefaults(Config{}.fleetConfig()); err == nil {
		t.Error("the zero Config (no Table) was accepted")
	}
}
