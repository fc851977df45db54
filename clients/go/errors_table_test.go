package mutexd

// The error tables of docs/clients.md, walked: every sentinel the Go table names exists with
// its parent, an error answer of its row's status and code matches it (and its parents, and
// no other), the Go table has the rows of the Python and Node.js table in the same order,
// and every exported sentinel of the package is in it. The Python and Node.js tests walk the
// first table, so the three clients cannot name or nest their errors differently.

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

var doc = filepath.Join("..", "..", "docs", "clients.md")

// unknownCode is a code no client knows: the status alone must choose the class.
const unknownCode = "some_code_of_a_newer_server"

// rows is the cells of the table whose header line is heading.
func rows(t *testing.T, heading string) [][]string {
	t.Helper()
	text, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(text), "\n")
	start := -1
	for i, l := range lines {
		if l == heading {
			start = i
			break
		}
	}
	if start < 0 {
		t.Fatalf("no table %q in %s", heading, doc)
	}
	var out [][]string
	for _, l := range lines[start+2:] {
		if !strings.HasPrefix(l, "|") {
			break
		}
		cells := strings.Split(strings.Trim(strings.TrimSpace(l), "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		out = append(out, cells)
	}
	if len(out) == 0 {
		t.Fatalf("the table %q is empty", heading)
	}
	return out
}

var quoted = regexp.MustCompile("^`([*\\w]+)`$")

func cellName(t *testing.T, cell string) string {
	t.Helper()
	if cell == "" {
		return ""
	}
	m := quoted.FindStringSubmatch(cell)
	if m == nil {
		t.Fatalf("not a name: %q", cell)
	}
	return m[1]
}

type answer struct {
	status int
	code   string // "" for an answer without the API's error body
}

// answers are the (status, code) pairs an error answer of this row may have; none for
// the rows that are not error answers.
func answers(status, code string) []answer {
	var codes []string
	for _, m := range regexp.MustCompile("`(\\w+)`").FindAllStringSubmatch(code, -1) {
		codes = append(codes, m[1])
	}
	if code == "any" || code == "any other" {
		codes = []string{unknownCode, ""}
	}
	var statuses []int
	switch {
	case regexp.MustCompile(`^\d{3}$`).MatchString(status):
		statuses = []int{int(status[0]-'0')*100 + int(status[1]-'0')*10 + int(status[2]-'0')}
	case status == "any other 5xx":
		statuses = []int{500, 502, 504}
	case status == "any other":
		statuses = []int{402, 418}
	default:
		return nil
	}
	var out []answer
	for _, s := range statuses {
		for _, c := range codes {
			out = append(out, answer{s, c})
		}
	}
	return out
}

func (a answer) error() error {
	body := []byte("<html><body>an error page of a proxy</body></html>")
	if a.code != "" {
		body = []byte(`{"error":{"code":"` + a.code + `","message":"m"}}`)
	}
	return newAPIError(a.status, http.Header{}, body)
}

// exported is every exported package-level variable of the package whose name starts
// with Err, read from its source files.
func exported(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range pkgs["mutexd"].Files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, spec := range g.Specs {
				for _, n := range spec.(*ast.ValueSpec).Names {
					if n.IsExported() && strings.HasPrefix(n.Name, "Err") {
						names = append(names, n.Name)
					}
				}
			}
		}
	}
	sort.Strings(names)
	return names
}

var sentinels = map[string]error{
	"ErrMutexd": ErrMutexd, "ErrTransport": ErrTransport, "ErrTimeout": ErrTimeout,
	"ErrProtocol": ErrProtocol, "ErrLeaseExpired": ErrLeaseExpired, "ErrAPI": ErrAPI,
	"ErrInvalidRequest": ErrInvalidRequest, "ErrUnauthorized": ErrUnauthorized,
	"ErrForbidden": ErrForbidden, "ErrNotFound": ErrNotFound,
	"ErrMethodNotAllowed": ErrMethodNotAllowed, "ErrConflict": ErrConflict,
	"ErrLeaseHeld": ErrLeaseHeld, "ErrLeaseLost": ErrLeaseLost,
	"ErrLimitMismatch": ErrLimitMismatch, "ErrBodyTooLarge": ErrBodyTooLarge,
	"ErrUnsupportedMediaType": ErrUnsupportedMediaType, "ErrTooManyWaiters": ErrTooManyWaiters,
	"ErrUnavailable": ErrUnavailable, "ErrServerError": ErrServerError,
}

type goRow struct {
	status, code, name, parent, typ string
}

func goTable(t *testing.T) []goRow {
	var out []goRow
	for _, r := range rows(t, "| status | code | Go | parent | type |") {
		if len(r) != 5 {
			t.Fatalf("a row of %d cells: %q", len(r), r)
		}
		out = append(out, goRow{r[0], r[1], cellName(t, r[2]), cellName(t, r[3]), cellName(t, r[4])})
	}
	return out
}

