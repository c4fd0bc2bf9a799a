// SQLite 3 (Debian's libsqlite3-dev) for ChatStorage, plus SQLITE_TRANSIENT, which is a cast of
// -1 to a function pointer that Swift cannot import: binding text and blobs through these inline
// functions makes SQLite copy the bytes, so the Swift value need not outlive the call.
#ifndef CSQLITE_SHIM_H
#define CSQLITE_SHIM_H

#include <sqlite3.h>

static inline int csqlite_bind_text_copy(sqlite3_stmt *statement, int index, const char *text, int length) {
    return sqlite3_bind_text(statement, index, text, length, SQLITE_TRANSIENT);
}

static inline int csqlite_bind_blob_copy(sqlite3_stmt *statement, int index, const void *bytes, int length) {
    return sqlite3_bind_blob(statement, index, bytes, length, SQLITE_TRANSIENT);
}

// sqlite3_db_config is variadic, which Swift cannot call: a connection that reads another
// process's database (chat-server backup) must not checkpoint it when it closes last.
static inline int csqlite_no_checkpoint_on_close(sqlite3 *database) {
    return sqlite3_db_config(database, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int *)0);
}

#endif
