// Package killloop holds the parts shared by the SIGKILL loops of the
// reliability suites (internal/reliability for one loader process, and
// kinesisload/dynamo's fleet loop for many): a child process that is the
// test binary re-executed and killed with SIGKILL, a producer that records
// where every record landed, the Kinesis calls that create, reshard and
// list a stream, and the committed-position test.
//
// It is test support: it is imported only by tests and never by the
// library.
package killloop