func TestTheGoTableHasTheRowsOfTheFirst(t *testing.T) {
	first := rows(t, "| status | code | Python | parent | Node.js | parent |")
	gos := goTable(t)
	if len(gos) != 20 || len(gos) != len(first) {
		t.Fatalf("%d rows, the first table %d", len(gos), len(first))
	}
	for i, r := range gos {
		if r.status != first[i][0] || r.code != first[i][1] {
			t.Errorf("row %d: %q %q, the first table %q %q", i+1, r.status, r.code, first[i][0], first[i][1])
		}
	}
}

func TestEverySentinelIsInTheTable(t *testing.T) {
	var inTable []string
	for _, r := range goTable(t) {
		inTable = append(inTable, r.name)
	}
	sort.Strings(inTable)
	if got := exported(t); strings.Join(got, " ") != strings.Join(inTable, " ") {
		t.Fatalf("exported sentinels %v, the table's %v", got, inTable)
	}
	if len(sentinels) != len(inTable) {
		t.Fatalf("the test knows %d sentinels, the table names %d", len(sentinels), len(inTable))
	}
}

// ancestry is the row's sentinel and its parents, by the table.
func ancestry(t *testing.T, table []goRow, name string) map[string]bool {
	byName := map[string]goRow{}
	for _, r := range table {
		byName[r.name] = r
	}
	out := map[string]bool{}
	for n := name; n != ""; n = byName[n].parent {
		if out[n] {
			t.Fatalf("a loop of parents at %s", n)
		}
		out[n] = true
	}
	return out
}

func TestEachSentinelHasItsParentAndIsChosenForItsAnswers(t *testing.T) {
	table := goTable(t)
	for _, r := range table {
		r := r
		t.Run(r.name, func(t *testing.T) {
			s, ok := sentinels[r.name]
			if !ok {
				t.Fatalf("no sentinel %s", r.name)
			}
			k := s.(*kind)
			if k.name != r.name {
				t.Fatalf("%s is named %s", r.name, k.name)
			}
			if parent := k.parent; (parent == nil) != (r.parent == "") || (parent != nil && parent.name != r.parent) {
				t.Fatalf("the parent of %s is %v, the table says %q", r.name, parent, r.parent)
			}
			want := ancestry(t, table, r.name)
			var errs []error
			for _, a := range answers(r.status, r.code) {
				errs = append(errs, a.error())
			}
			switch r.typ {
			case "*TransportError":
				errs = append(errs, &TransportError{Method: "GET", URL: "http://x/", Err: errors.New("refused"),
					timeout: r.name == "ErrTimeout", protocol: r.name == "ErrProtocol"})
			case "":
				if r.name == "ErrLeaseExpired" {
					errs = append(errs, &expiredError{msg: "lease expired"})
				} else if r.name != "ErrMutexd" {
					t.Fatalf("%s: no type", r.name)
				}
			case "*APIError":
				if len(errs) == 0 {
					t.Fatalf("%s: no answer", r.name)
				}
			default:
				t.Fatalf("%s: type %s", r.name, r.typ)
			}
			for _, err := range errs {
				for n, other := range sentinels {
					if got := errors.Is(err, other); got != want[n] {
						t.Errorf("%v: errors.Is(%s) is %v", err, n, got)
					}
				}
				switch r.typ {
				case "*APIError":
					var e *APIError
					if !errors.As(err, &e) {
						t.Errorf("%v is not an *APIError", err)
					}
				case "*TransportError":
					var e *TransportError
					if !errors.As(err, &e) || e.Timeout() != (r.name == "ErrTimeout") {
						t.Errorf("%v is not a *TransportError as the row says", err)
					}
				}
			}
			// The sentinel itself matches its parents, as errors.Is(ErrLeaseHeld, ErrConflict).
			for n, other := range sentinels {
				if got := errors.Is(s, other); got != want[n] {
					t.Errorf("errors.Is(%s, %s) is %v", r.name, n, got)
				}
			}
		})
	}
}

func TestIsRetryableFollowsTheTable(t *testing.T) {
	retryable := map[string]bool{"ErrTransport": true, "ErrTimeout": true, "ErrProtocol": true,
		"ErrUnavailable": true, "ErrTooManyWaiters": true, "ErrServerError": true}
	for _, r := range goTable(t) {
		if got := IsRetryable(sentinels[r.name]); got != retryable[r.name] {
			t.Errorf("IsRetryable(%s) is %v", r.name, got)
		}
		for _, a := range answers(r.status, r.code) {
			if got := IsRetryable(a.error()); got != retryable[r.name] {
				t.Errorf("IsRetryable(%d %s) is %v", a.status, a.code, got)
			}
		}
	}
	if IsRetryable(errors.New("x")) || IsRetryable(nil) {
		t.Error("an error of another package is not retryable")
	}
}
