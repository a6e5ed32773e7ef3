package fleet_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/tidemark/tidemark/kinesisload/fleet"
	"github.com/tidemark/tidemark/kinesisload/fleet/tabletest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The memory table keeps the table contract.
func TestMemoryTableConformance(t *testing.T) {
	tb := fleet.NewMemoryTable()
	tabletest.Run(t, func(*testing.T) fleet.Table { return tb })
}

// So does a faulty table with no fault on: it adds nothing but counts.
func TestFaultyTableWithoutFaultsConformance(t *testing.T) {
	tb := fleet.NewFaultyTable(fleet.NewMemoryTable())
	tabletest.Run(t, func(*testing.T) fleet.Table { return tb })
}
