package validation

import (
	"fmt"
	"net/mail"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"kollect.dev/kollect/pkg/apis/kollect"
)

// Placeholders each template may use. {cluster} is the server's
// --cluster-name, which admission does not know: templates are checked
// for their shape only, and the sinks check the expanded value.
var (
	pathPlaceholders    = []string{"cluster", "namespace", "inventory", "ext"}
	commitPlaceholders  = []string{"cluster", "namespace", "inventory", "itemCount", "checksum"}
	subjectPlaceholders = []string{"cluster", "namespace", "inventory", "kind", "name"}
)

const (
	maxTemplateLength      = 1024
	maxNATSNameLength      = 255
	maxRefLength           = 255
	maxEmailLength         = 254
	maxSQLIdentifierLength = 63
	// maxSQLTableLength leaves room for the "_cursors" suffix of the
	// cursor table within Postgres' 63-byte identifiers.
	maxSQLTableLength = maxSQLIdentifierLength - len("_cursors")
)

var sqlIdentifierRegexp = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// validateRequiredTemplate checks a required template.
func validateRequiredTemplate(tmpl string, placeholders []string, fldPath *field.Path) field.ErrorList {
	switch {
	case tmpl == "":
		return field.ErrorList{field.Required(fldPath, "")}
	case len(tmpl) > maxTemplateLength:
		return field.ErrorList{field.TooLong(fldPath, tmpl, maxTemplateLength)}
	}
	return validatePlaceholders(tmpl, placeholders, fldPath)
}

// validatePlaceholders checks that a template's braces enclose only the
// given placeholder names.
func validatePlaceholders(tmpl string, placeholders []string, fldPath *field.Path) field.ErrorList {
	for rest := tmpl; ; {
		open := strings.IndexAny(rest, "{}")
		if open < 0 {
			return nil
		}
		end := strings.IndexByte(rest[open:], '}')
		if rest[open] == '}' || end < 0 {
			return field.ErrorList{field.Invalid(fldPath, tmpl, "has unbalanced braces")}
		}
		if name := rest[open+1 : open+end]; !slices.Contains(placeholders, name) {
			return field.ErrorList{field.Invalid(fldPath, tmpl, fmt.Sprintf("has the unknown placeholder {%s}; use %s", name, placeholderList(placeholders)))}
		}
		rest = rest[open+end+1:]
	}
}

func placeholderList(placeholders []string) string {
	braced := make([]string, len(placeholders))
	for i, p := range placeholders {
		braced[i] = "{" + p + "}"
	}
	return strings.Join(braced, ", ")
}

// validatePathTemplate checks a relative file path template that may not
// leave the directory it is relative to.
func validatePathTemplate(tmpl string, fldPath *field.Path) field.ErrorList {
	switch {
	case strings.HasPrefix(tmpl, "/"):
		return field.ErrorList{field.Invalid(fldPath, tmpl, "must be a relative path")}
	case hasDotDot(tmpl) || strings.Contains(tmpl, `\`):
		return field.ErrorList{field.Invalid(fldPath, tmpl, `must not contain ".." segments or backslashes`)}
	}
	return validateRequiredTemplate(tmpl, pathPlaceholders, fldPath)
}

// validateSubjectTemplate checks a NATS subject to publish to: dot-separated
// tokens without whitespace or wildcards.
func validateSubjectTemplate(subject string, fldPath *field.Path) field.ErrorList {
	if errs := validateRequiredTemplate(subject, subjectPlaceholders, fldPath); len(errs) > 0 {
		return errs
	}
	if strings.ContainsAny(subject, "*>") || strings.IndexFunc(subject, isSpaceOrControl) >= 0 {
		return field.ErrorList{field.Invalid(fldPath, subject, "must not contain whitespace or the wildcards '*' and '>'")}
	}
	if slices.Contains(strings.Split(subject, "."), "") {
		return field.ErrorList{field.Invalid(fldPath, subject, "must be dot-separated tokens, none of them empty")}
	}
	return nil
}

var (
	streamNameRule = stringRule{maxNATSNameLength, isStreamName,
		`a NATS stream name must not contain whitespace, '.', '*', '>', '/' or '\'`}
	branchRule        = stringRule{maxRefLength, isBranchName, "must be a valid Git branch name (see git check-ref-format)"}
	authorNameRule    = stringRule{maxTemplateLength, isAuthorName, "must not contain '<', '>' or control characters"}
	emailRule         = stringRule{maxEmailLength, isEmail, "must be an email address such as kollect@example.com"}
	sqlIdentifierRule = stringRule{maxSQLIdentifierLength, sqlIdentifierRegexp.MatchString,
		"must be a SQL identifier: a letter or '_' followed by letters, digits or '_'"}
	sqlTableRule = stringRule{maxSQLTableLength, sqlIdentifierRegexp.MatchString,
		"must be a SQL identifier: a letter or '_' followed by letters, digits or '_'"}
)

func isStreamName(name string) bool {
	return !strings.ContainsAny(name, `.*>/\`) && strings.IndexFunc(name, isSpaceOrControl) < 0
}

func isSpaceOrControl(r rune) bool {
	return unicode.IsSpace(r) || unicode.IsControl(r)
}

// isBranchName follows git check-ref-format.
func isBranchName(branch string) bool {
	bad := strings.ContainsAny(branch, " ~^:?*[\\") || strings.Contains(branch, "..") ||
		strings.Contains(branch, "@{") || strings.Contains(branch, "//") || branch == "@" ||
		strings.HasPrefix(branch, "/") || strings.HasPrefix(branch, "-") || strings.HasPrefix(branch, ".") ||
		strings.HasSuffix(branch, "/") || strings.HasSuffix(branch, ".") || strings.HasSuffix(branch, ".lock") ||
		strings.Contains(branch, "/.") || strings.IndexFunc(branch, isSpaceOrControl) >= 0
	return !bad
}

func isAuthorName(name string) bool {
	return !strings.ContainsAny(name, "<>") && strings.IndexFunc(name, unicode.IsControl) < 0
}

func isEmail(email string) bool {
	addr, err := mail.ParseAddress(email)
	return err == nil && addr.Address == email
}

func validateGitConfig(git *kollect.GitSinkConfig, fldPath *field.Path) field.ErrorList {
	if git == nil {
		return field.ErrorList{requireBlock("git")}
	}
	errs := branchRule.validate(git.Branch, fldPath.Child("branch"))
	errs = append(errs, validatePathTemplate(git.PathTemplate, fldPath.Child("pathTemplate"))...)
	errs = append(errs, validateRequiredTemplate(git.CommitMessage, commitPlaceholders, fldPath.Child("commitMessage"))...)
	errs = append(errs, authorNameRule.validate(git.AuthorName, fldPath.Child("authorName"))...)
	return append(errs, emailRule.validate(git.AuthorEmail, fldPath.Child("authorEmail"))...)
}

func validatePostgresConfig(pg *kollect.PostgresSinkConfig, fldPath *field.Path) field.ErrorList {
	if pg == nil {
		return field.ErrorList{requireBlock("postgres")}
	}
	errs := sqlIdentifierRule.validate(pg.Schema, fldPath.Child("schema"))
	return append(errs, sqlTableRule.validate(pg.Table, fldPath.Child("table"))...)
}
