/* threadpool.h -- the library's own thread pool (monolib kernel library).
 *
 * Persistent pthread workers, no OpenMP: the library stays one self-contained file
 * (pthread is in libc on glibc >= 2.34, musl and macOS; elsewhere link with -pthread).
 *
 *   ml_parallel_for(n_tasks, fn, ctx, scratch0, scratch_bytes)
 *
 * runs fn(ctx, task, scratch) for task = 0..n_tasks-1 on up to ml_num_threads() threads;
 * the calling thread takes part (as thread 0) and returns when every task is done. Thread
 * t owns the t-th contiguous range of the tasks and claims them one at a time in order;
 * a thread out of its own tasks claims the next ones of the others' ranges, so a thread
 * slowed down by another process does not hold up the rest. Owned ranges keep the data
 * on its core from op to op: an op split over its output in order writes each part on
 * the thread whose part of the next op reads it (with tasks handed out from one shared
 * counter, about half of every op's input came from the other core's cache: PP-LCNet's
 * 28x28 depthwise conv after its 1x1 GEMM ran 43-48 us at 2 threads, 25 alone; a
 * GhostNet residual Add of 16K floats 5-7 us at 2 threads, 1.1-1.5 at 1).
 * `scratch` is thread-private memory of scratch_bytes
 * (64-aligned): scratch0 (the op's planned arena scratch) for the calling thread, a
 * buffer owned by the pool for each worker.
 *
 * Waiting: a worker spins on its own "go" word for a while after each job (an op that
 * follows soon wakes it in well under a microsecond), then sleeps on a condition
 * variable. How long is set at run time: MONOLIB_SPIN_US at load, ml_set_spin after
 * (0: sleep at once, for a server idle between requests; default ML_SPIN_NS).
 * ml_pool_nap sends the workers that spin to sleep now (the runtime calls it when the
 * process goes on to run another library, whose own workers need the cores).
 * ml_pool_stop joins the workers (the next job that splits starts them again).
 * One job at a time: a second thread calling in while a job runs (two executors of
 * one library in parallel threads) runs its tasks alone, serially.
 *
 * Thread count: MONOLIB_NUM_THREADS at load, else the CPUs the process may run on
 * (sched_getaffinity); ml_set_num_threads changes it (capped at ML_MAX_THREADS).
 * Windows and WebAssembly builds (and -DML_NO_THREADS) get a serial stand-in with the
 * same interface: the tasks run inline on the calling thread.
 */
#ifndef MONOLIB_THREADPOOL_H
#define MONOLIB_THREADPOOL_H
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>

#define ML_MAX_THREADS 64
/* Work (multiply-adds; a float moved by a memory-bound op counts 4) below which an op
 * stays on the calling thread: some 70 us of work. A compute kernel's task repeats
 * per-task set-up (a GEMM split by rows packs all of B in each task): measured on
 * 2 cores, ops of 1-2M multiply-adds (PP-OCR cls's GEMMs) were no faster split, and
 * at 128K oww_embedding's 96x48x288 im2col GEMMs ran 2.7-3x slower on 2 threads
 * (53 -> 143 us, quiet Xeon). */
#ifndef ML_PAR_MIN_WORK
#define ML_PAR_MIN_WORK (1 << 21)
#endif
/* The same for memory-bound loops whose blocks share no set-up (ml_par_tasks_mem:
 * elementwise chains, copies, pools, fills, normalizations). Measured on 2 cores (AMD
 * EPYC, KVM; minimum of 2000 runs): a job's round trip to a spinning worker costs
 * ~0.2 us and a leaky-relu over 2K floats (0.8 us) already ran 1.4x faster split, 8K
 * floats 1.8x: 128K (some 3-6 us of work) splits what can gain while the workers spin.
 * Waking a sleeping worker is another matter: the caller's futex wake took 6 us
 * (median; 15 at p90) and the worker arrived tens of microseconds later, so while every
 * worker sleeps only an op of ML_PAR_WAKE_WORK (some 70 us) wakes them. */
#ifndef ML_PAR_MIN_MEM
#define ML_PAR_MIN_MEM (1 << 17)
#endif
#ifndef ML_PAR_WAKE_WORK
#define ML_PAR_WAKE_WORK (1 << 21)
#endif

typedef void (*ml_task_fn)(void* ctx, int64_t task, void* scratch);

/* The context of a generated elementwise task (codegen/c.py): an op's base pointers and
 * the block of its outermost loop each task computes. */
typedef struct {
    const uint8_t* params;
    uint8_t* arena;
    int64_t chunk;
} ml_ew_ctx;

/* WebAssembly: single-threaded unless built for wasm threads (-DML_WASM_THREADS: atomics
 * and a shared memory, which a browser gives only to a cross-origin isolated page). */
