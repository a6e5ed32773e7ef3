package dynamo

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/tidemark/tidemark/internal/emulator"
)

// A missing table without Config.CreateTable is an error naming the table
// and the permission that would create it.
func TestTableMissingNamesTableAndPermission(t *testing.T) {
	e := emulator.Start(t, emulator.Dynalite)
	c, err := New(newClient(e.Endpoint, newFaults()), Config{Table: "no-such-table", HostID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Join(context.Background(), "orders")
	if !errors.Is(err, ErrTableMissing) {
		t.Fatalf("Join = %v, want ErrTableMissing", err)
	}
	var te *TableError
	if !errors.As(err, &te) || te.Table != "no-such-table" {
		t.Errorf("the error %v is not a *TableError naming the table", err)
	}
	for _, want := range []string{"no-such-table", "dynamodb:CreateTable", "Config.CreateTable"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error %q does not say %q", err, want)
		}
	}
}

// CreateTable refused for want of permission: the error names the table
// and dynamodb:CreateTable, and is not retried.
func TestCreateTableAccessDenied(t *testing.T) {
	e := emulator.Start(t, emulator.Dynalite)
	f := newFaults()
	f.set(func(f *faults) {
		f.failStatus, f.failCode, f.failOp = http.StatusBadRequest, "AccessDeniedException", "CreateTable"
	})
	c, err := New(newClient(e.Endpoint, f), Config{Table: "denied", HostID: "a", CreateTable: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = c.Join(ctx, "orders")
	if !errors.Is(err, ErrAccessDenied) {
		t.Fatalf("Join = %v, want ErrAccessDenied", err)
	}
	var te *TableError
	if !errors.As(err, &te) || te.Table != "denied" || te.Permission != "dynamodb:CreateTable" {
		t.Errorf("the error %v does not name the table and dynamodb:CreateTable", err)
	}
}

// With Config.CreateTable the table is created (on-demand billing) and
// waited for; a second Coordinator finds it.
func TestCreateTable(t *testing.T) {
	e := emulator.Start(t, emulator.Dynalite)
	client := newClient(e.Endpoint, newFaults())
	for _, host := range []string{"a", "b"} {
		c, err := New(client, Config{Table: "created", HostID: host, CreateTable: true})
		if err != nil {
			t.Fatal(err)
		}
		m, err := c.Join(context.Background(), "orders")
		if err != nil {
			t.Fatalf("host %s: Join: %v", host, err)
		}
		if err := m.Leave(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	out, err := client.DescribeTable(context.Background(), describeInput("created"))
	if err != nil {
		t.Fatal(err)
	}
	if bm := out.Table.BillingModeSummary; bm == nil || bm.BillingMode != "PAY_PER_REQUEST" {
		t.Errorf("billing mode = %+v, want PAY_PER_REQUEST", bm)
	}
}

// Config errors name the field.
func TestConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "Config.Table"},
		{Config{Table: "t", HostID: "a#b"}, "Config.HostID"},
		{Config{Table: "t", LeaseDuration: -time.Second}, "Config.LeaseDuration"},
		{Config{Table: "t", CheckpointInterval: -time.Second}, "Config.CheckpointInterval"},
		{Config{Table: "t", LeaseDuration: 10 * time.Second, RenewInterval: 5 * time.Second}, "Config.FenceMargin"},
		{Config{Table: "t", LeaseDuration: 10 * time.Second, FenceMargin: 10 * time.Second}, "Config.FenceMargin"},
	} {
		_, err := New(newClient("http://127.0.0.1:1", newFaults()), tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
	c, err := New(newClient("http://127.0.0.1:1", newFaults()), Config{Table: "t"})
	if err != nil {
		t.Fatal(err)
	}
	got := c.Config()
	if got.LeaseDuration != 10*time.Second || got.RenewInterval != time.Second || got.FenceMargin != got.LeaseDuration/3 || got.HostID == "" || got.CallTimeout != got.RenewInterval {
		t.Errorf("defaults = %+v", got)
	}
}

func describeInput(table string) *dynamodb.DescribeTableInput {
	return &dynamodb.DescribeTableInput{TableName: aws.String(table)}
}
