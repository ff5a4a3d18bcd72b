package limitsfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// Limits on what one file may make the converter do, so that a hostile
// file (a billion laughs of aliases, a deep nest) is refused rather than
// exhausting memory.
const (
	maxDepth = 64
	// maxAliased bounds the values written again through aliases.
	maxAliased = 100_000
)

// document is a YAML (or JSON) document turned into JSON text, with the line
// of every member and item, by its path (limits[2].capacity).
type document struct {
	json  []byte
	lines map[string]int
}

// line is the line of path, or of its nearest enclosing member or item
// when path itself is not in the file (a member it lacks); 0 when none.
func (d *document) line(path string) int {
	for path != "" {
		if l, ok := d.lines[path]; ok {
			return l
		}
		cut := max(strings.LastIndexByte(path, '.'), strings.LastIndexByte(path, '['))
		if cut < 0 {
			break
		}
		path = path[:cut]
	}
	return 0
}

// toJSON parses data as one YAML document and writes it as JSON. The
// numbers keep their text (12.370 stays 12.370: an amount never passes
// through a float); a number YAML reads but JSON does not write (0x1f,
// 1_000, .5) becomes a string, which the API then refuses where it wants a
// number. A key given twice, a merge key (<<), a tag, a non-scalar key and
// more than one document are refused with their line.
func toJSON(data []byte) (*document, error) {
	f, err := parser.ParseBytes(data, 0)
	if err != nil {
		var ye yaml.Error
		if errors.As(err, &ye) && ye.GetToken() != nil && ye.GetToken().Position != nil {
			return nil, &Error{Line: ye.GetToken().Position.Line, Reason: "malformed YAML: " + ye.GetMessage()}
		}
		return nil, &Error{Reason: "malformed YAML: " + err.Error()}
	}
	var body ast.Node
	for i, d := range f.Docs {
		if d == nil || d.Body == nil {
			continue
		}
		if _, comment := d.Body.(*ast.CommentGroupNode); comment {
			continue
		}
		if body != nil {
			return nil, &Error{Line: lineOf(d.Body), Reason: fmt.Sprintf("the file holds more than one YAML document (document %d)", i+1)}
		}
		body = d.Body
	}
	if body == nil {
		return nil, &Error{Line: 1, Reason: "the file is empty; an empty state is written {}"}
	}
	c := &converter{doc: &document{lines: map[string]int{}}, anchors: map[string]ast.Node{}}
	var buf bytes.Buffer
	if err := c.value(&buf, body, "", 0); err != nil {
		return nil, err
	}
	c.doc.json = buf.Bytes()
	return c.doc, nil
}

// converter writes a YAML tree as JSON.
type converter struct {
	doc     *document
	anchors map[string]ast.Node
	// aliasing counts the aliases being expanded, aliased the values
	// written through them.
	aliasing, aliased int
}

// lineOf is the line a node starts on.
func lineOf(n ast.Node) int {
	if t := n.GetToken(); t != nil && t.Position != nil {
		return t.Position.Line
	}
	return 0
}

// value writes n, found at path, as JSON into buf.
func (c *converter) value(buf *bytes.Buffer, n ast.Node, path string, depth int) error {
	if depth > maxDepth {
		return &Error{Line: lineOf(n), Field: path, Reason: fmt.Sprintf("nested more than %d deep", maxDepth)}
	}
	if c.aliasing > 0 {
		if c.aliased++; c.aliased > maxAliased {
			return &Error{Line: lineOf(n), Field: path, Reason: fmt.Sprintf("its aliases expand to more than %d values", maxAliased)}
		}
	}
	if _, seen := c.doc.lines[path]; !seen {
		c.doc.lines[path] = lineOf(n)
	}
	switch n := n.(type) {
	case *ast.MappingNode:
		return c.mapping(buf, n.Values, path, depth)
	case *ast.MappingValueNode:
		return c.mapping(buf, []*ast.MappingValueNode{n}, path, depth)
	case *ast.SequenceNode:
		buf.WriteByte('[')
		for i, v := range n.Values {
			if i > 0 {
				buf.WriteByte(',')
			}
			at := fmt.Sprintf("%s[%d]", path, i)
			c.doc.lines[at] = lineOf(v)
			if err := c.value(buf, v, at, depth+1); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
		return nil
	case *ast.AnchorNode:
		c.anchors[n.Name.GetToken().Value] = n.Value
		return c.value(buf, n.Value, path, depth+1)
	case *ast.AliasNode:
		name := n.Value.GetToken().Value
		target, ok := c.anchors[name]
		if !ok {
			return &Error{Line: lineOf(n), Field: path, Reason: fmt.Sprintf("alias *%s names no anchor before it", name)}
		}
		c.aliasing++
		defer func() { c.aliasing-- }()
		return c.value(buf, target, path, depth+1)
	case *ast.TagNode:
		return &Error{Line: lineOf(n), Field: path, Reason: fmt.Sprintf("YAML tags (%s) are not allowed", n.Start.Value)}
	case *ast.NullNode:
		buf.WriteString("null")
		return nil
	case *ast.BoolNode:
		fmt.Fprint(buf, n.Value)
		return nil
	case *ast.IntegerNode:
		return number(buf, n.Token.Value)
	case *ast.FloatNode:
		return number(buf, n.Token.Value)
	case *ast.StringNode:
		return text(buf, n.Value)
	case *ast.LiteralNode:
		return text(buf, n.Value.Value)
	case *ast.InfinityNode, *ast.NanNode:
		return text(buf, n.GetToken().Value)
	}
	return &Error{Line: lineOf(n), Field: path, Reason: fmt.Sprintf("a YAML %s is not allowed here", n.Type())}
}

// mapping writes the members of a mapping as a JSON object.
func (c *converter) mapping(buf *bytes.Buffer, members []*ast.MappingValueNode, path string, depth int) error {
	buf.WriteByte('{')
	seen := map[string]bool{}
	for i, m := range members {
		key, err := keyOf(m.Key)
		if err != nil {
			return &Error{Line: lineOf(m.Key), Field: path, Reason: err.Error()}
		}
		at := key
		if path != "" {
			at = path + "." + key
		}
		if seen[key] {
			return &Error{Line: lineOf(m.Key), Field: at, Reason: fmt.Sprintf("%q is given twice", key)}
		}
		seen[key] = true
		c.doc.lines[at] = lineOf(m.Key)
		if i > 0 {
			buf.WriteByte(',')
		}
		if err := text(buf, key); err != nil {
			return err
		}
		buf.WriteByte(':')
		if err := c.value(buf, m.Value, at, depth+1); err != nil {
			return err
		}
	}
	buf.WriteByte('}')
	return nil
}

// keyOf is the text of a mapping key: a scalar, not a merge key.
func keyOf(k ast.MapKeyNode) (string, error) {
	switch k := k.(type) {
	case *ast.StringNode:
		return k.Value, nil
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.NullNode:
		return k.GetToken().Value, nil
	case *ast.MergeKeyNode:
		return "", errors.New("merge keys (<<) are not allowed")
	}
	return "", fmt.Errorf("a key must be a plain name, not a YAML %s", k.Type())
}

// number writes a YAML number as a JSON number when its text is one, and
// as a JSON string otherwise.
func number(buf *bytes.Buffer, s string) error {
	if s != "" && (s[0] == '-' || s[0] >= '0' && s[0] <= '9') && json.Valid([]byte(s)) {
		buf.WriteString(s)
		return nil
	}
	return text(buf, s)
}

// text writes s as a JSON string.
func text(buf *bytes.Buffer, s string) error {
	b, err := json.Marshal(s)
	buf.Write(b)
	return err
}
