/*
 * Fault seam for the store (see store_faults.h). The VFS wraps every file the default VFS
 * opens: our sqlite3_file holds the real one right behind it and forwards each method.
 */
#include "persistence/store_faults.h"

#ifdef MUTEXD_FAULT_INJECTION

#include <pthread.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <string.h>

#define VFS_NAME "mutexd-faults"

static _Thread_local bool armed;      /* only the writer thread ever arms */
static _Thread_local bool read_armed; /* only the opening thread, during store_open */
static sqlite3_vfs vfs;
static sqlite3_vfs *real_vfs;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int register_rc;

struct ffile {
    sqlite3_file base;
    sqlite3_file *real; /* points just past this struct */
};

#define REAL(f) (((struct ffile *)(f))->real)

static int f_close(sqlite3_file *f)
{
    return REAL(f)->pMethods->xClose(REAL(f));
}
static int f_read(sqlite3_file *f, void *p, int n, sqlite3_int64 off)
{
    if (read_armed)
        return SQLITE_IOERR_READ;
    return REAL(f)->pMethods->xRead(REAL(f), p, n, off);
}
static int f_write(sqlite3_file *f, const void *p, int n, sqlite3_int64 off)
{
    return REAL(f)->pMethods->xWrite(REAL(f), p, n, off);
}
static int f_truncate(sqlite3_file *f, sqlite3_int64 size)
{
    return REAL(f)->pMethods->xTruncate(REAL(f), size);
}
static int f_sync(sqlite3_file *f, int flags)
{
    if (armed)
        return SQLITE_IOERR_FSYNC;
    return REAL(f)->pMethods->xSync(REAL(f), flags);
}
static int f_size(sqlite3_file *f, sqlite3_int64 *size)
{
    return REAL(f)->pMethods->xFileSize(REAL(f), size);
}
static int f_lock(sqlite3_file *f, int l)
{
    return REAL(f)->pMethods->xLock(REAL(f), l);
}
static int f_unlock(sqlite3_file *f, int l)
{
    return REAL(f)->pMethods->xUnlock(REAL(f), l);
}
static int f_check(sqlite3_file *f, int *out)
{
    return REAL(f)->pMethods->xCheckReservedLock(REAL(f), out);
}
static int f_control(sqlite3_file *f, int op, void *arg)
{
    return REAL(f)->pMethods->xFileControl(REAL(f), op, arg);
}
static int f_sector(sqlite3_file *f)
{
    return REAL(f)->pMethods->xSectorSize(REAL(f));
}
static int f_caps(sqlite3_file *f)
{
    return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f));
}
static int f_shm_map(sqlite3_file *f, int pg, int sz, int extend, void volatile **pp)
{
    return REAL(f)->pMethods->xShmMap(REAL(f), pg, sz, extend, pp);
}
static int f_shm_lock(sqlite3_file *f, int off, int n, int flags)
{
    /* A read transaction in WAL mode starts by locking the shared index, also when every
     * page it needs is cached: fail there, so that the read fails whatever is cached. */
    if (read_armed && (flags & SQLITE_SHM_LOCK))
        return SQLITE_IOERR_READ;
    return REAL(f)->pMethods->xShmLock(REAL(f), off, n, flags);
}
static void f_shm_barrier(sqlite3_file *f)
{
    REAL(f)->pMethods->xShmBarrier(REAL(f));
}
static int f_shm_unmap(sqlite3_file *f, int del)
{
    return REAL(f)->pMethods->xShmUnmap(REAL(f), del);
}
static int f_fetch(sqlite3_file *f, sqlite3_int64 off, int n, void **pp)
{
    return REAL(f)->pMethods->xFetch(REAL(f), off, n, pp);
}
static int f_unfetch(sqlite3_file *f, sqlite3_int64 off, void *p)
{
    return REAL(f)->pMethods->xUnfetch(REAL(f), off, p);
}

static const sqlite3_io_methods methods = {
    3,          f_close,       f_read,      f_write,   f_truncate, f_sync, f_size,
    f_lock,     f_unlock,      f_check,     f_control, f_sector,   f_caps, f_shm_map,
    f_shm_lock, f_shm_barrier, f_shm_unmap, f_fetch,   f_unfetch,
};

