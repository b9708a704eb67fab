// Package postgres is the postgres DatabaseSink: it keeps one row per
// exported item in a table, keyed by the cluster, the inventory and the
// item's UID, and the exporter's cursor beside it.
//
// Layout, in spec.postgres.schema (default public):
//
//   - <table> (default kollect_inventory): one row per item, primary key
//     (cluster, inventory_namespace, inventory_name, item_uid). cluster is
//     the exporting server's --cluster-name, so that the servers of many
//     clusters can share one table: each reads, overwrites and deletes
//     only its own rows. inventory_namespace is "" for a ClusterInventory
//     so that it can be part of the key. The item's identity, target,
//     profile and source are text columns; attributes and object are
//     jsonb (NULL when the item has none); hash is the item's content
//     hash, which State reports back; exported_at is the time of the
//     transaction that last wrote the row.
//   - <table>_cursors: one row per inventory, primary key
//     (cluster, inventory_namespace, inventory_name), holding the cursor
//     of the last applied batch and the epoch of the leader that wrote it.
//
// Apply writes the cursor in the same transaction as the rows it
// describes: after a crash either the batch and its cursor are both
// stored or neither is, so the exporter resumes from a cursor that matches
// the rows exactly, and State (read from one snapshot) is always a
// consistent pair. Apply first locks the inventory's cursor row and
// compares epochs: a batch from an older epoch than the stored one (a
// former leader that was paused and resumed) is rolled back untouched and
// refused with sink.ErrFenced.
//
// PostgreSQL cannot store the NUL character in text, nor the JSON escape
// \u0000 in jsonb; an item holding one would fail every batch of its
// inventory. So NUL is removed from text columns and \u0000 in attributes
// and object is stored as \ufffd (the Unicode replacement character). The
// hash column keeps the item's hash as exported, computed before this
// mapping, so State still matches the exporter's view.
//
// Both tables are created on first use when missing. Tables of the
// previous layout (no cluster column, no epoch) are migrated on first use,
// in one transaction under the same advisory lock as creation: the cluster
// column is added and set, for every existing row, to the cluster of the
// sink migrating it (that layout was written by one cluster's exporter:
// with two, each deleted the other's rows), the cursors get epoch 0, and
// the primary keys gain the cluster. If the migrating cluster is not the
// one that wrote the rows, its next full sync deletes them and the
// writer's exporter, finding none of its own, writes them again. The
// migration needs the rights to alter the tables; a server of an older
// version still writing to a migrated table has its writes refused.
// Errors never contain the Secret's password or DSN.
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
	"errors"
	"fmt"
	"hash/fnv"
	"net/url"
	"regexp"
	"slices"
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
	"kollect.dev/kollect/pkg/controllers/plumbing"
	"kollect.dev/kollect/pkg/netguard"
)

