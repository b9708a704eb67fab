// Package postgres is the postgres DatabaseSink: it keeps one row per
// exported item in a table, keyed by the inventory and the item's UID, and
// the exporter's cursor beside it.
//
// Layout, in spec.postgres.schema (default public):
//
//   - <table> (default kollect_inventory): one row per item, primary key
//     (inventory_namespace, inventory_name, item_uid). inventory_namespace
//     is "" for a ClusterInventory so that it can be part of the key. The
//     item's identity, target, profile and source are text columns;
//     attributes and object are jsonb (NULL when the item has none); hash
//     is the item's content hash, which State reports back; exported_at is
//     the time of the transaction that last wrote the row.
//   - <table>_cursors: one row per inventory, primary key
//     (inventory_namespace, inventory_name), holding the cursor of the last
//     applied batch.
//
// Apply writes the cursor in the same transaction as the rows it
// describes: after a crash either the batch and its cursor are both
// stored or neither is, so the exporter resumes from a cursor that matches
// the rows exactly, and State (read from one snapshot) is always a
// consistent pair.
//
// Both tables are created on first use when missing. Errors never contain
// the Secret's password or DSN.
//
// Connections go through the server's netguard.Dialer: every host of the
// connection string (fallback hosts included) is resolved and checked by it
// and only checked IPs are dialed; Unix socket hosts are refused, and so are
// connection string parameters that make pgx read local files (passfile,
// servicefile, sslkey, ...): the connection string is a tenant's.
package postgres

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
	"kollect.dev/kollect/pkg/netguard"
)

const (
	// maxConns keeps the pool small: the exporter applies one batch per
	// inventory at a time, and a sink must not exhaust a shared server.
	maxConns = 4
	// copyThreshold is the number of upserts above which COPY into a
	// staging table beats one INSERT per row.
	copyThreshold = 100
	// defaultConnectTimeout bounds a connection attempt when the DSN sets
	// no connect_timeout, so an unreachable endpoint fails the probe
	// instead of waiting for the caller's deadline.
	defaultConnectTimeout = 10 * time.Second
	// maxIdentifierLen is PostgreSQL's NAMEDATALEN-1. Longer names are
	// truncated silently, which could make "<table>_cursors" name the item
	// table itself.
	maxIdentifierLen = 63
	cursorsSuffix    = "_cursors"
	// stagingTable is the temporary table COPY fills; ON COMMIT DROP
	// removes it with the transaction, committed or not.
	stagingTable = "kollect_apply_staging"
)

// itemColumns are the columns Apply writes, in the order of itemRow;
// exported_at is set by the statement.
var itemColumns = []string{
	"inventory_kind", "inventory_namespace", "inventory_name",
	"item_uid", "item_namespace", "item_name", "item_resource_version",
	"target", "profile",
	"source_api_version", "source_kind", "source_namespace", "source_name", "source_uid",
	"attributes", "object", "hash",
}

// Sink is the postgres DatabaseSink.
type Sink struct {
	pool *pgxpool.Pool
	// schema, table and cursors are quoted for SQL text; rawSchema and
	// rawTable are the plain names.
	schema, table, cursors string
	rawSchema, rawTable    string
	// lockKey serializes table creation across processes.
	lockKey int64
	// secrets are scrubbed from every returned error, longest first.
	secrets []string

	// ddlMu guards ddlDone: the tables are created once per Sink, and a
	// failed attempt is retried on the next call.
	ddlMu   sync.Mutex
	ddlDone bool

	// copies and batches count the upsert paths Apply took; tests read them.
	copies, batches atomic.Int64

	// SQL built once from the names.
	upsertSQL, fromStagingSQL, deleteItemsSQL, cursorSQL string
}

var _ sink.DatabaseSink = (*Sink)(nil)