static int v_open(sqlite3_vfs *v, const char *name, sqlite3_file *f, int flags, int *out)
{
    (void)v;
    struct ffile *ff = (struct ffile *)f;
    ff->real = (sqlite3_file *)(ff + 1);
    int rc = real_vfs->xOpen(real_vfs, name, ff->real, flags, out);
    /* SQLite calls xClose only when pMethods is set: set it only when the real file is. */
    f->pMethods = (rc == SQLITE_OK && ff->real->pMethods) ? &methods : NULL;
    return rc;
}

static int v_delete(sqlite3_vfs *v, const char *name, int sync)
{
    (void)v;
    return real_vfs->xDelete(real_vfs, name, sync);
}
static int v_access(sqlite3_vfs *v, const char *name, int flags, int *out)
{
    (void)v;
    return real_vfs->xAccess(real_vfs, name, flags, out);
}
static int v_fullpath(sqlite3_vfs *v, const char *name, int n, char *out)
{
    (void)v;
    return real_vfs->xFullPathname(real_vfs, name, n, out);
}
static int v_random(sqlite3_vfs *v, int n, char *out)
{
    (void)v;
    return real_vfs->xRandomness(real_vfs, n, out);
}
static int v_sleep(sqlite3_vfs *v, int us)
{
    (void)v;
    return real_vfs->xSleep(real_vfs, us);
}
static int v_time(sqlite3_vfs *v, double *out)
{
    (void)v;
    return real_vfs->xCurrentTime(real_vfs, out);
}
static int v_lasterr(sqlite3_vfs *v, int n, char *out)
{
    (void)v;
    return real_vfs->xGetLastError(real_vfs, n, out);
}
static int v_time64(sqlite3_vfs *v, sqlite3_int64 *out)
{
    (void)v;
    return real_vfs->xCurrentTimeInt64(real_vfs, out);
}

static void do_register(void)
{
    real_vfs = sqlite3_vfs_find(NULL);
    if (!real_vfs) {
        register_rc = SQLITE_ERROR;
        return;
    }
    memset(&vfs, 0, sizeof vfs);
    vfs.iVersion = 2;
    vfs.szOsFile = (int)sizeof(struct ffile) + real_vfs->szOsFile;
    vfs.mxPathname = real_vfs->mxPathname;
    vfs.zName = VFS_NAME;
    vfs.xOpen = v_open;
    vfs.xDelete = v_delete;
    vfs.xAccess = v_access;
    vfs.xFullPathname = v_fullpath;
    vfs.xRandomness = v_random;
    vfs.xSleep = v_sleep;
    vfs.xCurrentTime = v_time;
    vfs.xGetLastError = v_lasterr;
    vfs.xCurrentTimeInt64 = v_time64;
    register_rc = sqlite3_vfs_register(&vfs, 0);
}

int store_faults_register(void)
{
    pthread_once(&once, do_register);
    return register_rc;
}

const char *store_faults_vfs_name(void)
{
    return VFS_NAME;
}

void store_faults_arm(const struct store_config *cfg, uint64_t n)
{
    bool fail = false;
    if (cfg->fault_commit_every && n % cfg->fault_commit_every == 0)
        fail = true;
    if (cfg->fault_commit_first && n >= cfg->fault_commit_first &&
        n < cfg->fault_commit_first + (cfg->fault_commit_count ? cfg->fault_commit_count : 1))
        fail = true;
    armed = fail;
}

void store_faults_disarm(void)
{
    armed = false;
    read_armed = false;
}

void store_faults_arm_read(const struct store_config *cfg, uint64_t n)
{
    read_armed = cfg->fault_open_read == n;
}

#else /* !MUTEXD_FAULT_INJECTION */

int store_faults_register(void)
{
    return 0;
}

const char *store_faults_vfs_name(void)
{
    return NULL;
}

void store_faults_arm(const struct store_config *cfg, uint64_t n)
{
    (void)cfg;
    (void)n;
}

void store_faults_disarm(void)
{
}

void store_faults_arm_read(const struct store_config *cfg, uint64_t n)
{
    (void)cfg;
    (void)n;
}

#endif