const (
	// maxConns keeps the pool small: the exporter applies one batch per
	// inventory at a time, and a sink must not exhaust a shared server.
	maxConns = 4
	// copyThreshold is the number of upserts above which COPY into a
	// staging table beats one INSERT per row.
	copyThreshold = 100
	// idleInTransactionTimeout ends a transaction its client stopped
	// driving (a paused former leader), releasing its row locks.
	idleInTransactionTimeout = "60s"
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

// itemKey and cursorKey are the primary keys of the two tables.
var (
	itemKey   = []string{"cluster", "inventory_namespace", "inventory_name", "item_uid"}
	cursorKey = []string{"cluster", "inventory_namespace", "inventory_name"}
)

// itemColumns are the columns Apply writes, in the order of itemRow;
// exported_at is set by the statement.
var itemColumns = []string{
	"cluster", "inventory_kind", "inventory_namespace", "inventory_name",
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
	// lockKey serializes table creation and migration across processes.
	lockKey int64
	// secrets are scrubbed from every returned error, longest first.
	secrets []string

	// ddlMu guards ddlDone and copyDirect: the tables are created once per
	// Sink, and a failed attempt is retried on the next call. copyDirect
	// says new rows may be COPYed straight into the table (createTables).
	ddlMu      sync.Mutex
	ddlDone    bool
	copyDirect bool

	// copies and batches count the upsert paths Apply took, and direct the
	// COPYs that went straight into the table; tests read them.
	copies, direct, batches atomic.Int64

	// SQL built once from the names.
	upsertSQL, fromStagingSQL, deleteItemsSQL, anyHeldSQL, cursorSQL string
}

var _ sink.DatabaseSink = (*Sink)(nil)

func init() {
	sink.Databases.Register(string(v1alpha1.DatabaseSinkPostgres),
		func(ctx context.Context, spec *v1alpha1.DatabaseSinkSpec, p sink.Params) (sink.DatabaseSink, error) {
			s, err := New(ctx, spec, p.Secret, p.Dialer)
			if err != nil {
				// Not s: a nil *Sink in the interface would not be nil.
				return nil, err
			}
			return s, nil
		})
}

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
	if _, ok := cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"]; !ok {
		// A leader paused inside a transaction holds its inventory's
		// cursor row; the server ends that transaction after a while, so
		// the next leader is not blocked until the paused one resumes.
		cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = idleInTransactionTimeout
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
		// The key never changes for a row, and neither does the kind of
		// the inventory it names.
		if slices.Contains(itemKey, c) || c == "inventory_kind" {
			continue
		}
		set = append(set, c+" = EXCLUDED."+c)
		if c != "item_resource_version" {
			content, excluded = append(content, "t."+c), append(excluded, "EXCLUDED."+c)
		}
	}
	set = append(set, "exported_at = EXCLUDED.exported_at")
	// A row that already holds the content is left alone: the periodic full
	// sync then rewrites only rows that drifted, and exported_at keeps
	// saying when a row's content last changed.
	onConflict := " ON CONFLICT (" + strings.Join(itemKey, ", ") + ") DO UPDATE SET " + strings.Join(set, ", ") +
		" WHERE (" + strings.Join(content, ", ") + ") IS DISTINCT FROM (" + strings.Join(excluded, ", ") + ")"
	s.upsertSQL = "INSERT INTO " + s.table + " AS t (" + cols + ", exported_at) VALUES (" +
		strings.Join(params, ", ") + ", now())" + onConflict
	s.fromStagingSQL = "INSERT INTO " + s.table + " AS t (" + cols + ", exported_at) SELECT " + cols +
		", now() FROM " + pgx.Identifier{"pg_temp", stagingTable}.Sanitize() + onConflict
	// One primary-key probe per UID (the LATERAL with LIMIT is not
	// flattened): "item_uid = ANY($4)" in a generic plan compares every
	// row of the inventory with every UID, quadratic in a first export.
	// item_uid::text is the column itself for text (the index serves it)
	// and still works on a DBA's uuid column. Deletes join the UIDs the
	// same way.
	s.anyHeldSQL = "SELECT EXISTS (SELECT 1 FROM unnest($4::text[]) AS u(uid) CROSS JOIN LATERAL (SELECT 1 FROM " + s.table +
		" WHERE cluster = $1 AND inventory_namespace = $2 AND inventory_name = $3 AND item_uid::text = u.uid LIMIT 1) AS hit)"
	s.deleteItemsSQL = "DELETE FROM " + s.table + " AS t USING unnest($4::text[]) AS u(uid)" +
		" WHERE t.cluster = $1 AND t.inventory_namespace = $2 AND t.inventory_name = $3 AND t.item_uid::text = u.uid"
	// The conflicting cursor row is locked whether or not the WHERE holds,
	// so concurrent Applies of one inventory serialize here; no row comes
	// back when the stored epoch is newer.
	s.cursorSQL = "INSERT INTO " + s.cursors + " AS c" +
		` (cluster, inventory_namespace, inventory_name, inventory_kind, "cursor", epoch, updated_at)` +
		` VALUES ($1, $2, $3, $4, $5, $6, now())` +
		` ON CONFLICT (` + strings.Join(cursorKey, ", ") + `) DO UPDATE SET inventory_kind = EXCLUDED.inventory_kind,` +
		` "cursor" = EXCLUDED."cursor", epoch = EXCLUDED.epoch, updated_at = EXCLUDED.updated_at` +
		` WHERE c.epoch <= EXCLUDED.epoch RETURNING epoch`
	return nil
}

