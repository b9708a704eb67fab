// Package docs_test keeps docs/architecture.md true to the code: every path
// it names exists, every Go package under pkg/ and cmd/ is named (the
// generated ones as pkg/generated), and every Go name it writes in
// backquotes as `package.Name` or `package.Type.Name` is declared there.
//
// Conventions the page follows, so that this test can read it:
//   - paths start with pkg/, cmd/, test/, hack/ or docs/, relative to the
//     repository; one level of braces lists siblings:
//     pkg/registry/kollect/{inventory,target};
//   - a Go name is qualified by its package's name, as code outside the
//     package would write it (`collect.Collector.syncObject`, also for
//     unexported names); `pkg.(*Type).Method` and a trailing () are
//     accepted. Name is a function, type, variable or constant; after a
//     type, a method, a struct field or an interface method of it. Where
//     two packages share a name (tenancy), either may declare it.
//
// The other dotted spans the page may hold are an object's field paths,
// which start with metadata, spec or status (status.collection); any other
// is a Go name whose package is misspelled or missing.
package docs_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const page = "docs/architecture.md"

// root is the repository, from this package's directory.
var root = filepath.Join("..", "..")

func TestArchitecturePage(t *testing.T) {
	text := readPage(t)
	pkgs := goPackages(t)

	named := namedPaths(text)
	for _, p := range named {
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(p))); err != nil {
			t.Errorf("%s names %s, which does not exist", page, p)
		}
	}
	for _, dir := range slices.Sorted(maps.Keys(pkgs.dirs)) {
		if !strings.HasPrefix(dir, "pkg/generated/") && !slices.Contains(named, dir) {
			t.Errorf("%s does not name the package %s: add it to the tables of section 1", page, dir)
		}
	}
	if !slices.Contains(named, "pkg/generated") {
		t.Errorf("%s does not name pkg/generated", page)
	}

	refs := goNames(text)
	if len(refs) < 20 {
		t.Fatalf("%s names only %d Go names in backquotes: is the page still read right?", page, len(refs))
	}
	for _, ref := range refs {
		if err := pkgs.resolve(ref); err != "" {
			t.Errorf("%s: `%s`: %s", page, ref, err)
		}
	}

	for _, link := range links(text) {
		if _, err := os.Stat(filepath.Join(root, "docs", filepath.FromSlash(link))); err != nil {
			t.Errorf("%s links to %s, which does not exist", page, link)
		}
	}
	t.Logf("checked %d paths and %d Go names against %d packages", len(named), len(refs), len(pkgs.dirs))
}

