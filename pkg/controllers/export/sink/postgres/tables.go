package postgres

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ensureTables creates the schema and tables when missing, or migrates
// them from the previous layout, once per Sink. cluster is the one
// existing rows are assigned to by a migration.
func (s *Sink) ensureTables(ctx context.Context, cluster string) error {
	s.ddlMu.Lock()
	defer s.ddlMu.Unlock()
	if s.ddlDone {
		return nil
	}
	err := s.createTables(ctx, cluster)
	// The advisory lock serializes kollect processes, but anything else
	// creating the same objects can still race CREATE ... IF NOT EXISTS
	// into a unique violation on the catalogs; the second attempt sees
	// the objects.
	if isDuplicateDDL(err) {
		err = s.createTables(ctx, cluster)
	}
	if err != nil {
		return s.wrap("create tables", err)
	}
	s.ddlDone = true
	return nil
}

// createTables creates what is missing and migrates what exists, in one
// transaction under an advisory lock on the table's name: a second
// process waits, then finds the work done.
func (s *Sink) createTables(ctx context.Context, cluster string) error {
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
		if tableExists {
			m, err := migration(ctx, tx, s.table, itemKey, cluster, false)
			if err != nil {
				return err
			}
			stmts = append(stmts, m...)
		} else {
			stmts = append(stmts, `CREATE TABLE IF NOT EXISTS `+s.table+` (
	cluster text NOT NULL,
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
	PRIMARY KEY (`+strings.Join(itemKey, ", ")+`)
)`)
		}
		if cursorsExists {
			m, err := migration(ctx, tx, s.cursors, cursorKey, cluster, true)
			if err != nil {
				return err
			}
			stmts = append(stmts, m...)
		} else {
			stmts = append(stmts, `CREATE TABLE IF NOT EXISTS `+s.cursors+` (
	cluster text NOT NULL,
	inventory_namespace text NOT NULL,
	inventory_name text NOT NULL,
	inventory_kind text,
	"cursor" text NOT NULL,
	epoch bigint NOT NULL DEFAULT 0,
	updated_at timestamptz NOT NULL,
	PRIMARY KEY (`+strings.Join(cursorKey, ", ")+`)
)`)
		}
		for _, stmt := range stmts {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return err
			}
		}
		// COPY straight into the table only where it cannot fail or
		// differ from the merge: no row-level security (COPY into such a
		// table is refused) and an exported_at whose default is the
		// statements' now(). Tables made here qualify; a DBA's may not.
		return tx.QueryRow(ctx, `SELECT NOT (c.relrowsecurity OR c.relforcerowsecurity)
			AND coalesce(pg_get_expr(d.adbin, d.adrelid) = 'now()' AND a.atttypid = 'timestamptz'::regtype, false)
			FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'exported_at'
			LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
			WHERE c.oid = $1::regclass`, s.table).Scan(&s.copyDirect)
	})
}

// migration returns the statements that bring an existing table (quoted
// name) to the current layout: a cluster column holding cluster for the
// rows already there, an epoch column when withEpoch, and key as the
// primary key. Nothing for a table already there: each step looks at the
// catalog, so a migration interrupted by anything but the transaction's
// rollback, or a table altered by hand, is completed rather than redone.
func migration(ctx context.Context, tx pgx.Tx, table string, key []string, cluster string, withEpoch bool) ([]string, error) {
	var (
		hasCluster, hasEpoch bool
		pkName, pkDef        *string
	)
	err := tx.QueryRow(ctx, `SELECT
		EXISTS (SELECT 1 FROM pg_catalog.pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'cluster' AND NOT attisdropped),
		EXISTS (SELECT 1 FROM pg_catalog.pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'epoch' AND NOT attisdropped),
		(SELECT conname::text FROM pg_catalog.pg_constraint WHERE conrelid = to_regclass($1) AND contype = 'p'),
		(SELECT pg_get_constraintdef(oid) FROM pg_catalog.pg_constraint WHERE conrelid = to_regclass($1) AND contype = 'p')`,
		table).Scan(&hasCluster, &hasEpoch, &pkName, &pkDef)
	if err != nil {
		return nil, err
	}
	var stmts []string
	if !hasCluster {
		// DDL takes no parameters: the server quotes the literal, by its
		// own rules.
		var literal string
		if err := tx.QueryRow(ctx, "SELECT quote_literal($1::text)", cluster).Scan(&literal); err != nil {
			return nil, err
		}
		// A constant default fills the existing rows without rewriting the
		// table; dropped afterwards, so that every writer must name its
		// cluster.
		stmts = append(stmts,
			"ALTER TABLE "+table+" ADD COLUMN cluster text NOT NULL DEFAULT "+literal,
			"ALTER TABLE "+table+" ALTER COLUMN cluster DROP DEFAULT")
	}
	if withEpoch && !hasEpoch {
		stmts = append(stmts, "ALTER TABLE "+table+" ADD COLUMN epoch bigint NOT NULL DEFAULT 0")
	}
	if want := "PRIMARY KEY (" + strings.Join(key, ", ") + ")"; pkDef == nil || *pkDef != want {
		alter := "ALTER TABLE " + table
		if pkName != nil {
			alter += " DROP CONSTRAINT " + pgx.Identifier{*pkName}.Sanitize() + ","
		}
		stmts = append(stmts, alter+" ADD "+want)
	}
	return stmts, nil
}