#if defined(__wasm__) && !defined(ML_WASM_THREADS) && !defined(ML_NO_THREADS)
#define ML_NO_THREADS 1
#endif

#if defined(_WIN32) || defined(ML_NO_THREADS)

static int32_t ml_pool_nthreads = 1;
static inline int32_t ml_num_threads(void) { return 1; }
static inline int32_t ml_set_num_threads(int32_t n) { (void)n; return 1; }
static inline int32_t ml_set_spin(int32_t us) { (void)us; return 0; }
static inline void ml_pool_stop(void) {}
static inline void ml_pool_nap(void) {}
static inline int ml_pool_asleep(void) { return 1; }
static inline void ml_pool_kick(void) {}
static inline int ml_pool_backing_off(void) { return 0; }
static inline void ml_parallel_for(int64_t n_tasks, ml_task_fn fn, void* ctx, void* scratch0,
                                   size_t scratch_bytes) {
    (void)scratch_bytes;
    for (int64_t i = 0; i < n_tasks; ++i) fn(ctx, i, scratch0);
}

#else

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#define ML_PAUSE() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define ML_PAUSE() __asm__ __volatile__("yield")
#else
#define ML_PAUSE() ((void)0)
#endif
/* After a job a worker spins (pause instructions) for ML_SPIN_NS before it sleeps:
 * waking a sleeping thread costs tens of microseconds on a VM, more than many ops take,
 * while the serial ops between two parallel ones rarely last longer than this. */
#ifndef ML_SPIN_NS
#define ML_SPIN_NS 300000
#endif
#define ML_SPIN_MAX_US 1000000
#define ML_SPIN_CALLER 4000
/* A worker that holds up a job (the caller, out of tasks, waited over ML_LATE_NS and
 * over twice its own share for a claimed task) was descheduled: another process wants
 * that core. Splitting then loses (Silero's sequence model beside a compiler on the
 * other core: 0.87 ms at 1 thread, 1.29 at 2), so ops run on the caller for a back-off
 * that doubles with each late job (ML_BACKOFF_MIN..MAX) and shrinks by 1/8 with each
 * job on time that a worker took part in; the workers, given nothing, sleep and leave the core to the other
 * process. A quiet machine never waits that long (a wake-up: tens of us). */
#ifndef ML_LATE_NS
#define ML_LATE_NS 200000
#endif
/* The same back-off when the workers took no task of ML_ABSENT_JOBS jobs in a row: they
 * are awake (spinning) but another process holds their core, so each split only added
 * its overhead to the caller's serial work (PP-OCR cls on 2 threads beside another
 * session's tests: 0.60 ms split, 0.51 serial). ML_LATE_NS out of reach (tests that
 * must see splits) turns both off. */
#ifndef ML_ABSENT_JOBS
#define ML_ABSENT_JOBS 3
#endif
/* A job counts as absent only when the caller ran every task for at least this long: a
 * spinning worker claims a task within a few microseconds, so a job the caller finished
 * sooner says nothing of the worker. Counting those too, tiny jobs (an LSTM step's gate
 * GEMM, 1-2 us tasks) that the caller finished before the worker's claim arrived set off
 * back-off after back-off, doubling to ML_BACKOFF_MAX: oww_embedding and g2p_encoder
 * then ran serially through whole benchmark rounds at 2 threads (1.15 ms instead of
 * 0.77, 0.31 instead of 0.19). */
#ifndef ML_ABSENT_NS
#define ML_ABSENT_NS 30000
#endif
#define ML_BACKOFF_MIN 2000000
#define ML_BACKOFF_MAX 256000000
#define ML_STOP UINT64_MAX

typedef struct {
    pthread_mutex_t busy;  /* held for the length of one job */
    pthread_mutex_t mu;    /* with wake: sleeping workers */
    pthread_cond_t wake;
    pthread_t th[ML_MAX_THREADS];
    int32_t started;       /* workers 1..started-1 exist */
    int32_t nthreads;      /* threads a job may use (1 = serial) */
    int32_t sleepers;
    uint64_t gen;
    uint64_t go[ML_MAX_THREADS]; /* worker t runs the job when go[t] changes */
    ml_task_fn fn;
    void* ctx;
    int64_t n_tasks;
    int32_t job_nt;        /* threads of the current job: the ranges in slot[] */
    int64_t done;          /* tasks of the current job finished */
    void* scratch[ML_MAX_THREADS];
    size_t scratch_size[ML_MAX_THREADS];
    int64_t backoff_until; /* ml_now_ns() before which jobs run serially (0: none) */
    int64_t backoff_ns;    /* the current back-off */
    int32_t absent;        /* jobs in a row the workers took no task of */
    int64_t spin_ns;       /* a worker's spin after a job (ml_set_spin) */
    uint64_t nap;          /* a change sends spinning workers to sleep (ml_pool_nap) */
    uint64_t job_nap;      /* nap when the last job started */
    uint64_t kick;         /* under mu: a change wakes sleeping workers with no job */
    int32_t kicked;        /* under mu: a kick is on its way (no second one) */
    /* thread t's range of the current job: ticket = (job generation << 32) | its next
     * task, up to end; a cache line each, claimed by its owner and by thieves */
    struct {
        uint64_t ticket;
        int64_t end;
    } __attribute__((aligned(64))) slot[ML_MAX_THREADS];
} ml_pool_t;

