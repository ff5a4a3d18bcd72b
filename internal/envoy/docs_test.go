package envoy_test

import (
	"os"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"github.com/goccy/go-yaml"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/budgetd/budgetd/internal/limitsfile"
)

// yamlBlocks returns the ```yaml blocks of a Markdown file.
func yamlBlocks(t *testing.T, path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, part := range strings.Split(string(b), "```yaml\n")[1:] {
		block, _, ok := strings.Cut(part, "```")
		if !ok {
			t.Fatalf("%s: an unclosed yaml block", path)
		}
		out = append(out, block)
	}
	return out
}

// TestEnvoyConfigExample: docs/envoy.md's mapping is a limits file that
// parses, and its Envoy configuration reads into Envoy's own bootstrap
// types (every field name, enum and typed_config known to the protocol
// module) and passes their validation.
func TestEnvoyConfigExample(t *testing.T) {
	blocks := yamlBlocks(t, "../../docs/envoy.md")
	if len(blocks) != 2 {
		t.Fatalf("%d yaml blocks in docs/envoy.md, want the mapping and the Envoy configuration", len(blocks))
	}
	f, err := limitsfile.Parse([]byte(blocks[0]))
	if err != nil {
		t.Fatalf("the mapping: %v", err)
	}
	if len(f.Envoy) != 1 || f.Envoy[0].Domain != "api" {
		t.Fatalf("the mapping's envoy member: %+v", f.Envoy)
	}
	js, err := yaml.YAMLToJSON([]byte(blocks[1]))
	if err != nil {
		t.Fatalf("the Envoy configuration: %v", err)
	}
	var b bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &b); err != nil {
		t.Fatalf("the Envoy configuration: %v", err)
	}
	if err := b.ValidateAll(); err != nil {
		t.Fatalf("the Envoy configuration: %v", err)
	}
}
