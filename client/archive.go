package client

import (
	"context"
	"io"
	"net/http"

	"connectrpc.com/connect"
)

// DownloadDir opens the directory at path as a tar archive, streamed:
// entries relative to path (directories, regular files, symbolic links as
// links), with their modes. Read it with archive/tar, then close it. A
// path that is not a directory fails with ErrInvalidArgument; an archive
// cut short (envd could not read an entry after it began) fails on Read.
func (c *Client) DownloadDir(ctx context.Context, path string) (*FileReader, error) {
	return c.openFile(ctx, "download directory "+path, path, "application/x-tar")
}

// UploadDir unpacks the tar archive r under the directory path (created if
// missing), streaming it. Files replace files and directories merge; an
// archive with an entry that would land outside path (an absolute or
// climbing name, a link pointing out), a hard link or a device, or a cut
// archive fails with ErrInvalidArgument and changes nothing.
func (c *Client) UploadDir(ctx context.Context, path string, r io.Reader) error {
	c.init()
	op := "upload directory " + path
	if path == "" {
		return &Error{Op: "upload directory", Code: connect.CodeInvalidArgument, Message: "no destination path"}
	}
	body, size := uploadBody(r)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.filesURL(path), body)
	if err != nil {
		return &Error{Op: op, Code: connect.CodeInvalidArgument, Message: err.Error(), Err: err}
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/x-tar")
	c.setToken(req.Header)
	resp, err := c.bulkHC.Do(req)
	if err != nil {
		return transportError(op, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fileHTTPError(op, resp)
	}
	return nil
}