// State returns item UID to hash for the inventory's rows and its cursor,
// read from one snapshot so that they match.
func (s *Sink) State(ctx context.Context, inv sink.Inventory) (map[string]string, sink.Cursor, error) {
	var cursor sink.Cursor
	if err := checkInventory(inv); err != nil {
		return nil, cursor, s.wrap("read state", err)
	}
	if err := s.ensureTables(ctx, inv.Cluster); err != nil {
		return nil, cursor, err
	}
	hashes := map[string]string{}
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `SELECT "cursor", epoch FROM `+s.cursors+
			` WHERE cluster = $1 AND inventory_namespace = $2 AND inventory_name = $3`,
			inv.Cluster, inv.Namespace, inv.Name).Scan(&cursor.Position, &cursor.Epoch)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		// Rows are streamed into the map, not collected into a slice first.
		rows, err := tx.Query(ctx, `SELECT item_uid, hash FROM `+s.table+
			` WHERE cluster = $1 AND inventory_namespace = $2 AND inventory_name = $3`,
			inv.Cluster, inv.Namespace, inv.Name)
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
		return nil, sink.Cursor{}, s.wrap("read state", err)
	}
	return hashes, cursor, nil
}

// Apply deletes and upserts the changes and stores cursor in one
// transaction, unless the stored epoch is newer than cursor.Epoch. When
// an item UID appears more than once the last change wins.
func (s *Sink) Apply(ctx context.Context, inv sink.Inventory, changes []sink.Change, cursor sink.Cursor) error {
	if err := checkInventory(inv); err != nil {
		return s.wrap("apply", err)
	}
	deletes, upserts, absent, err := dedupe(changes)
	if err != nil {
		return s.wrap("apply", err)
	}
	if err := s.ensureTables(ctx, inv.Cluster); err != nil {
		return err
	}
	err = pgx.BeginTxFunc(ctx, s.pool, writeTx, func(tx pgx.Tx) error {
		// The cursor first: it takes the row lock that fences the batch,
		// and a refused batch costs no row work.
		if err := s.fence(ctx, tx, inv, cursor); err != nil {
			return err
		}
		var b pgx.Batch
		if len(deletes) > 0 {
			b.Queue(s.deleteItemsSQL, inv.Cluster, inv.Namespace, inv.Name, deletes)
		}
		if len(upserts) > copyThreshold {
			if b.Len() > 0 {
				if err := tx.SendBatch(ctx, &b).Close(); err != nil {
					return err
				}
			}
			return s.copyUpserts(ctx, tx, inv, upserts, absent)
		}
		if len(upserts) > 0 {
			s.batches.Add(1)
			for _, it := range upserts {
				b.Queue(s.upsertSQL, itemRow(inv, it)...)
			}
		}
		if b.Len() == 0 {
			return nil
		}
		return tx.SendBatch(ctx, &b).Close()
	})
	if err != nil {
		return s.wrap("apply", err)
	}
	return nil
}

// copyUpserts writes the upserts with COPY. When the table holds none of
// them (a first export, new items), they go straight into it: nothing can
// insert them meanwhile, since every writer of the inventory's rows holds
// its cursor row's lock first, and this transaction does. The caller may
// know it (absent: every upsert is Change.Absent; were it wrong, the rows
// are merged instead); otherwise one key probe per item tells. Otherwise, or on a table that does not allow it
// (copyDirect), COPY fills a staging table merged in one statement, since
// COPY cannot resolve conflicts itself.
func (s *Sink) copyUpserts(ctx context.Context, tx pgx.Tx, inv sink.Inventory, upserts []*sink.Item, absent bool) error {
	s.copies.Add(1)
	rows := func(i int) ([]any, error) { return itemRow(inv, upserts[i]), nil }
	if s.directAllowed() {
		held := false
		if !absent {
			uids := make([]string, len(upserts))
			for i, it := range upserts {
				uids[i] = stripNUL(it.UID) // as itemRow stores it
			}
			if err := tx.QueryRow(ctx, s.anyHeldSQL, inv.Cluster, inv.Namespace, inv.Name, uids).Scan(&held); err != nil {
				return err
			}
		}
		if !held && !absent {
			s.direct.Add(1)
			return s.copyDirectly(ctx, tx, upserts, rows)
		}
		if absent {
			// Another writer of the same epoch (a second sink naming this
			// table) may have added some since the caller read the table:
			// try under a savepoint, merge if so.
			sp, err := tx.Begin(ctx)
			if err != nil {
				return err
			}
			if err := s.copyDirectly(ctx, sp, upserts, rows); err == nil {
				s.direct.Add(1)
				return sp.Commit(ctx)
			} else if rerr := sp.Rollback(ctx); rerr != nil || !(isUniqueViolation(err) || isRefusedCopy(err)) {
				return err
			}
		}
	}
	// The written columns only, with the table's types and no constraints:
	// exported_at is set by the merge.
	if _, err := tx.Exec(ctx, "CREATE TEMPORARY TABLE "+pgx.Identifier{stagingTable}.Sanitize()+
		" ON COMMIT DROP AS SELECT "+strings.Join(itemColumns, ", ")+" FROM "+s.table+" WITH NO DATA"); err != nil {
		return err
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"pg_temp", stagingTable}, itemColumns, pgx.CopyFromSlice(len(upserts), rows)); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, s.fromStagingSQL)
	return err
}

