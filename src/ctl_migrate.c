/*
 * ctl_migrate.c -- "ratelimitctl migrate": brings the database's schema up
 * to date.
 *
 * The migrations are the files schema/NNN_name.sql, built into the program
 * (embedded.c).  Each one not yet recorded in the table schema_migrations
 * runs in its own transaction, together with its record, so a failing
 * migration leaves nothing of itself behind.  An advisory lock makes
 * concurrent runs take turns, and a run that finds nothing to do changes
 * nothing.
 */
#include <stdio.h>
#include <stdlib.h>

#include "ctl.h"

/* Serializes concurrent "migrate" runs (pg_advisory_xact_lock key: "rlmg"). */
#define CTL_MIGRATE_LOCK "1919708519"

/* ctl.h: applies the migrations the database does not have yet. */
int
ctl_migrate_run(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a)
{
    const struct embedded_migration *m;
    const char *params[2];
    char version[16];
    PGresult *res;
    int applied = 0, latest = 0, rc;

    (void)cmd;
    (void)a;
    if ((rc = ctl_db_connect(ctl)) != 0)
        return rc;

    if (ctl_db_begin(ctl) == -1 ||
        ctl_db_command(ctl, "SELECT pg_advisory_xact_lock("
            CTL_MIGRATE_LOCK ")", 0, NULL) == -1 ||
        ctl_db_command(ctl, "CREATE TABLE IF NOT EXISTS schema_migrations ("
            "version integer PRIMARY KEY, "
            "name text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now())", 0, NULL) == -1 ||
        ctl_db_commit(ctl) == -1) {
        ctl_db_rollback(ctl);
        return ctl_db_fail(ctl);
    }

    for (m = embedded_migrations; m->name != NULL; m++) {
        snprintf(version, sizeof(version), "%d", m->version);
        latest = m->version;
        params[0] = version;
        params[1] = m->name;
        if (ctl_db_begin(ctl) == -1 ||
            ctl_db_command(ctl, "SELECT pg_advisory_xact_lock("
                CTL_MIGRATE_LOCK ")", 0, NULL) == -1 ||
            (res = ctl_db_query(ctl, "SELECT 1 FROM schema_migrations "
                "WHERE version = $1::integer", 1, params)) == NULL) {
            ctl_db_rollback(ctl);
            return ctl_db_fail(ctl);
        }
        if (PQntuples(res) > 0) {
            PQclear(res);
            ctl_db_rollback(ctl);
            continue;
        }
        PQclear(res);

        /* The simple query protocol runs the file's statements one after
         * the other, inside our transaction. */
        res = PQexec(ctl->conn, m->sql);
        if (res == NULL || (PQresultStatus(res) != PGRES_COMMAND_OK &&
            PQresultStatus(res) != PGRES_TUPLES_OK)) {
            ctl_db_set_result_error(ctl, res, m->sql);
            PQclear(res);
            ctl_db_rollback(ctl);
            if (ctl->err_line > 0)
                return ctl_fail("migration %s, line %d: %s (nothing of it "
                    "was applied)", m->name, ctl->err_line, ctl->err);
            return ctl_fail("migration %s: %s (nothing of it was applied)",
                m->name, ctl->err);
        }
        PQclear(res);
        if (ctl_db_command(ctl, "INSERT INTO schema_migrations "
            "(version, name) VALUES ($1::integer, $2)", 2, params) == -1 ||
            ctl_db_commit(ctl) == -1) {
            ctl_db_rollback(ctl);
            return ctl_fail("migration %s: %s (nothing of it was applied)",
                m->name, ctl->err);
        }
        printf("applied  %s\n", m->name);
        fflush(stdout);
        applied++;
    }

    res = ctl_db_query(ctl, "SELECT coalesce(max(version), 0) "
        "FROM schema_migrations", 0, NULL);
    if (res == NULL)
        return ctl_db_fail(ctl);
    if (atoi(PQgetvalue(res, 0, 0)) > latest)
        ctl_warn("the database has migration %s, newer than this program's "
            "newest (%d): is this " CTL_NAME " out of date?",
            PQgetvalue(res, 0, 0), latest);
    if (applied == 0)
        printf("schema is up to date (version %s)\n", PQgetvalue(res, 0, 0));
    else
        printf("%d migration%s applied; schema at version %s\n", applied,
            applied == 1 ? "" : "s", PQgetvalue(res, 0, 0));
    PQclear(res);
    return CTL_EXIT_OK;
}

