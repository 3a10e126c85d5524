package jupyter

import "github.com/envd-dev/envd/internal/jupyter/jwire"

// The messages of package jwire, under the names this package's API has
// always given them: they are what an Execution delivers and a Kernel
// sends, so the layer above keeps spelling them jupyter.Message,
// jupyter.StreamContent and so on.
type (
	Message             = jwire.Message
	Header              = jwire.Header
	StreamContent       = jwire.StreamContent
	DisplayDataContent  = jwire.DisplayDataContent
	ErrorContent        = jwire.ErrorContent
	ExecuteInputContent = jwire.ExecuteInputContent
	ExecuteReplyContent = jwire.ExecuteReplyContent
	StatusContent       = jwire.StatusContent
	ClearOutputContent  = jwire.ClearOutputContent
	InputRequestContent = jwire.InputRequestContent
)

// Channel names of the Jupyter messaging protocol (Message.Channel).
const (
	ChannelShell   = jwire.ChannelShell
	ChannelIOPub   = jwire.ChannelIOPub
	ChannelStdin   = jwire.ChannelStdin
	ChannelControl = jwire.ChannelControl
)

// MaxMessageBytes is the most of one kernel message delivered whole; see
// jwire.ReadFrame for what becomes of a bigger one.
const MaxMessageBytes = jwire.MaxMessageBytes