// copyDirectly COPYs the upserts into the table itself; exported_at takes
// its default, now().
func (s *Sink) copyDirectly(ctx context.Context, tx pgx.Tx, upserts []*sink.Item, rows func(int) ([]any, error)) error {
	_, err := tx.CopyFrom(ctx, pgx.Identifier{s.rawSchema, s.rawTable}, itemColumns, pgx.CopyFromSlice(len(upserts), rows))
	if isRefusedCopy(err) {
		// Row-level security or privileges changed since the tables were
		// checked: merge from now on.
		s.ddlMu.Lock()
		s.copyDirect = false
		s.ddlMu.Unlock()
	}
	return err
}

// isUniqueViolation is SQLSTATE 23505.
func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}

func (s *Sink) directAllowed() bool {
	s.ddlMu.Lock()
	defer s.ddlMu.Unlock()
	return s.copyDirect
}

// isRefusedCopy is PostgreSQL refusing COPY into the table itself:
// row-level security (0A000), a privilege (42501), or an exported_at
// that lost its default (23502).
func isRefusedCopy(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "0A000" || pgErr.Code == "42501" || pgErr.Code == "23502")
}

// dedupe keeps each item UID's last change: one statement cannot touch a
// row twice, and the last change is the current state. Absent is whether
// every upsert kept is Change.Absent.
func dedupe(changes []sink.Change) (deletes []string, upserts []*sink.Item, absent bool, err error) {
	last := make(map[string]int, len(changes))
	for i, c := range changes {
		if c.Item == nil || c.Item.UID == "" {
			return nil, nil, false, fmt.Errorf("change %d has no item UID", i)
		}
		if c.Op != sink.Upsert && c.Op != sink.Delete {
			return nil, nil, false, fmt.Errorf("change %d has unknown op %q", i, c.Op)
		}
		last[stripNUL(c.Item.UID)] = i // the row's key, as itemRow stores it
	}
	absent = true
	for i, c := range changes {
		if last[stripNUL(c.Item.UID)] != i {
			continue
		}
		if c.Op == sink.Delete {
			deletes = append(deletes, stripNUL(c.Item.UID)) // as itemRow stores it
		} else {
			upserts = append(upserts, c.Item)
			// A UID with NUL is stored stripped, as another UID may be:
			// the caller's Absent cannot speak for that key.
			absent = absent && c.Absent && !strings.ContainsRune(c.Item.UID, 0)
		}
	}
	return deletes, upserts, absent && len(upserts) > 0, nil
}

// itemRow is an item's values in itemColumns order, with NUL mapped as
// the package doc says.
func itemRow(inv sink.Inventory, it *sink.Item) []any {
	return []any{
		inv.Cluster, stripNUL(inv.Kind), inv.Namespace, inv.Name,
		stripNUL(it.UID), stripNUL(it.Namespace), stripNUL(it.Name), stripNUL(it.ResourceVersion),
		stripNUL(it.Target), stripNUL(it.Profile),
		stripNUL(it.Source.APIVersion), stripNUL(it.Source.Kind), stripNUL(it.Source.Namespace),
		stripNUL(it.Source.Name), stripNUL(it.Source.UID),
		jsonb(it.Attributes), jsonb(it.Object), stripNUL(it.Hash),
	}
}