// New validates the spec and Secret and returns a Sink. It does not
// connect: the first call does, and Probe tests the connection. Invalid
// configuration wraps sink.ErrPermanent.
//
// The connection string is the Secret's "dsn" when present; otherwise
// spec.endpoint with the Secret's "username" and "password". When spec.tls
// is set it overrides the DSN's TLS settings: every connection attempt
// uses TLS, verified as spec.tls says.
func New(ctx context.Context, spec *v1alpha1.DatabaseSinkSpec, secret sink.Secret, dialer *netguard.Dialer) (*Sink, error) {
	s := &Sink{}
	s.addSecrets(secret.Get("dsn"), secret.Get("password"))
	cfg, err := s.poolConfig(spec, secret)
	if err == nil {
		err = guard(&cfg.ConnConfig.Config, dialer)
	}
	if err == nil {
		err = s.setNames(spec.Postgres)
	}
	if err != nil {
		return nil, s.wrap("postgres sink configuration", fmt.Errorf("%w: %w", err, sink.ErrPermanent))
	}
	// The pool outlives New's context; with MinConns 0 it does not connect
	// here.
	s.pool, err = pgxpool.NewWithConfig(context.WithoutCancel(ctx), cfg)
	if err != nil {
		return nil, s.wrap("postgres sink configuration", fmt.Errorf("%w: %w", err, sink.ErrPermanent))
	}
	return s, nil
}

func (s *Sink) poolConfig(spec *v1alpha1.DatabaseSinkSpec, secret sink.Secret) (*pgxpool.Config, error) {
	if spec == nil {
		return nil, errors.New("no spec")
	}
	if spec.Type != v1alpha1.DatabaseSinkPostgres {
		return nil, fmt.Errorf("type %q is not %q", spec.Type, v1alpha1.DatabaseSinkPostgres)
	}
	var cfg *pgxpool.Config
	if dsn := secret.Get("dsn"); dsn != "" {
		if err := checkKeys(dsn, "secret key dsn"); err != nil {
			return nil, err
		}
		c, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			// pgx masks the password in parse errors only on a best-effort
			// basis and cannot for malformed strings; say nothing of it.
			return nil, errors.New("secret key dsn is not a valid connection string")
		}
		// The DSN may spell the password percent-encoded or quoted; scrub
		// the decoded form too.
		s.addSecrets(c.ConnConfig.Password)
		cfg = c
	} else {
		if spec.Endpoint == "" {
			return nil, errors.New("endpoint is empty and the Secret has no dsn key")
		}
		u, err := url.Parse(spec.Endpoint)
		if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			return nil, errors.New("endpoint is not a postgres:// URL")
		}
		if _, ok := u.User.Password(); ok || u.Query().Has("password") {
			return nil, errors.New("endpoint must not contain a password: put it in the Secret")
		}
		if err := checkKeys(spec.Endpoint, "endpoint"); err != nil {
			return nil, err
		}
		c, err := pgxpool.ParseConfig(spec.Endpoint)
		if err != nil {
			return nil, fmt.Errorf("endpoint: %w", err)
		}
		// Set on the parsed config, not spliced into the URL: nothing to
		// escape, and no connection string holding the password exists.
		if user := secret.Get("username"); user != "" {
			c.ConnConfig.User = user
		}
		if pw := secret.Get("password"); pw != "" {
			c.ConnConfig.Password = pw
		}
		cfg = c
	}
	if spec.TLS != nil {
		tlsCfg, err := sink.TLSConfig(spec.TLS)
		if err != nil {
			return nil, err
		}
		requireTLS(&cfg.ConnConfig.Config, tlsCfg)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = defaultConnectTimeout
	}
	cfg.MaxConns = maxConns
	cfg.MinConns = 0
	return cfg, nil
}

// allowedKeys are the connection string parameters a sink may set: where
// and how to connect and authenticate, and session settings. Left out are
// those that make pgx read the server's files (passfile, servicefile and
// service, sslcert, sslkey, sslrootcert, sslpassword) and hostaddr, which
// pgx would send to the server as a setting; spec.tls carries a CA bundle.
var allowedKeys = []string{
	"host", "port", "dbname", "user", "password",
	"sslmode", "sslnegotiation", "sslsni", "channel_binding", "require_auth",
	"min_protocol_version", "max_protocol_version",
	"connect_timeout", "target_session_attrs", "application_name", "search_path", "options",
	"statement_cache_capacity", "description_cache_capacity", "default_query_exec_mode",
	"pool_max_conns", "pool_min_conns", "pool_min_idle_conns", "pool_max_conn_lifetime",
	"pool_max_conn_lifetime_jitter", "pool_max_conn_idle_time", "pool_health_check_period",
}

// sqlState is the form of an SQLSTATE code; anything else a server sends
// as one is not repeated.
var sqlState = regexp.MustCompile(`^[0-9A-Z]{5}$`)

var disallowedKey = regexp.MustCompile(`key "([a-z_]{1,40})" is not in ConnStringAllowedKeys`)