func readPage(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(page)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// pathRE finds paths in the whole page, prose, tables and code blocks
// alike; what precedes one may not be part of a longer path or a URL.
var pathRE = regexp.MustCompile(`(?:^|[^A-Za-z0-9_./-])((?:pkg|cmd|test|hack|docs)/[A-Za-z0-9_./{},-]*)`)

// namedPaths are the paths the page names, braces expanded.
func namedPaths(text string) []string {
	var out []string
	for _, m := range pathRE.FindAllStringSubmatch(text, -1) {
		// A sentence's punctuation is not part of the path.
		p := strings.TrimRight(m[1], ".,-/")
		for _, e := range expand(p) {
			if e = strings.TrimRight(e, "/"); !slices.Contains(out, e) {
				out = append(out, e)
			}
		}
	}
	return out
}

// expand expands one {a,b} in p.
func expand(p string) []string {
	open, end := strings.IndexByte(p, '{'), strings.IndexByte(p, '}')
	if open < 0 || end < open {
		return []string{p}
	}
	var out []string
	for _, alt := range strings.Split(p[open+1:end], ",") {
		out = append(out, p[:open]+alt+p[end+1:])
	}
	return out
}

var (
	fenceRE = regexp.MustCompile("(?ms)^```.*?^```")
	spanRE  = regexp.MustCompile("`([^`\n]+)`")
	// nameRE is a dotted Go name: pkg.Name, pkg.Type.Name, pkg.(*Type).Name.
	nameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(?:\.(?:\(\*[A-Za-z_][A-Za-z0-9_]*\)|[A-Za-z_][A-Za-z0-9_]*))+(?:\(\))?$`)
	linkRE = regexp.MustCompile(`\]\(([^)#:]+)(?:#[^)]*)?\)`)
)

// goNames are the backquoted spans outside code blocks that look like Go
// names.
func goNames(text string) []string {
	var out []string
	for _, m := range spanRE.FindAllStringSubmatch(fenceRE.ReplaceAllString(text, ""), -1) {
		if s := m[1]; nameRE.MatchString(s) && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// links are the page's relative links.
func links(text string) []string {
	var out []string
	for _, m := range linkRE.FindAllStringSubmatch(text, -1) {
		out = append(out, m[1])
	}
	return out
}

// decls is what one package declares.
type decls struct {
	top     map[string]bool            // funcs, types, vars, consts
	members map[string]map[string]bool // type → its methods, fields, interface methods
}

// packages are the Go packages of pkg/ and cmd/, by directory and by name.
type packages struct {
	dirs   map[string]*decls   // "pkg/controllers/collect" → its declarations
	byName map[string][]string // "collect" → its directories
}

func goPackages(t *testing.T) packages {
	t.Helper()
	ps := packages{dirs: map[string]*decls{}, byName: map[string][]string{}}
	fset := token.NewFileSet()
	for _, top := range []string{"pkg", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				if d != nil && d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
					return filepath.SkipDir
				}
				return err
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(root, filepath.Dir(path))
			if err != nil {
				return err
			}
			dir := filepath.ToSlash(rel)
			ds := ps.dirs[dir]
			if ds == nil {
				ds = &decls{top: map[string]bool{}, members: map[string]map[string]bool{}}
				ps.dirs[dir] = ds
				ps.byName[f.Name.Name] = append(ps.byName[f.Name.Name], dir)
			}
			ds.add(f)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(ps.dirs) < 30 {
		t.Fatalf("found only %d packages under pkg/ and cmd/", len(ps.dirs))
	}
	return ps
}

func (ds *decls) member(typ, name string) {
	if ds.members[typ] == nil {
		ds.members[typ] = map[string]bool{}
	}
	ds.members[typ][name] = true
}

// add records a file's declarations.
func (ds *decls) add(f *ast.File) {
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil || len(d.Recv.List) == 0 {
				ds.top[d.Name.Name] = true
				continue
			}
			if typ := receiverType(d.Recv.List[0].Type); typ != "" {
				ds.member(typ, d.Name.Name)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.ValueSpec:
					for _, n := range s.Names {
						ds.top[n.Name] = true
					}
				case *ast.TypeSpec:
					ds.top[s.Name.Name] = true
					var fields *ast.FieldList
					switch typ := s.Type.(type) {
					case *ast.StructType:
						fields = typ.Fields
					case *ast.InterfaceType:
						fields = typ.Methods
					}
					if fields == nil {
						continue
					}
					for _, fd := range fields.List {
						for _, n := range fd.Names {
							ds.member(s.Name.Name, n.Name)
						}
						if len(fd.Names) == 0 { // embedded: named by its type
							if typ := receiverType(fd.Type); typ != "" {
								ds.member(s.Name.Name, typ)
							}
						}
					}
				}
			}
		}
	}
}

// receiverType is the name of a receiver's (or an embedded field's) type:
// T, *T, T[K], pkg.T.
func receiverType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.SelectorExpr:
			return x.Sel.Name
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// fieldRoots start the field paths of objects.
var fieldRoots = []string{"metadata", "spec", "status"}

// resolve checks one dotted name; it returns what is wrong, "" when it is
// declared.
func (ps packages) resolve(ref string) string {
	parts := strings.Split(strings.TrimSuffix(ref, "()"), ".")
	for i, p := range parts {
		parts[i] = strings.TrimSuffix(strings.TrimPrefix(p, "(*"), ")")
	}
	dirs, ok := ps.byName[parts[0]]
	if !ok {
		if slices.Contains(fieldRoots, parts[0]) {
			return "" // a field path, not a Go name
		}
		return "no package is named " + parts[0] + " (a Go name starts with its package's name)"
	}
	if len(parts) > 3 {
		return "write package.Name or package.Type.Name"
	}
	for _, dir := range dirs {
		ds := ps.dirs[dir]
		if !ds.top[parts[1]] {
			continue
		}
		if len(parts) == 2 || ds.members[parts[1]][parts[2]] {
			return ""
		}
	}
	if len(parts) == 2 {
		return "no function, type, variable or constant " + parts[1] + " in " + strings.Join(dirs, " or ")
	}
	return "no type " + parts[1] + " with a method or field " + parts[2] + " in " + strings.Join(dirs, " or ")
}
