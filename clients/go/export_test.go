package mutexd

import "net/http"

// PartitionOwners is the owner's URL of each partition as c last learned them ("" for a
// partition without one), or nil while c routes nothing.
func PartitionOwners(c *Client) []string {
	c.pmap.mu.Lock()
	defer c.pmap.mu.Unlock()
	if c.pmap.state != mapPartitioned {
		return nil
	}
	out := make([]string, len(c.pmap.owners))
	for i, s := range c.pmap.owners {
		if s != nil {
			out[i] = s.url
		}
	}
	return out
}

// OnAnswer has fn called with every answer c gets: the URL of the server it was sent to,
// the request's method and path, the status and the headers.
func OnAnswer(c *Client, fn func(to, method, path string, status int, header http.Header)) {
	c.onAnswer = func(to string, r *response) {
		fn(to, r.method, r.url[len(to):], r.status, r.header)
	}
}
