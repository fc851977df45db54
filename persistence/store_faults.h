/*
 * The store's fault seam (testing only): a SQLite VFS that passes everything through to
 * the default one, except that the fsyncs made while a commit is "armed" fail with
 * SQLITE_IOERR_FSYNC, so the commit fails the way it does on a failing disk and SQLite's
 * own error path runs; and the reads made while a read is "armed" fail with
 * SQLITE_IOERR_READ. Compiled in when MUTEXD_FAULT_INJECTION is defined; otherwise the
 * functions do nothing and the default VFS is used.
 */
#ifndef MX_STORE_FAULTS_H
#define MX_STORE_FAULTS_H

#include <stdint.h>

#include "persistence/store.h"

/* Registers the VFS once. Returns 0 or an SQLite error code. */
int store_faults_register(void);
/* The VFS name to open the writer's connection with (NULL: the default). */
const char *store_faults_vfs_name(void);
/* Writer thread, before COMMIT number `commit_no` (1-based): arm if cfg says it fails. */
void store_faults_arm(const struct store_config *cfg, uint64_t commit_no);
void store_faults_disarm(void);
/* Opening thread, before the high-water read number `read_no` (1-based) of store_open: the
 * reads it makes fail with SQLITE_IOERR_READ if cfg says so, until disarmed. */
void store_faults_arm_read(const struct store_config *cfg, uint64_t read_no);

#endif