// checkKeys refuses a connection string with a parameter outside
// allowedKeys, before pgx reads any file it names.
func checkKeys(connString, what string) error {
	_, err := pgconn.ParseConfigWithOptions(connString, pgconn.ParseConfigOptions{ConnStringAllowedKeys: allowedKeys})
	if err == nil {
		return nil
	}
	// The parse error quotes the connection string: name the key only.
	if m := disallowedKey.FindStringSubmatch(err.Error()); m != nil {
		return fmt.Errorf("%s sets %s, which a sink may not: the allowed parameters are %s", what, m[1], strings.Join(allowedKeys, ", "))
	}
	return fmt.Errorf("%s is not a valid connection string", what)
}

// guard makes every connection of cfg go through dialer: host names are
// resolved and checked by it (LookupFunc returns checked IPs) and dials
// take only those IPs, for the primary host and every fallback. A Unix
// socket host is refused here, with a clear error, rather than at the
// first connection.
func guard(cfg *pgconn.Config, dialer *netguard.Dialer) error {
	if dialer == nil {
		return errors.New("no dialer")
	}
	hosts := []string{cfg.Host}
	for _, fb := range cfg.Fallbacks {
		hosts = append(hosts, fb.Host)
	}
	for _, h := range hosts {
		if network, _ := pgconn.NetworkAddress(h, 5432); network == "unix" {
			return &netguard.Error{Host: h, Class: netguard.LocalSocket}
		}
	}
	cfg.LookupFunc = dialer.LookupHost
	cfg.DialFunc = dialer.DialContext
	return nil
}

// requireTLS makes every connection attempt use tlsCfg. The DSN's sslmode
// may have planned plaintext attempts (disable, allow, prefer) as
// fallbacks; spec.tls forbids them. The server name defaults to each
// attempt's host.
func requireTLS(cfg *pgconn.Config, tlsCfg *tls.Config) {
	forHost := func(host string) *tls.Config {
		c := tlsCfg.Clone()
		if c.ServerName == "" {
			c.ServerName = host
		}
		return c
	}
	cfg.TLSConfig = forHost(cfg.Host)
	type hostPort struct {
		host string
		port uint16
	}
	seen := map[hostPort]bool{{cfg.Host, cfg.Port}: true}
	var fallbacks []*pgconn.FallbackConfig
	for _, fb := range cfg.Fallbacks {
		// sslmode=prefer lists each host twice, with and without TLS.
		if seen[hostPort{fb.Host, fb.Port}] {
			continue
		}
		seen[hostPort{fb.Host, fb.Port}] = true
		fallbacks = append(fallbacks, &pgconn.FallbackConfig{Host: fb.Host, Port: fb.Port, TLSConfig: forHost(fb.Host)})
	}
	cfg.Fallbacks = fallbacks
}