// checkInventory refuses an inventory the sink cannot key: without a
// cluster (the exporter always sets one), or with a NUL in a key column,
// which stripping would merge with another inventory's key.
func checkInventory(inv sink.Inventory) error {
	if inv.Cluster == "" {
		return fmt.Errorf("inventory %s/%s has no cluster: %w", inv.Namespace, inv.Name, sink.ErrPermanent)
	}
	for field, v := range map[string]string{"cluster": inv.Cluster, "namespace": inv.Namespace, "name": inv.Name} {
		if strings.ContainsRune(v, 0) {
			return fmt.Errorf("inventory %s contains a NUL character: %w", field, sink.ErrPermanent)
		}
	}
	return nil
}

// Delete removes the inventory's rows in one transaction, fenced like
// Apply; the cursor row stays, emptied, holding the epoch.
func (s *Sink) Delete(ctx context.Context, inv sink.Inventory, cursor sink.Cursor) error {
	if err := checkInventory(inv); err != nil {
		return s.wrap("delete", err)
	}
	if err := s.ensureTables(ctx, inv.Cluster); err != nil {
		return err
	}
	err := pgx.BeginTxFunc(ctx, s.pool, writeTx, func(tx pgx.Tx) error {
		// Fenced like Apply, and in its lock order. The cursor row stays,
		// emptied, with the epoch: a former leader's batch that arrives
		// after the cleanup is refused instead of bringing rows back.
		if err := s.fence(ctx, tx, inv, sink.Cursor{Epoch: cursor.Epoch}); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "DELETE FROM "+s.table+" WHERE cluster = $1 AND inventory_namespace = $2 AND inventory_name = $3",
			inv.Cluster, inv.Namespace, inv.Name)
		return err
	})
	if err != nil {
		return s.wrap("delete", err)
	}
	return nil
}

// writeTx is the isolation every writing transaction runs at, whatever
// the connection's default (a DSN's options may set another): the fence
// relies on read committed, where a statement that waited for the cursor
// row's lock sees the row its holder committed. Under repeatable read it
// fails with a serialization error instead of ErrFenced.
var writeTx = pgx.TxOptions{IsoLevel: pgx.ReadCommitted}

// fence stores the cursor unless the stored epoch is newer, holding the
// cursor row's lock until the transaction ends; a newer stored epoch is
// an error wrapping sink.ErrFenced (the caller rolls back).
func (s *Sink) fence(ctx context.Context, tx pgx.Tx, inv sink.Inventory, cursor sink.Cursor) error {
	var stored int64
	err := tx.QueryRow(ctx, s.cursorSQL, inv.Cluster, inv.Namespace, inv.Name, inv.Kind,
		stripNUL(cursor.Position), cursor.Epoch).Scan(&stored)
	if errors.Is(err, pgx.ErrNoRows) {
		if err := tx.QueryRow(ctx, "SELECT epoch FROM "+s.cursors+
			" WHERE cluster = $1 AND inventory_namespace = $2 AND inventory_name = $3",
			inv.Cluster, inv.Namespace, inv.Name).Scan(&stored); err != nil {
			return err
		}
		return fmt.Errorf("the stored epoch %d is newer than this batch's %d: %w", stored, cursor.Epoch, sink.ErrFenced)
	}
	return err
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
// it. It keeps sink.ErrPermanent, sink.ErrFenced and context errors for
// errors.Is.
func (s *Sink) wrap(op string, err error) error {
	causes := []error{classify(err)}
	if errors.Is(err, sink.ErrPermanent) || isAuthFailure(err) {
		causes = append(causes, sink.ErrPermanent)
	}
	for _, sentinel := range []error{sink.ErrFenced, context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, sentinel) {
			causes = append(causes, sentinel)
		}
	}
	return plumbing.RedactedError(plumbing.RedactString(op+": "+err.Error(), s.secrets), causes...)
}

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
