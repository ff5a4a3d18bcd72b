package docs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The shell examples of README.md and docs/*.md that talk to budgetd run here,
// each document's in order in one bash against a fresh budgetd (memory store),
// as a reader following the document would run them. An example is a fenced
// block (```sh, ```bash, ```console or bare ```) or an indented block whose
// commands call curl or budgetd. Each command must exit 0 (or the status its
// comment names: "# exit 3"); every HTTP answer curl receives must be below 400
// unless the document shows that status; and an answer the document shows
// right after a command (a JSON line, or HTTP/1.1 … with headers and a JSON
// body; in a fenced document, the ```json or ```http block that follows the
// ```sh block, with at most one prose line ending in ':' between) must have the
// same field set as the server's answer, recursively: the same keys, values
// free. A shown answer with "…" outside its strings is elided: its keys must
// be a subset of the answer's. localhost:8080 and 127.0.0.1:8080 are
// rewritten to the test server's address, and $B and BUDGETD_SERVER name it.
// An instant to come written into a command is an error: the example would
// fail once it has passed (compute it in the shell, or use +DURATION).
//
// A block that cannot run here (it needs PostgreSQL or MySQL, starts a server,
// waits for long) is marked right before it, visibly:
//
//	<!-- no-run: needs PostgreSQL -->
//
// A marker not followed by a budgetd example is an error, and so is a
// document whose unmarked budgetd examples ran no command.

// exampleDocs are the documents whose examples run, relative to docs/.
func exampleDocs(t *testing.T) []string {
	docs, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"../README.md"}, docs...)
}

var (
	// reNoRun is the marker that exempts the next block.
	reNoRun = regexp.MustCompile(`^<!--\s*no-run:\s*(.*?)\s*-->$`)
	// reTalks finds a block that talks to budgetd: curl, or a budgetd command.
	reTalks = regexp.MustCompile(`(?m)(\bcurl\s|(^\s*(\$ )?|\$\(|[;&|]\s*)budgetd(\s|$))`)
	// reExit is a command's expected exit status, named in its comment.
	reExit = regexp.MustCompile(`\bexits? (\d+)\b`)
	// reStatus is an HTTP status a command's comment names ("# 204 No Content").
	reStatus = regexp.MustCompile(`^#\s*(\d{3})\b`)
	// reHTTP is the status line of a shown or received HTTP answer.
	reHTTP = regexp.MustCompile(`^HTTP/[0-9.]+ (\d{3})`)
	// reOldPort is the address the documents use for budgetd.
	reOldPort = regexp.MustCompile(`(localhost|127\.0\.0\.1):8080\b`)
)

// block is one code block of a document.
type block struct {
	line   int      // 1-based line of its first content line
	lang   string   // the fence's info string; "indent" for an indented block
	lines  []string // its content, indentation removed
	noRun  string   // the reason of a no-run marker before it
	marked bool     // a no-run marker stands before it
	after  string   // the prose between it and the next block
}

// shellBlock says whether b is shell rather than JSON, Go or output.
func (b block) shellBlock() bool {
	switch b.lang {
	case "indent", "", "sh", "bash", "shell", "console":
		return true
	}
	return false
}

// parseBlocks returns the code blocks of a markdown document in order, with
// their no-run markers; a marker before no block is an error.
func parseBlocks(doc string) ([]block, error) {
	lines := strings.Split(doc, "\n")
	var blocks []block
	var prose []string
	marker, markerLine, marked := "", 0, false
	flush := func(b block) {
		if len(blocks) > 0 {
			blocks[len(blocks)-1].after = strings.Join(prose, "\n")
		}
		prose = nil
		b.noRun, b.marked = marker, marked
		marker, marked = "", false
		blocks = append(blocks, b)
	}
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		trimmed := strings.TrimLeft(l, " ")
		if indent := len(l) - len(trimmed); indent < 4 && strings.HasPrefix(trimmed, "```") {
			b := block{line: i + 2, lang: strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))}
			j := i + 1
			for ; j < len(lines) && !strings.HasPrefix(strings.TrimLeft(lines[j], " "), "```"); j++ {
				c := lines[j]
				if len(c)-len(strings.TrimLeft(c, " ")) >= indent {
					c = c[indent:]
				}
				b.lines = append(b.lines, c)
			}
			if j == len(lines) {
				return nil, fmt.Errorf("line %d: unclosed fence", i+1)
			}
			flush(b)
			i = j
			continue
		}
		if strings.HasPrefix(l, "    ") && (i == 0 || strings.TrimSpace(lines[i-1]) == "") && !inList(lines, i) {
			b := block{line: i + 1, lang: "indent"}
			j := i
			for ; j < len(lines); j++ {
				if strings.HasPrefix(lines[j], "    ") {
					b.lines = append(b.lines, lines[j][4:])
					continue
				}
				if strings.TrimSpace(lines[j]) == "" && j+1 < len(lines) && strings.HasPrefix(lines[j+1], "    ") {
					b.lines = append(b.lines, "")
					continue
				}
				break
			}
			flush(b)
			i = j - 1
			continue
		}
		if m := reNoRun.FindStringSubmatch(strings.TrimSpace(l)); m != nil {
			if marked {
				return nil, fmt.Errorf("line %d: a no-run marker after the no-run marker of line %d, before no block", i+1, markerLine)
			}
			if m[1] == "" {
				return nil, fmt.Errorf("line %d: a no-run marker without a reason", i+1)
			}
			marker, markerLine, marked = m[1], i+1, true
			continue
		}
		if strings.TrimSpace(l) != "" {
			if marked {
				return nil, fmt.Errorf("line %d: the no-run marker is not right before a block", markerLine)
			}
			prose = append(prose, l)
		} else if len(prose) > 0 && prose[len(prose)-1] != "" {
			prose = append(prose, "")
		}
	}
	if marked {
		return nil, fmt.Errorf("line %d: the no-run marker is before no block", markerLine)
	}
	return blocks, nil
}

// inList says whether line i continues a list item (indented text after a
// blank line inside a list is not a code block).
func inList(lines []string, i int) bool {
	for j := i - 1; j >= 0; j-- {
		l := lines[j]
		if strings.TrimSpace(l) == "" {
			continue
		}
		t := strings.TrimLeft(l, " ")
		if strings.HasPrefix(t, "- ") || strings.HasPrefix(t, "* ") {
			return true
		}
		return len(l)-len(t) >= 2 && !strings.HasPrefix(l, "    ")
	}
	return false
}

// command is one shell command of an example with what the document shows of
// its result.
type command struct {
	line     int    // the document's line of its first line
	text     string // as the document writes it
	shown    string // the answer the document shows after it, if any
	wantCode int    // the exit status the document expects
}

// commands splits a shell block into commands and the answers shown after them.
func commands(b block) []command {
	prompt := slices.ContainsFunc(b.lines, func(l string) bool { return strings.HasPrefix(l, "$ ") })
	var cmds []command
	for i := 0; i < len(b.lines); i++ {
		l := b.lines[i]
		t := strings.TrimSpace(l)
		switch {
		case t == "":
			continue
		case prompt && !strings.HasPrefix(l, "$ "):
			// Output: a JSON answer is checked, other output is not.
			if len(cmds) > 0 && answerStart(t) {
				n := answerEnd(b.lines, i)
				cmds[len(cmds)-1].shown = strings.Join(b.lines[i:n], "\n")
				i = n - 1
			}
			continue
		case !prompt && strings.HasPrefix(t, "#"):
			continue
		case !prompt && answerStart(t) && len(cmds) > 0:
			n := answerEnd(b.lines, i)
			cmds[len(cmds)-1].shown = strings.Join(b.lines[i:n], "\n")
			i = n - 1
			continue
		}
		c := command{line: b.line + i, text: strings.TrimPrefix(l, "$ ")}
		for !complete(c.text) && i+1 < len(b.lines) {
			i++
			c.text += "\n" + b.lines[i]
		}
		if m := reExit.FindStringSubmatch(comment(c.text)); m != nil {
			c.wantCode, _ = strconv.Atoi(m[1])
		}
		cmds = append(cmds, c)
	}
	return cmds
}

// answerStart says whether a line starts an answer rather than a command.
func answerStart(t string) bool {
	return reHTTP.MatchString(t) || strings.HasPrefix(t, `{"`) || strings.HasPrefix(t, "[") || t == "{}"
}

// answerEnd returns the end of the answer that starts at line i: an HTTP
// status line, its headers and a blank line, then a JSON value over as many
// lines as its brackets need.
func answerEnd(lines []string, i int) int {
	if reHTTP.MatchString(strings.TrimSpace(lines[i])) {
		for i < len(lines) && strings.TrimSpace(lines[i]) != "" {
			i++
		}
		for i < len(lines) && strings.TrimSpace(lines[i]) == "" {
			i++
		}
		if i == len(lines) || !answerStart(strings.TrimSpace(lines[i])) {
			return i
		}
	}
	depth := 0
	for ; i < len(lines); i++ {
		depth += jsonDepth(lines[i])
		if depth <= 0 {
			return i + 1
		}
	}
	return i
}

// jsonDepth is the change of bracket depth over s, outside JSON strings.
func jsonDepth(s string) int {
	d, in, esc := 0, false, false
	for _, r := range s {
		switch {
		case esc:
			esc = false
		case in && r == '\\':
			esc = true
		case r == '"':
			in = !in
		case !in && (r == '{' || r == '['):
			d++
		case !in && (r == '}' || r == ']'):
			d--
		}
	}
	return d
}

// complete says whether s is a whole shell command: no open quote, no open
// parenthesis, no trailing backslash.
func complete(s string) bool {
	single, double, esc, paren := false, false, false, 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case esc:
			esc = false
		case single:
			single = c != '\''
		case c == '\\':
			esc = true
		case double:
			double = c != '"'
		case c == '\'':
			single = true
		case c == '"':
			double = true
		case c == '(':
			paren++
		case c == ')':
			paren--
		case c == '#' && (i == 0 || s[i-1] == ' ' || s[i-1] == '\t'):
			for i < len(s) && s[i] != '\n' {
				i++
			}
		}
	}
	return !single && !double && !esc && paren <= 0
}

// comment returns the comment of a command's last line, "" for none.
func comment(s string) string {
	single, double := false, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case single:
			single = c != '\''
		case double:
			double = c != '"'
		case c == '\'':
			single = true
		case c == '"':
			double = true
		case c == '#' && (i == 0 || s[i-1] == ' ' || s[i-1] == '\n'):
			end := strings.IndexByte(s[i:], '\n')
			if end < 0 {
				return s[i:]
			}
			i += end
		}
	}
	return ""
}

// followingAnswer returns the answer a fenced document shows after block i:
// the next block when it is ```json or ```http and at most one prose
// paragraph ending in ':' stands between.
func followingAnswer(blocks []block, i int) (string, bool) {
	if i+1 == len(blocks) || blocks[i].lang == "indent" {
		return "", false
	}
	next := blocks[i+1]
	if next.lang != "json" && next.lang != "http" {
		return "", false
	}
	prose := strings.TrimSpace(blocks[i].after)
	if prose != "" && (strings.Contains(prose, "\n\n") || !strings.HasSuffix(prose, ":")) {
		return "", false
	}
	return strings.Join(next.lines, "\n"), true
}

// example is one runnable block and its commands.
type example struct {
	b    block
	cmds []command
}

// TestExamplesRun runs every document's budgetd examples against its own
// fresh budgetd.
func TestExamplesRun(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal("bash: ", err)
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl: ", err)
	}
	bin := buildBudgetd(t)
	for _, path := range exampleDocs(t) {
		doc, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(path)
		blocks, err := parseBlocks(string(doc))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		var examples []example
		skipped := 0
		for i, b := range blocks {
			talks := b.shellBlock() && reTalks.MatchString(strings.Join(b.lines, "\n"))
			if b.marked && !talks {
				t.Errorf("%s:%d: a no-run marker before a block that does not talk to budgetd", name, b.line)
			}
			if !talks {
				continue
			}
			if b.marked {
				skipped++
				t.Logf("%s:%d: not run: %s", name, b.line, b.noRun)
				continue
			}
			cmds := commands(b)
			if shown, ok := followingAnswer(blocks, i); ok && len(cmds) > 0 {
				cmds[len(cmds)-1].shown = shown
			}
			examples = append(examples, example{b: b, cmds: cmds})
		}
		if len(examples) == 0 {
			if skipped > 0 {
				t.Logf("%s: every one of its %d budgetd examples is marked no-run", name, skipped)
			}
			continue
		}
		t.Run(name, func(t *testing.T) {
			ran := runDocument(t, bash, bin, name, examples)
			t.Logf("%s: %d examples (%d commands) ran, %d marked no-run", name, len(examples), ran, skipped)
			if ran == 0 {
				t.Errorf("%s has budgetd examples but ran none", name)
			}
		})
	}
}

// buildBudgetd builds the budgetd binary once from the module root.
func buildBudgetd(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "budgetd")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/budgetd")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/budgetd: %v\n%s", err, out)
	}
	return bin
}

// startBudgetd starts bin on a free loopback port with the memory store, waits
// for /healthz and stops it when the test ends. It returns its address.
func startBudgetd(t *testing.T, bin string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var log bytes.Buffer
	cmd := exec.Command(bin, "--addr", addr, "--store", "memory", "--log-level", "warn")
	cmd.Env = cleanEnv()
	cmd.Dir = t.TempDir()
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	client := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := client.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return addr
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("budgetd on %s: no /healthz within 20s: %v\n%s", addr, err, log.String())
		}
		select {
		case err := <-exited:
			t.Fatalf("budgetd exited before serving: %v\n%s", err, log.String())
		case <-tick.C:
		}
	}
}

// cleanEnv is the environment without budgetd's own variables.
func cleanEnv() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "BUDGETD_") })
}

// curlWrapper makes curl report each answer's status on stderr (unless the
// example sets its own --write-out) and give up after 10 seconds.
const curlWrapper = `curl() {
  local a
  for a in "$@"; do case $a in -w|--write-out|-w*) command curl --max-time 10 "$@"; return;; esac; done
  command curl --max-time 10 -w '%{stderr}DOCS-HTTP-STATUS %{http_code}\n' "$@"
}
`

// runDocument runs a document's examples in one bash against a fresh budgetd
// and checks each command. It returns how many commands ran.
func runDocument(t *testing.T, bash, bin, name string, examples []example) int {
	addr := startBudgetd(t, bin)
	out := t.TempDir()
	work := t.TempDir()
	var script strings.Builder
	script.WriteString(curlWrapper)
	var all []command
	for _, ex := range examples {
		fmt.Fprintf(&script, "# %s:%d\n", name, ex.b.line)
		for _, c := range ex.cmds {
			if p := timeBomb(c.text, time.Now()); p != "" {
				t.Errorf("%s:%d: `%s`: %s", name, c.line, c.text, p)
			}
			n := len(all)
			all = append(all, c)
			text := reOldPort.ReplaceAllString(c.text, addr)
			fmt.Fprintf(&script, "{\n%s\n} >%q 2>%q </dev/null; echo $? >%q\n", text,
				filepath.Join(out, fmt.Sprint(n, ".out")), filepath.Join(out, fmt.Sprint(n, ".err")),
				filepath.Join(out, fmt.Sprint(n, ".rc")))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sh := exec.CommandContext(ctx, bash, "--noprofile", "--norc")
	sh.Stdin = strings.NewReader(script.String())
	sh.Dir = work
	sh.Env = append(cleanEnv(),
		"PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"B=http://"+addr, "BUDGETD_SERVER=http://"+addr)
	var shOut bytes.Buffer
	sh.Stdout, sh.Stderr = &shOut, &shOut
	// The shell and whatever an example leaves running are one process
	// group, ended with the shell.
	sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	sh.Cancel = func() error { return syscall.Kill(-sh.Process.Pid, syscall.SIGKILL) }
	sh.WaitDelay = 5 * time.Second
	err := sh.Run()
	if sh.Process != nil {
		_ = syscall.Kill(-sh.Process.Pid, syscall.SIGKILL)
	}
	if err != nil {
		t.Errorf("%s: bash: %v\n%s", name, err, shOut.String())
	}
	ran := 0
	for n, c := range all {
		where := fmt.Sprintf("%s:%d", name, c.line)
		rc, err := os.ReadFile(filepath.Join(out, fmt.Sprint(n, ".rc")))
		if err != nil {
			t.Errorf("%s: `%s` did not run (the shell stopped before it)", where, c.text)
			continue
		}
		ran++
		stdout, _ := os.ReadFile(filepath.Join(out, fmt.Sprint(n, ".out")))
		stderr, _ := os.ReadFile(filepath.Join(out, fmt.Sprint(n, ".err")))
		if p := checkCommand(c, strings.TrimSpace(string(rc)), string(stdout), string(stderr)); len(p) > 0 {
			t.Errorf("%s: `%s`:\n\t%s\nstdout: %s\nstderr: %s", where, c.text, strings.Join(p, "\n\t"), stdout, stderr)
		}
	}
	return ran
}

// reInstant is an RFC 3339 instant written into a command.
var reInstant = regexp.MustCompile(`\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})`)

// timeBomb finds an instant after now written into a command: the example
// stops working once it has passed (an expires_at in the past is a 400).
func timeBomb(text string, now time.Time) string {
	for _, s := range reInstant.FindAllString(text, -1) {
		if at, err := time.Parse(time.RFC3339Nano, s); err == nil && at.After(now) {
			return fmt.Sprintf("%s is a fixed instant to come: the example fails after it; compute it in the shell ($(date -u -d '+7 days' +%%Y-%%m-%%dT%%H:%%M:%%SZ)) or use --expires-at +DURATION", s)
		}
	}
	return ""
}

// checkCommand returns what is wrong with a command's result.
func checkCommand(c command, rc, stdout, stderr string) []string {
	var problems []string
	if rc != strconv.Itoa(c.wantCode) {
		problems = append(problems, fmt.Sprintf("exit status %s, want %d", rc, c.wantCode))
	}
	wantStatus := 0
	if m := reStatus.FindStringSubmatch(comment(c.text)); m != nil {
		wantStatus, _ = strconv.Atoi(m[1])
	}
	var shown any
	elided := false
	if c.shown != "" {
		status, body := splitHTTP(c.shown)
		if status != 0 {
			wantStatus = status
		}
		if body != "" {
			var err error
			if shown, elided, err = parseShown(body); err != nil {
				return append(problems, fmt.Sprintf("the shown answer is not JSON: %v", err))
			}
			if p, ok := shown.(map[string]any); ok && wantStatus == 0 {
				if s, ok := p["status"].(float64); ok && strings.HasPrefix(fmt.Sprint(p["type"]), "urn:budgetd:problem:") {
					wantStatus = int(s)
				}
			}
		}
	}
	for _, l := range strings.Split(stderr, "\n") {
		s, ok := strings.CutPrefix(l, "DOCS-HTTP-STATUS ")
		if !ok {
			continue
		}
		code, _ := strconv.Atoi(s)
		if (code >= 400 || code == 0) && code != wantStatus {
			problems = append(problems, fmt.Sprintf("HTTP status %d", code))
		}
	}
	if c.shown == "" {
		return problems
	}
	status, body := splitHTTP(strings.TrimSpace(stdout))
	if wantStatus != 0 && status != 0 && status != wantStatus {
		problems = append(problems, fmt.Sprintf("HTTP status %d, the document shows %d", status, wantStatus))
	}
	if shown == nil {
		return problems
	}
	got, err := lastJSON(body)
	if err != nil {
		return append(problems, fmt.Sprintf("the answer is not JSON: %v", err))
	}
	problems = append(problems, sameFields("", shown, got, elided)...)
	if len(problems) > 0 {
		problems = append(problems, "the document shows: "+c.shown)
	}
	return problems
}

// splitHTTP splits an HTTP answer (status line, headers, blank line, body)
// into its status and body; text without a status line is all body.
func splitHTTP(s string) (int, string) {
	m := reHTTP.FindStringSubmatch(s)
	if m == nil {
		return 0, s
	}
	code, _ := strconv.Atoi(m[1])
	s = strings.ReplaceAll(s, "\r\n", "\n")
	_, body, _ := strings.Cut(s, "\n\n")
	return code, strings.TrimSpace(body)
}

// lastJSON decodes the JSON values of s and returns the last one.
func lastJSON(s string) (any, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	var last any
	n := 0
	for {
		var v any
		if err := dec.Decode(&v); err != nil {
			if n > 0 && errors.Is(err, io.EOF) {
				return last, nil
			}
			return nil, err
		}
		last, n = v, n+1
	}
}

// parseShown parses a shown answer; "…" outside its strings (an elided
// member, item or rest) is dropped and makes the answer elided.
func parseShown(s string) (any, bool, error) {
	var b strings.Builder
	in, esc, elided := false, false, false
	last := byte(0) // the last significant byte written outside strings
	pendingComma := false
	for _, r := range s {
		if in {
			b.WriteRune(r)
			switch {
			case esc:
				esc = false
			case r == '\\':
				esc = true
			case r == '"':
				in = false
				last = '"'
			}
			continue
		}
		switch {
		case r == '…':
			elided = true
		case r == ' ' || r == '\t' || r == '\n' || r == '\r':
		case r == ',':
			pendingComma = true
		default:
			if pendingComma && last != '{' && last != '[' && last != ',' && last != 0 && r != '}' && r != ']' {
				b.WriteByte(',')
				last = ','
			}
			pendingComma = false
			b.WriteRune(r)
			if r == '"' {
				in = true
			} else if r < 128 {
				last = byte(r)
			}
		}
	}
	var v any
	if err := json.Unmarshal([]byte(b.String()), &v); err != nil {
		return nil, elided, fmt.Errorf("%v in %s", err, b.String())
	}
	return v, elided, nil
}

// sameFields compares the field sets of a shown and a received answer,
// recursively; elided, the shown keys need only be among the received ones.
func sameFields(path string, shown, got any, elided bool) []string {
	var problems []string
	switch s := shown.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			if got != nil {
				problems = append(problems, fmt.Sprintf("%s: the document shows an object, the answer has %T", orTop(path), got))
			}
			return problems
		}
		for k := range s {
			if _, ok := g[k]; !ok {
				problems = append(problems, fmt.Sprintf("%s: the document shows %q, the answer has no such member", orTop(path), k))
			}
		}
		if !elided {
			for k := range g {
				if _, ok := s[k]; !ok {
					problems = append(problems, fmt.Sprintf("%s: the answer has %q, the document does not show it (show it, or elide with …)", orTop(path), k))
				}
			}
		}
		for k, v := range s {
			if gv, ok := g[k]; ok {
				problems = append(problems, sameFields(path+"."+k, v, gv, elided)...)
			}
		}
	case []any:
		g, ok := got.([]any)
		if !ok {
			return problems
		}
		if len(g) < len(s) {
			problems = append(problems, fmt.Sprintf("%s: the document shows %d items, the answer has %d", orTop(path), len(s), len(g)))
		}
		for i := range min(len(s), len(g)) {
			problems = append(problems, sameFields(fmt.Sprintf("%s[%d]", path, i), s[i], g[i], elided)...)
		}
	}
	slices.Sort(problems)
	return problems
}

func orTop(path string) string {
	if path == "" {
		return "the answer"
	}
	return path
}
