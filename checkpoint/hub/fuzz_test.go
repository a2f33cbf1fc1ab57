package hub

import (
	"strings"
	"testing"
)

// FuzzParseBatchResponse: whatever the Hub (or a mirror) answers, parsing
// does not panic, and an accepted answer's actions are usable.
func FuzzParseBatchResponse(f *testing.F) {
	oid := strings.Repeat("ab", 32)
	f.Add(`{"transfer":"basic","objects":[{"oid":"` + oid + `","size":10}]}`)
	f.Add(`{"objects":[{"oid":"` + oid + `","size":10,"actions":{"upload":{"href":"https://s3/x"},"verify":{"href":"https://hub/v"}}}]}`)
	f.Add(`{"objects":[{"oid":"` + oid + `","size":40,"actions":{"upload":{"href":"https://hub/c","header":{"chunk_size":"16","1":"u1","2":"u2","3":"u3"}}}}]}`)
	f.Add(`{"objects":[{"oid":"` + oid + `","size":40,"actions":{"upload":{"href":"h","header":{"chunk_size":16,"1":"u1","3":"u3"}}}}]}`)
	f.Add(`{"objects":[{"oid":"` + oid + `","size":1,"error":{"code":404,"message":"no"}}]}`)
	f.Add(`{"objects":null}`)
	f.Fuzz(func(t *testing.T, s string) {
		objs, err := parseBatchResponse([]byte(s))
		if err != nil {
			return
		}
		for _, o := range objs {
			if !isHex(o.OID, 64) || o.Size < 0 {
				t.Fatalf("accepted object %+v", o)
			}
			if o.Actions == nil || o.Actions.Upload == nil {
				continue
			}
			urls, chunk, err := multipartPlan(o.Actions.Upload, o.Size)
			if err != nil {
				t.Fatalf("accepted an upload action whose plan fails: %v", err)
			}
			if urls != nil && (chunk <= 0 || int64(len(urls)) != (o.Size+chunk-1)/chunk) {
				t.Fatalf("plan of %d parts of %d for %d bytes", len(urls), chunk, o.Size)
			}
		}
	})
}