/* A build split into translation units (export/csource.py): the glue unit
 * (ML_SPLIT_GLUE) holds the one pool, the op units (ML_SPLIT_UNIT) refer to it. */
#if defined(ML_SPLIT_UNIT)
extern ML_UNIT_HIDDEN ml_pool_t ml_pool;
ML_UNIT_HIDDEN void ml_parallel_for_unit(int64_t n_tasks, ml_task_fn fn, void* ctx,
                                         void* scratch0, size_t scratch_bytes);
#define ml_parallel_for ml_parallel_for_unit
#else
#if defined(ML_SPLIT_GLUE)
ML_UNIT_HIDDEN
#else
static
#endif
ml_pool_t ml_pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
                     PTHREAD_COND_INITIALIZER};
#endif

static inline int32_t ml_num_threads(void) {
    return __atomic_load_n(&ml_pool.nthreads, __ATOMIC_RELAXED);
}

/* Every worker is asleep (none started yet counts as awake: the first op that may split
 * starts them, and they then spin). Read without the lock, a heuristic: a worker
 * falling asleep meanwhile costs one wake-up, one waking up one missed split. */
static inline int ml_pool_asleep(void) {
    int32_t started = __atomic_load_n(&ml_pool.started, __ATOMIC_RELAXED);
    return started >= 2 && __atomic_load_n(&ml_pool.sleepers, __ATOMIC_RELAXED) >= started - 1;
}

/* Claim and run tasks of job `gen` until none is left: thread t's own range first, then
 * the others' in turn. A task is claimed by a CAS on its range's ticket, which also
 * carries the job: a worker arriving after its job finished claims nothing (and reads
 * the job's fields only under a ticket of that job), so the caller never waits for a
 * worker that was late or descheduled, only for claimed tasks. */