func (s *Sink) setNames(pg *v1alpha1.PostgresSinkConfig) error {
	schema, table := v1alpha1.DefaultPostgresSchema, v1alpha1.DefaultPostgresTable
	if pg != nil && pg.Schema != "" {
		schema = pg.Schema
	}
	if pg != nil && pg.Table != "" {
		table = pg.Table
	}
	if len(schema) > maxIdentifierLen || strings.ContainsRune(schema, 0) {
		return fmt.Errorf("postgres.schema must be at most %d bytes", maxIdentifierLen)
	}
	// The cursor table's name must not be truncated.
	if limit := maxIdentifierLen - len(cursorsSuffix); len(table) > limit || strings.ContainsRune(table, 0) {
		return fmt.Errorf("postgres.table must be at most %d bytes", limit)
	}
	s.rawSchema, s.rawTable = schema, table
	s.schema = pgx.Identifier{schema}.Sanitize()
	s.table = pgx.Identifier{schema, table}.Sanitize()
	s.cursors = pgx.Identifier{schema, table + cursorsSuffix}.Sanitize()
	h := fnv.New64a()
	h.Write([]byte("kollect.dev/postgres-sink\x00" + schema + "\x00" + table))
	s.lockKey = int64(h.Sum64()) //nolint:gosec // any 64 bits make a lock key

	cols := strings.Join(itemColumns, ", ")
	params := make([]string, len(itemColumns))
	var set, content, excluded []string
	for i, c := range itemColumns {
		params[i] = fmt.Sprintf("$%d", i+1)
		if i >= 3 { // the inventory identity never changes for a key
			set = append(set, c+" = EXCLUDED."+c)
		}
		if i >= 4 && c != "item_resource_version" {
			content, excluded = append(content, "t."+c), append(excluded, "EXCLUDED."+c)
		}
	}
	set = append(set, "exported_at = EXCLUDED.exported_at")
	// A row that already holds the content is left alone: the periodic full
	// sync then rewrites only rows that drifted, and exported_at keeps
	// saying when a row's content last changed.
	onConflict := " ON CONFLICT (inventory_namespace, inventory_name, item_uid) DO UPDATE SET " + strings.Join(set, ", ") +
		" WHERE (" + strings.Join(content, ", ") + ") IS DISTINCT FROM (" + strings.Join(excluded, ", ") + ")"
	s.upsertSQL = "INSERT INTO " + s.table + " AS t (" + cols + ", exported_at) VALUES (" +
		strings.Join(params, ", ") + ", now())" + onConflict
	s.fromStagingSQL = "INSERT INTO " + s.table + " AS t (" + cols + ", exported_at) SELECT " + cols +
		", now() FROM " + pgx.Identifier{"pg_temp", stagingTable}.Sanitize() + onConflict
	s.deleteItemsSQL = "DELETE FROM " + s.table +
		" WHERE inventory_namespace = $1 AND inventory_name = $2 AND item_uid = ANY($3)"
	s.cursorSQL = "INSERT INTO " + s.cursors +
		` (inventory_namespace, inventory_name, inventory_kind, "cursor", updated_at) VALUES ($1, $2, $3, $4, now())` +
		` ON CONFLICT (inventory_namespace, inventory_name) DO UPDATE SET inventory_kind = EXCLUDED.inventory_kind,` +
		` "cursor" = EXCLUDED."cursor", updated_at = EXCLUDED.updated_at`
	return nil
}

// ensureTables creates the schema and tables when missing, once per Sink.
func (s *Sink) ensureTables(ctx context.Context) error {
	s.ddlMu.Lock()
	defer s.ddlMu.Unlock()
	if s.ddlDone {
		return nil
	}
	err := s.createTables(ctx)
	// The advisory lock serializes kollect processes, but anything else
	// creating the same objects can still race CREATE ... IF NOT EXISTS
	// into a unique violation on the catalogs; the second attempt sees
	// the objects.
	if isDuplicateDDL(err) {
		err = s.createTables(ctx)
	}
	if err != nil {
		return s.wrap("create tables", err)
	}
	s.ddlDone = true
	return nil
}

