package fleet

import (
	"testing"

	"github.com/tidemark/tidemark/internal/configtest"
	"github.com/tidemark/tidemark/kinesisload"
)

// Every zero field of a Config literal means its default (the fields
// whose default is their zero value listed with why).
func TestConfigLiteralZeroValuesAreTheDefaults(t *testing.T) {
	got, err := Config{}.WithDefaults()
	if err != nil {
		t.Fatalf("the zero Config: %v", err)
	}
	configtest.ZeroMeansDefault(t, got, map[string]string{
		"BalanceBy":    "BalanceByCount is the zero BalanceBy",
		"ManualRounds": "rounds run on their own",
	})
	if got.BalanceBy != kinesisload.BalanceByCount {
		t.Errorf("the default BalanceBy = %v, want BalanceByCount", got.BalanceBy)
	}
}