static inline int64_t ml_pool_run_tasks(uint64_t gen, int32_t t, void* scratch) {
    uint64_t tk = __atomic_load_n(&ml_pool.slot[t].ticket, __ATOMIC_ACQUIRE);
    if ((tk >> 32) != (gen & 0xffffffffu)) return 0;
    /* a newer job's count, read late, is harmless: this job is then over (a job starts
     * only when every task of the last one is done) and its tickets no longer match */
    int32_t nt = __atomic_load_n(&ml_pool.job_nt, __ATOMIC_ACQUIRE);
    if (t >= nt) return 0;
    int64_t ran = 0;
    for (int32_t k = 0; k < nt; ++k) {
        int32_t s = t + k < nt ? t + k : t + k - nt;
        for (;;) {
            tk = __atomic_load_n(&ml_pool.slot[s].ticket, __ATOMIC_ACQUIRE);
            if ((tk >> 32) != (gen & 0xffffffffu)) return ran;
            ml_task_fn fn = __atomic_load_n(&ml_pool.fn, __ATOMIC_ACQUIRE);
            void* ctx = __atomic_load_n(&ml_pool.ctx, __ATOMIC_ACQUIRE);
            int64_t end = __atomic_load_n(&ml_pool.slot[s].end, __ATOMIC_ACQUIRE);
            int64_t i = (int64_t)(tk & 0xffffffffu);
            if (i >= end) break; /* this range is all claimed: the next */
            if (!__atomic_compare_exchange_n(&ml_pool.slot[s].ticket, &tk, tk + 1, 0,
                                             __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
                continue;
            fn(ctx, i, scratch);
            ++ran;
            __atomic_fetch_add(&ml_pool.done, 1, __ATOMIC_RELEASE);
        }
    }
    return ran;
}

static inline int64_t ml_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A late worker made the pool back off (ML_LATE_NS): run on the calling thread. */
static inline int ml_pool_backing_off(void) {
    int64_t until = __atomic_load_n(&ml_pool.backoff_until, __ATOMIC_RELAXED);
    return until != 0 && ml_now_ns() < until;
}

/* Wake the sleeping workers with no job: they spin again (ML_SPIN_NS) and take the
 * splits of the ops that follow. One kick at a time (until a worker wakes or falls
 * asleep again): a worker another process keeps off its core is not kicked over and
 * over. Costs the caller a futex wake (~6 us) only while workers sleep. */
static inline void ml_pool_kick(void) {
    if (__atomic_load_n(&ml_pool.kicked, __ATOMIC_RELAXED)) return;
    pthread_mutex_lock(&ml_pool.mu);
    if (!ml_pool.kicked && ml_pool.sleepers > 0) {
        ml_pool.kicked = 1;
        ++ml_pool.kick;
        pthread_cond_broadcast(&ml_pool.wake);
    }
    pthread_mutex_unlock(&ml_pool.mu);
}

#if !defined(ML_SPLIT_UNIT)
static void* ml_pool_worker(void* arg) {
    int t = (int)(intptr_t)arg;
    uint64_t seen = 0;
    for (;;) {
        uint64_t g;
        int spins = 0;
        int64_t spin_from = 0;
        /* a nap sent since the job started counts, however late this worker got to it
         * (descheduled after its last task, it would read the new value and spin on) */
        uint64_t nap = __atomic_load_n(&ml_pool.job_nap, __ATOMIC_RELAXED);
        while ((g = __atomic_load_n(&ml_pool.go[t], __ATOMIC_ACQUIRE)) == seen) {
            /* read each round: a change (ml_set_spin(0), ml_pool_nap) ends a spin under
             * way */
            int64_t spin = __atomic_load_n(&ml_pool.spin_ns, __ATOMIC_RELAXED);
            if (spin > 0 && __atomic_load_n(&ml_pool.nap, __ATOMIC_RELAXED) == nap) {
                ML_PAUSE();
                if (++spins & 63) continue;
                int64_t now = ml_now_ns();
                if (!spin_from) spin_from = now;
                if (now - spin_from < spin) continue;
            }
            pthread_mutex_lock(&ml_pool.mu);
            __atomic_fetch_add(&ml_pool.sleepers, 1, __ATOMIC_SEQ_CST);
            /* a kick sent while this worker still spun is spent: the next may come */
            __atomic_store_n(&ml_pool.kicked, 0, __ATOMIC_RELAXED);
            uint64_t kick = ml_pool.kick;
            while (__atomic_load_n(&ml_pool.go[t], __ATOMIC_SEQ_CST) == seen &&
                   ml_pool.kick == kick)
                pthread_cond_wait(&ml_pool.wake, &ml_pool.mu);
            __atomic_fetch_sub(&ml_pool.sleepers, 1, __ATOMIC_SEQ_CST);
            __atomic_store_n(&ml_pool.kicked, 0, __ATOMIC_RELAXED);
            pthread_mutex_unlock(&ml_pool.mu);
            spin_from = 0; /* woken by a job or a kick: spin again before sleeping */
            nap = __atomic_load_n(&ml_pool.nap, __ATOMIC_RELAXED);
        }
        seen = g;
        if (g == ML_STOP) return 0;
        ml_pool_run_tasks(g, t, ml_pool.scratch[t]);
    }
}

/* Make go[t] visible to worker t, waking sleepers (the seq_cst store/load pairs with the
 * worker's sleepers++ / go[t] check: one of the two sides sees the other). */
static void ml_pool_signal(int32_t nt, uint64_t value) {
    for (int32_t t = 1; t < nt; ++t) __atomic_store_n(&ml_pool.go[t], value, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&ml_pool.sleepers, __ATOMIC_SEQ_CST) > 0) {
        pthread_mutex_lock(&ml_pool.mu);
        pthread_cond_broadcast(&ml_pool.wake);
        pthread_mutex_unlock(&ml_pool.mu);
    }
}

/* Under busy: workers 1..nt-1 exist and own scratch_bytes each; returns the threads
 * actually usable (fewer when a thread or buffer could not be had). */
static int32_t ml_pool_prepare(int32_t nt, size_t scratch_bytes) {
    if (ml_pool.started < nt) {
        /* workers block every signal: the host (e.g. Python) handles them elsewhere */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        while (ml_pool.started < nt) {
            int32_t t = ml_pool.started < 1 ? 1 : ml_pool.started;
            ml_pool.go[t] = 0;
            if (pthread_create(&ml_pool.th[t], 0, ml_pool_worker, (void*)(intptr_t)t) != 0)
                break;
            ml_pool.started = t + 1;
        }
        pthread_sigmask(SIG_SETMASK, &old, 0);
    }
    if (ml_pool.started < nt) nt = ml_pool.started < 1 ? 1 : ml_pool.started;
    for (int32_t t = 1; t < nt; ++t) {
        if (ml_pool.scratch_size[t] >= scratch_bytes) continue;
        void* p = 0;
        size_t want = (scratch_bytes + 63) & ~(size_t)63;
        if (posix_memalign(&p, 64, want) != 0) return t;
        free(ml_pool.scratch[t]);
        ml_pool.scratch[t] = p;
        ml_pool.scratch_size[t] = want;
    }
    return nt;
}

/* Under busy, after a job: `late` (a worker held it up) or `absent` (the caller ran every
 * task, for ML_ABSENT_NS or more, ML_ABSENT_JOBS jobs in a row) starts or doubles the
 * back-off; a job on time that a worker took part in (`shared`) shrinks it; a short job
 * the caller ran alone changes nothing. */
static void ml_pool_after_job(int late, int absent, int shared) {
    if (absent) {
        if (++ml_pool.absent >= ML_ABSENT_JOBS && ML_LATE_NS < (1LL << 40)) late = 1;
    } else if (shared) {
        ml_pool.absent = 0;
    }
    if (late) {
        ml_pool.absent = 0;
        int64_t b = ml_pool.backoff_ns * 2;
        ml_pool.backoff_ns = b < ML_BACKOFF_MIN ? ML_BACKOFF_MIN
                             : b > ML_BACKOFF_MAX ? ML_BACKOFF_MAX : b;
        __atomic_store_n(&ml_pool.backoff_until, ml_now_ns() + ml_pool.backoff_ns,
                         __ATOMIC_RELAXED);
    } else if (shared && ml_pool.backoff_ns) {
        ml_pool.backoff_ns -= ml_pool.backoff_ns / 8;
        if (ml_pool.backoff_ns < ML_BACKOFF_MIN / 2) {
            ml_pool.backoff_ns = 0;
            __atomic_store_n(&ml_pool.backoff_until, 0, __ATOMIC_RELAXED);
        }
    }
}

static void ml_parallel_for(int64_t n_tasks, ml_task_fn fn, void* ctx, void* scratch0,
                            size_t scratch_bytes) {
    int32_t nt = ml_num_threads();
    if (nt > n_tasks) nt = (int32_t)n_tasks;
    if (nt <= 1 || ml_pool_backing_off() || pthread_mutex_trylock(&ml_pool.busy) != 0) {
        for (int64_t i = 0; i < n_tasks; ++i) fn(ctx, i, scratch0);
        return;
    }
    const int32_t had = ml_pool.started; /* workers started now are late by their start */
    nt = ml_pool_prepare(nt, scratch_bytes);
    /* Close the last job's tickets before its fields change. A worker still looping on
     * that job (every task claimed) could read this job's fields, find an old ticket's
     * index below them and win the CAS on the old ticket: a task the old job never had,
     * run with either job's fn and ctx (a depthwise task read a GEMM's job as its own
     * and divided by zero, about once in 5000 runs of MnasNet at 2 threads beside ORT).
     * No job has generation 0xffffffff; the fields are stored with release and loaded
     * with acquire, so a worker that sees any of this job's fields sees the close. */
    int32_t was = ml_pool.job_nt > nt ? ml_pool.job_nt : nt;
    for (int32_t t = 0; t < was; ++t)
        __atomic_store_n(&ml_pool.slot[t].ticket, UINT64_MAX, __ATOMIC_SEQ_CST);
    __atomic_store_n(&ml_pool.fn, fn, __ATOMIC_RELEASE);
    __atomic_store_n(&ml_pool.ctx, ctx, __ATOMIC_RELEASE);
    __atomic_store_n(&ml_pool.n_tasks, n_tasks, __ATOMIC_RELEASE);
    __atomic_store_n(&ml_pool.job_nt, nt, __ATOMIC_RELEASE);
    __atomic_store_n(&ml_pool.done, 0, __ATOMIC_RELAXED);
    uint64_t gen = ++ml_pool.gen & 0xffffffffu;
    if (gen == 0 || gen == (ML_STOP & 0xffffffffu)) gen = ml_pool.gen = 1; /* 0: "seen" */
    for (int32_t t = 0; t < nt; ++t) {
        int64_t lo = n_tasks * t / nt;
        __atomic_store_n(&ml_pool.slot[t].end, n_tasks * (t + 1) / nt, __ATOMIC_RELEASE);
        __atomic_store_n(&ml_pool.slot[t].ticket, gen << 32 | (uint64_t)lo, __ATOMIC_RELEASE);
    }
    /* a worker that slept until this job is late by its wake-up (tens to hundreds of
     * microseconds on a VM whose idle vCPU the host parked), not because another process
     * holds its core: such a job never starts a back-off. Counted, it fed itself: the
     * back-off's serial ops let the workers fall asleep, so the first split after it was
     * late again and the back-off doubled (oww_embedding at 2 threads, run in turns with
     * ORT: 1.10-1.27 ms, serial throughout, against 0.76-0.84 uncounted). A worker
     * started for this job is late by its start the same way. */
    const int woke = __atomic_load_n(&ml_pool.sleepers, __ATOMIC_SEQ_CST) > 0 || had < nt;
    int64_t t0 = ml_now_ns();
    __atomic_store_n(&ml_pool.job_nap, __atomic_load_n(&ml_pool.nap, __ATOMIC_RELAXED),
                     __ATOMIC_RELAXED);
    ml_pool_signal(nt, gen);
    int64_t own = ml_pool_run_tasks(gen, 0, scratch0);
    int late = 0;
    int64_t t1 = ml_now_ns();
    if (__atomic_load_n(&ml_pool.done, __ATOMIC_ACQUIRE) < n_tasks) {
        for (int spins = 0; __atomic_load_n(&ml_pool.done, __ATOMIC_ACQUIRE) < n_tasks;)
            if (++spins < ML_SPIN_CALLER) ML_PAUSE();
            else sched_yield();
        int64_t wait = ml_now_ns() - t1;
        /* own share: the caller's time per task it ran (all of it when it ran none) */
        late = wait > ML_LATE_NS && wait > 2 * ((t1 - t0) / (own > 0 ? own : 1));
    }
    ml_pool_after_job(late && !woke, !woke && own >= n_tasks && t1 - t0 >= ML_ABSENT_NS,
                      own < n_tasks);
    pthread_mutex_unlock(&ml_pool.busy);
}

#if defined(ML_SPLIT_GLUE)
/* The op units' ml_parallel_for (ML_SPLIT_UNIT above). */
ML_UNIT_HIDDEN void ml_parallel_for_unit(int64_t n_tasks, ml_task_fn fn, void* ctx,
                                         void* scratch0, size_t scratch_bytes) {
    ml_parallel_for(n_tasks, fn, ctx, scratch0, scratch_bytes);
}
#endif

/* The default thread count: the CPUs this process may run on. */
static int32_t ml_default_threads(void) {
    long n = 1;
#if defined(__linux__) && defined(CPU_COUNT)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
    else n = sysconf(_SC_NPROCESSORS_ONLN);
#elif defined(_SC_NPROCESSORS_ONLN)
    n = sysconf(_SC_NPROCESSORS_ONLN);
#endif
    return n < 1 ? 1 : (n > ML_MAX_THREADS ? ML_MAX_THREADS : (int32_t)n);
}

/* n >= 1: use n threads (capped at ML_MAX_THREADS); n <= 0: leave it. Returns the count
 * in effect. Waits for a running job to finish. */
static int32_t ml_set_num_threads(int32_t n) {
    if (n >= 1) {
        if (n > ML_MAX_THREADS) n = ML_MAX_THREADS;
        pthread_mutex_lock(&ml_pool.busy);
        __atomic_store_n(&ml_pool.nthreads, n, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&ml_pool.busy);
    }
    return ml_num_threads();
}

/* us >= 0: workers spin us microseconds after a job before they sleep (capped at
 * ML_SPIN_MAX_US); us < 0: leave it. Returns the spin in effect, in microseconds. */
static int32_t ml_set_spin(int32_t us) {
    if (us >= 0)
        __atomic_store_n(&ml_pool.spin_ns,
                         (int64_t)(us > ML_SPIN_MAX_US ? ML_SPIN_MAX_US : us) * 1000,
                         __ATOMIC_RELAXED);
    return (int32_t)(__atomic_load_n(&ml_pool.spin_ns, __ATOMIC_RELAXED) / 1000);
}

/* Workers spinning after a job sleep now, not at the end of their spin (a job or a
 * kick wakes them as usual). For a process that goes on to run another library: this
 * one's spinning workers would hold cores the other's workers need (PP-OCR cls and rec
 * called in turns at 2 threads on 2 cores: cls 0.47 -> 0.67-1.13 ms without it). */
static void ml_pool_nap(void) { __atomic_fetch_add(&ml_pool.nap, 1, __ATOMIC_RELAXED); }

/* Under busy: stop and join every worker, free their scratch (the next job that
 * splits starts them again). */
static void ml_pool_join(void) {
    ml_pool_signal(ml_pool.started, ML_STOP);
    for (int32_t t = 1; t < ml_pool.started; ++t) pthread_join(ml_pool.th[t], 0);
    for (int32_t t = 1; t < ml_pool.started; ++t) {
        free(ml_pool.scratch[t]);
        ml_pool.scratch[t] = 0;
        ml_pool.scratch_size[t] = 0;
    }
    ml_pool.started = 0;
}

/* Stop the workers (Module.close before dlclose): waits for a running job. */
static void ml_pool_stop(void) {
    pthread_mutex_lock(&ml_pool.busy);
    ml_pool_join();
    pthread_mutex_unlock(&ml_pool.busy);
}

/* A forked child has only the forking thread: forget the parent's workers. */
static void ml_pool_atfork_child(void) {
    pthread_mutex_init(&ml_pool.busy, 0);
    pthread_mutex_init(&ml_pool.mu, 0);
    pthread_cond_init(&ml_pool.wake, 0);
    ml_pool.started = 0;
    ml_pool.sleepers = 0;
}

__attribute__((constructor)) static void ml_pool_init(void) {
    int32_t n = ml_default_threads();
    const char* env = getenv("MONOLIB_NUM_THREADS");
    if (env && *env) {
        long v = strtol(env, 0, 10);
        if (v >= 1) n = v > ML_MAX_THREADS ? ML_MAX_THREADS : (int32_t)v;
    }
    ml_pool.nthreads = n;
    ml_pool.spin_ns = ML_SPIN_NS;
    env = getenv("MONOLIB_SPIN_US");
    if (env && *env) {
        char* end = 0;
        long v = strtol(env, &end, 10);
        if (end != env && v >= 0) ml_set_spin(v > ML_SPIN_MAX_US ? ML_SPIN_MAX_US : (int32_t)v);
    }
    pthread_atfork(0, 0, ml_pool_atfork_child);
}

/* Unload (dlclose or exit): stop and join the workers before their code goes away. */
__attribute__((destructor)) static void ml_pool_fini(void) {
    /* a job still running (another thread at exit): leave the workers to the exit */
    if (pthread_mutex_trylock(&ml_pool.busy) != 0) return;
    ml_pool_join();
    pthread_mutex_unlock(&ml_pool.busy);
}
#endif /* !ML_SPLIT_UNIT */

#endif /* threads */

/* Tasks for `work` units split into pieces of at most `units` blocks: one (serial) below
 * `least`, or below ML_PAR_WAKE_WORK while the workers sleep (then kicked awake for the
 * ops that follow, ml_pool_kick), or while the pool backs off; else about 4 per thread
 * so a delayed thread is covered by the others. */
static inline int64_t ml_par_tasks_over(double work, int64_t units, double least) {
    int32_t nt = ml_num_threads();
    if (nt <= 1 || work < least || units < 2 || ml_pool_backing_off()) return 1;
    if (work < ML_PAR_WAKE_WORK && ml_pool_asleep()) {
        ml_pool_kick();
        return 1;
    }
    int64_t t = (int64_t)nt * 4;
    return t < units ? t : units;
}

/* A memory-bound loop (a float moved counts 4): from ML_PAR_MIN_MEM. */
static inline int64_t ml_par_tasks_mem(double work, int64_t units) {
    return ml_par_tasks_over(work, units, ML_PAR_MIN_MEM);
}

/* `work` multiply-adds: from ML_PAR_MIN_WORK. */
static inline int64_t ml_par_tasks(double work, int64_t units) {
    return ml_par_tasks_over(work, units, ML_PAR_MIN_WORK);
}

/* Split by modelled cost (ml_par_split, ml_par_pays, gemm.h's ml_gemm_split): an op
 * splits when its longest thread's modelled time plus the job's overhead beats its time
 * on the calling thread, not above a fixed size. One unit throughout: a multiply-add at
 * the GEMM micro-kernel's rate (gemm.h's ml_gemm_task_cost counts in it; on the 2-core
 * Zen 4 of bench/, 1 thread, GEMMs of 24x64x72 .. 200x40x480: 0.012-0.018 ns a
 * unit, some 60 a nanosecond). Measured there (gcc -O3 -march=native, 2 threads,
 * workers spinning, each job's input rewritten by the caller first, quartile of 301
 * interleaved runs):
 *   ML_PAR_JOB_COST: a split's cost beyond its tasks' modelled share. The bare round trip
 *     (ml_parallel_for of 2 empty tasks) took 90-120 ns, but the first touches of the
 *     other core's data cost more: GEMMs split in 2 ran 0-950 ns (median ~400) over their
 *     modelled span (16x256x32: 2.96 us split, 3.35 serial; 24x64x72: 2.14 vs 2.73;
 *     56x96x216 against packed weights: 10.8 vs 20.1), so 0.5 us: 30000.
 *   ML_PAR_TASK_COST: each further task (a CAS on a range's ticket, the done count, the
 *     task's own first misses): splits of 4-8 tasks of those GEMMs ran 5-15% slower
 *     than of 2, 0.2-1 us: 12000 (gemm.h's ML_TASK_COST, its GEMM tasks', is larger).
 *   ML_PAR_FLOAT_COST: a float a memory-bound kernel (padding, im2col gathers,
 *     transposes, packing) reads and writes in cache: conv.h's padding took 0.10-0.43 ns
 *     a float (16x112x112 .. 48x34x16 channels x rows x columns; 1.4 on 4-float rows),
 *     its pixel transpose 0.13-0.18: 0.2 ns, 12.
 * Waking sleeping workers is kept apart (ML_PAR_WAKE_WORK: only an op that large waits
 * for them; a smaller one that would pay off split kicks them awake and runs serially,
 * ml_par_pays), as is the back-off from late workers. Against the former 2^21 floor
 * (same machine, quiet, one process, each library timed in turn; ms at 2 threads, ORT
 * beside): oww_embedding 0.949 -> 0.752 (ORT 0.836), PP-OCR cls 0.496 -> 0.424 (0.875),
 * oww_alexa 0.014 -> 0.010 (0.013), g2p_encoder 0.159 -> 0.152, Silero's sequence model
 * 0.636 -> 0.613; larger models within noise (+-4%); 1 thread: the same code. */
#ifndef ML_PAR_JOB_COST
#define ML_PAR_JOB_COST 30000.0
#endif
#ifndef ML_PAR_TASK_COST
#define ML_PAR_TASK_COST 12000.0
#endif
#ifndef ML_PAR_FLOAT_COST
#define ML_PAR_FLOAT_COST 12.0
#endif

/* The most tasks an op over `units` pieces may split into now: 1 (serial) on one
 * thread or while the pool backs off; else up to 4 a thread. */
static inline int64_t ml_par_most(double cost, int64_t units) {
    (void)cost;
    int32_t nt = ml_num_threads();
    if (nt <= 1 || units < 2 || ml_pool_backing_off()) return 1;
    int64_t t = (int64_t)nt * 4;
    return t < units ? t : units;
}

/* Modelled finish time of n tasks of cost `each` (the last one `last`) on nt threads, each
 * task taken in order by the first thread free, plus the job's overhead. */
static inline double ml_par_span(int64_t n, double each, double last, int32_t nt) {
    int64_t rounds = n / nt, rest = n % nt;
    if (rest == 0) return (double)(rounds - 1) * each + (last > each ? last : each) + ML_PAR_JOB_COST;
    /* the last task lands on a thread that ran `rounds` tasks */
    double t = (double)rounds * each + (rest > 1 || rounds == 0 ? each : 0.0);
    double l = (double)rounds * each + last;
    return (t > l ? t : l) + ML_PAR_JOB_COST;
}

/* Whether to split now: the split's longest thread's modelled time `span`
 * (ML_PAR_JOB_COST included) beats `serial`, the op's on the calling thread, and the
 * workers are awake, or the op is large enough to wake them (ML_PAR_WAKE_WORK). A
 * smaller op runs serially and kicks sleeping workers awake for the ops after it:
 * waiting for the op that wakes them, a model of small ops (PP-OCR's classifier: none
 * over 1.4M multiply-adds) never split again once its workers had fallen asleep. */
static inline int ml_par_pays(double serial, double span) {
    if (span >= serial) return 0;
    if (serial >= ML_PAR_WAKE_WORK || !ml_pool_asleep()) return 1;
    ml_pool_kick();
    return 0;
}

/* Tasks (1: serial) for `units` equal pieces of `cost` in all, each task adding
 * `task_cost` (ML_PAR_TASK_COST plus what a task repeats): of the counts up to
 * ml_par_most, the one with the least modelled finish time (among those within 3% of it,
 * the most tasks: they cover a thread another process delays), when it beats the
 * serial cost. */
static inline int64_t ml_par_split(double cost, int64_t units, double task_cost) {
    int64_t most = ml_par_most(cost, units);
    if (most <= 1) return 1;
    int32_t nt = ml_num_threads();
    double per = cost / (double)units, best = 0.0;
    int64_t bt = 1;
    for (int64_t t = 2; t <= most; ++t) {
        int64_t chunk = (units + t - 1) / t, n = (units + chunk - 1) / chunk;
        if (n != t) continue; /* the same split as fewer tasks */
        double span = ml_par_span(n, chunk * per + task_cost,
                                  (units - (n - 1) * chunk) * per + task_cost, nt);
        if (bt == 1 || span < 0.97 * best) { best = span; bt = t; }
        else if (span <= 1.03 * best) bt = t;
    }
    return bt > 1 && ml_par_pays(cost, best) ? bt : 1;
}
#endif /* MONOLIB_THREADPOOL_H */
