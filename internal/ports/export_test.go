package ports

// The two scanners, for the test that compares them.
var (
	SockDiag = sockDiag
	ProcNet  = procNet
)