func (s *Sink) createTables(ctx context.Context) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", s.lockKey); err != nil {
			return err
		}
		// Look before creating: CREATE ... IF NOT EXISTS checks the CREATE
		// privilege before existence, and a role that may only write rows
		// into existing tables must still work.
		var schemaExists, tableExists, cursorsExists bool
		err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1),
			to_regclass($2) IS NOT NULL, to_regclass($3) IS NOT NULL`,
			s.rawSchema, s.table, s.cursors).Scan(&schemaExists, &tableExists, &cursorsExists)
		if err != nil {
			return err
		}
		var stmts []string
		if !schemaExists {
			stmts = append(stmts, "CREATE SCHEMA IF NOT EXISTS "+s.schema)
		}
		if !tableExists {
			stmts = append(stmts, `CREATE TABLE IF NOT EXISTS `+s.table+` (
	inventory_kind text,
	inventory_namespace text NOT NULL,
	inventory_name text NOT NULL,
	item_uid text NOT NULL,
	item_namespace text NOT NULL,
	item_name text NOT NULL,
	item_resource_version text NOT NULL,
	target text,
	profile text,
	source_api_version text,
	source_kind text,
	source_namespace text,
	source_name text,
	source_uid text,
	attributes jsonb,
	object jsonb,
	hash text NOT NULL,
	exported_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (inventory_namespace, inventory_name, item_uid)
)`)
		}
		if !cursorsExists {
			stmts = append(stmts, `CREATE TABLE IF NOT EXISTS `+s.cursors+` (
	inventory_namespace text NOT NULL,
	inventory_name text NOT NULL,
	inventory_kind text,
	"cursor" text NOT NULL,
	updated_at timestamptz NOT NULL,
	PRIMARY KEY (inventory_namespace, inventory_name)
)`)
		}
		for _, stmt := range stmts {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return err
			}
		}
		return nil
	})
}

// State returns item UID to hash for the inventory's rows and its cursor,
// read from one snapshot so that they match.
func (s *Sink) State(ctx context.Context, inv sink.Inventory) (map[string]string, string, error) {
	if err := s.ensureTables(ctx); err != nil {
		return nil, "", err
	}
	hashes := map[string]string{}
	var cursor string
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `SELECT "cursor" FROM `+s.cursors+
			` WHERE inventory_namespace = $1 AND inventory_name = $2`, inv.Namespace, inv.Name).Scan(&cursor)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		// Rows are streamed into the map, not collected into a slice first.
		rows, err := tx.Query(ctx, `SELECT item_uid, hash FROM `+s.table+
			` WHERE inventory_namespace = $1 AND inventory_name = $2`, inv.Namespace, inv.Name)
		if err != nil {
			return err
		}
		var uid, hash string
		_, err = pgx.ForEachRow(rows, []any{&uid, &hash}, func() error {
			hashes[uid] = hash
			return nil
		})
		return err
	})
	if err != nil {
		return nil, "", s.wrap("read state", err)
	}
	return hashes, cursor, nil
}

// Apply deletes and upserts the changes and stores cursor in one
// transaction. When an item UID appears more than once the last change
// wins.
func (s *Sink) Apply(ctx context.Context, inv sink.Inventory, changes []sink.Change, cursor string) error {
	deletes, upserts, err := dedupe(changes)
	if err != nil {
		return s.wrap("apply", err)
	}
	if err := s.ensureTables(ctx); err != nil {
		return err
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var b pgx.Batch
		if len(deletes) > 0 {
			b.Queue(s.deleteItemsSQL, inv.Namespace, inv.Name, deletes)
		}
		if len(upserts) > copyThreshold {
			if err := tx.SendBatch(ctx, &b).Close(); err != nil {
				return err
			}
			if err := s.copyUpserts(ctx, tx, inv, upserts); err != nil {
				return err
			}
			b = pgx.Batch{}
		} else if len(upserts) > 0 {
			s.batches.Add(1)
			for _, it := range upserts {
				b.Queue(s.upsertSQL, itemRow(inv, it)...)
			}
		}
		b.Queue(s.cursorSQL, inv.Namespace, inv.Name, inv.Kind, cursor)
		return tx.SendBatch(ctx, &b).Close()
	})
	if err != nil {
		return s.wrap("apply", err)
	}
	return nil
}

// copyUpserts streams the upserts into a staging table with COPY and
// merges them in one statement: COPY cannot resolve conflicts itself.
func (s *Sink) copyUpserts(ctx context.Context, tx pgx.Tx, inv sink.Inventory, upserts []*sink.Item) error {
	s.copies.Add(1)
	if _, err := tx.Exec(ctx, "CREATE TEMPORARY TABLE "+pgx.Identifier{stagingTable}.Sanitize()+
		" (LIKE "+s.table+" INCLUDING DEFAULTS) ON COMMIT DROP"); err != nil {
		return err
	}
	_, err := tx.CopyFrom(ctx, pgx.Identifier{"pg_temp", stagingTable}, itemColumns,
		pgx.CopyFromSlice(len(upserts), func(i int) ([]any, error) { return itemRow(inv, upserts[i]), nil }))
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, s.fromStagingSQL)
	return err
}

// dedupe keeps each item UID's last change: one statement cannot touch a
// row twice, and the last change is the current state.
func dedupe(changes []sink.Change) (deletes []string, upserts []*sink.Item, err error) {
	last := make(map[string]int, len(changes))
	for i, c := range changes {
		if c.Item == nil || c.Item.UID == "" {
			return nil, nil, fmt.Errorf("change %d has no item UID", i)
		}
		if c.Op != sink.Upsert && c.Op != sink.Delete {
			return nil, nil, fmt.Errorf("change %d has unknown op %q", i, c.Op)
		}
		last[c.Item.UID] = i
	}
	for i, c := range changes {
		if last[c.Item.UID] != i {
			continue
		}
		if c.Op == sink.Delete {
			deletes = append(deletes, c.Item.UID)
		} else {
			upserts = append(upserts, c.Item)
		}
	}
	return deletes, upserts, nil
}

// itemRow is an item's values in itemColumns order.
func itemRow(inv sink.Inventory, it *sink.Item) []any {
	return []any{
		inv.Kind, inv.Namespace, inv.Name,
		it.UID, it.Namespace, it.Name, it.ResourceVersion,
		it.Target, it.Profile,
		it.Source.APIVersion, it.Source.Kind, it.Source.Namespace, it.Source.Name, it.Source.UID,
		jsonOrNull(it.Attributes), jsonOrNull(it.Object), it.Hash,
	}
}

// jsonOrNull maps an absent document to NULL; pgx sends a non-nil
// RawMessage as is, so the server validates it.
func jsonOrNull(m json.RawMessage) json.RawMessage {
	if len(m) == 0 {
		return nil
	}
	return m
}

// Delete removes the inventory's rows and cursor in one transaction.
func (s *Sink) Delete(ctx context.Context, inv sink.Inventory) error {
	if err := s.ensureTables(ctx); err != nil {
		return err
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var b pgx.Batch
		b.Queue("DELETE FROM "+s.table+" WHERE inventory_namespace = $1 AND inventory_name = $2", inv.Namespace, inv.Name)
		b.Queue("DELETE FROM "+s.cursors+" WHERE inventory_namespace = $1 AND inventory_name = $2", inv.Namespace, inv.Name)
		return tx.SendBatch(ctx, &b).Close()
	})
	if err != nil {
		return s.wrap("delete", err)
	}
	return nil
}

// Probe connects, authenticates and runs SELECT 1; it creates nothing.
func (s *Sink) Probe(ctx context.Context) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return s.wrap("probe", err)
	}
	defer conn.Release()
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		return s.wrap("probe", err)
	}
	return nil
}

// Close closes the pool.
func (s *Sink) Close() error {
	s.pool.Close()
	return nil
}

// addSecrets records values to scrub from errors, with the spellings a
// connection string may use for them.
func (s *Sink) addSecrets(values ...string) {
	for _, v := range values {
		if v == "" {
			continue
		}
		s.secrets = append(s.secrets, v, url.QueryEscape(v), url.PathEscape(v),
			strings.TrimPrefix(url.UserPassword("", v).String(), ":"))
	}
	// Longest first, so that a DSN is replaced whole before the password
	// inside it.
	sort.SliceStable(s.secrets, func(i, j int) bool { return len(s.secrets[i]) > len(s.secrets[j]) })
}

// wrap prefixes err with op and scrubs every secret from the message. The
// result does not unwrap to err: pgx errors can carry the connection
// configuration, and a caller printing an unwrapped error must not see
// it. It keeps sink.ErrPermanent and context errors for errors.Is.
func (s *Sink) wrap(op string, err error) error {
	msg := sink.RedactString(op+": "+err.Error(), s.secrets)
	e := &scrubbedError{msg: msg, causes: []error{classify(err)}}
	if errors.Is(err, sink.ErrPermanent) || isAuthFailure(err) {
		e.causes = append(e.causes, sink.ErrPermanent)
	}
	for _, sentinel := range []error{context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, sentinel) {
			e.causes = append(e.causes, sentinel)
		}
	}
	return e
}

type scrubbedError struct {
	msg    string
	causes []error
}

func (e *scrubbedError) Error() string   { return e.msg }
func (e *scrubbedError) Unwrap() []error { return e.causes }

// classify is the class of a failure: a rejected credential, another
// answer of the server (by its SQLSTATE code, never its text), else what
// the network said.
func classify(err error) *sink.Classified {
	c := sink.Classify(err)
	var pgErr *pgconn.PgError
	switch {
	case c.Outcome == sink.OutcomeAddressForbidden:
	case isAuthFailure(err):
		c = &sink.Classified{Outcome: sink.OutcomeAuth}
	case errors.As(err, &pgErr) && sqlState.MatchString(pgErr.Code):
		c = &sink.Classified{Outcome: sink.OutcomeProtocol, Detail: "the server answered SQLSTATE " + pgErr.Code}
	}
	return c
}

// isAuthFailure reports a rejected credential: invalid_password or
// invalid_authorization_specification. Retrying cannot fix either.
func isAuthFailure(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "28P01" || pgErr.Code == "28000")
}

// isDuplicateDDL reports the unique violation on pg_type or pg_namespace
// that concurrent CREATE ... IF NOT EXISTS can raise, and its
// duplicate-object cousins.
func isDuplicateDDL(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "23505", "42P06", "42P07", "42710":
		return true
	}
	return false
}
