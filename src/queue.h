/*-------------------------------------------------------------------------
 *
 * queue.h
 *		Shared declarations of the queue extension.
 *
 * The C side of the extension serves the hot path (enqueue, dequeue,
 * complete, fail) and the checks every call makes (names, arguments,
 * queue settings, per-queue access).  Everything runs through SPI with
 * plans prepared once per backend and kept; no statement text is ever
 * built from an argument.  Every SPI connection runs its statements with
 * pg_catalog as the whole search path and without JIT (statement_scope.c),
 * and every statement qualifies its functions, types and operators besides
 * (the plans are kept, so they must not depend on the path in force when
 * they were made): OP("=") expands to OPERATOR(pg_catalog.=).  Mind that
 * OPERATOR() binds like any user operator: parenthesise arithmetic on
 * either side of a comparison.
 *
 * src/queue.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef QUEUE_H
#define QUEUE_H

#include "postgres.h"

#include "access/genam.h"
#include "executor/spi.h"
#include "storage/itemptr.h"
#include "utils/array.h"
#include "utils/snapshot.h"
#include "utils/timestamp.h"

/* A built-in operator, immune to the caller's search_path. */
#define OP(o) " OPERATOR(pg_catalog." o ") "

/*
 * The queue filter of an UPDATE or DELETE that finds its rows by TID
 * (ctid = ANY(...)): the same equality as queue_name = $1 (every
 * deterministic collation compares by bytes), but under a collation no
 * index of ours has, so it is checked on the rows the TID scan returns and
 * can never turn into an index or bitmap scan of the whole queue, whatever
 * the statistics say (or before the first ANALYZE).  The statement still
 * filters by the queue at every level (distribution by queue).
 */
#define OUTER_QUEUE_FILTER "$1 COLLATE pg_catalog.\"C\""

/* Kinds of the rows of the claim's result (dequeue.c, distributed.c). */
#define CLAIM_ROW_LEASED	"0"
#define CLAIM_ROW_EXPIRED	"1"
#define CLAIM_ROW_SPENT		"2"
#define CLAIM_ROW_CANDIDATE "3"

/* Limits of the public contract. */
#define QUEUE_NAME_MAXLEN		47
#define QUEUE_PRIORITY_MIN		0
#define QUEUE_PRIORITY_MAX		1000
#define QUEUE_BATCH_MAX			10000	/* dequeue's batch_size */
#define QUEUE_BATCH_ARRAY_MAX	100000	/* elements of enqueue_batch, complete_batch */
#define QUEUE_DEFAULT_PRIORITY	2
#define QUEUE_TEXT_MAX_BYTES	65536	/* a text stored with an item */
#define QUEUE_WORKER_MAX_BYTES	255		/* a worker name */
#define QUEUE_KEY_INDEX_MAX_BYTES	2596	/* a key as an index entry, compressed */
#define QUEUE_INTERVAL_MAX_YEARS	1000	/* a duration: a setting, a lease, a retry */

/* GUC defaults. */
#define QUEUE_DEFAULT_MAX_PAYLOAD_BYTES		1048576
#define QUEUE_DEFAULT_WORKER_OFFLINE_AFTER	120
#define QUEUE_DEFAULT_HISTORY_PARTITION_WIDTH	86400	/* one day */
#define QUEUE_DEFAULT_CLAIM_HINT_THRESHOLD	200

/* Values of queue.notify_handoff. */
typedef enum QueueNotifyHandoff
{
	QUEUE_NOTIFY_HANDOFF_AUTO,		/* while a notifier runs or the lock is busy */
	QUEUE_NOTIFY_HANDOFF_ALWAYS,	/* always, starting a notifier if none runs */
	QUEUE_NOTIFY_HANDOFF_NEVER		/* always notify in the transaction */
} QueueNotifyHandoff;

/* Access kinds of the per-queue grants. */
typedef enum QueueAccess
{
	QUEUE_ACCESS_READER,
	QUEUE_ACCESS_PRODUCER,
	QUEUE_ACCESS_WORKER
} QueueAccess;

/*
 * What the hot path needs of one queue's settings and state, read fresh by
 * every call (one primary-key probe) so that pause, breaker and alter take
 * effect at once in every backend.
 */
typedef struct QueueConfig
{
	char	   *queue_name;			/* validated name */
	Interval	lease_timeout;		/* default lease */
	int32		max_attempts;		/* default per item */
	double		backoff_base_s;		/* backoff base, seconds */
	double		backoff_factor;		/* growth per attempt */
	double		backoff_max_s;		/* backoff cap, seconds */
	double		backoff_jitter;		/* +/- fraction */
	Interval	backoff_base;		/* the same two as intervals: a backoff */
	Interval	backoff_max;		/* is computed in interval arithmetic */
	bool		has_item_ttl;		/* item_ttl set? */
	Interval	item_ttl;
	bool		has_dedup_window;	/* dedup_window set? */
	Interval	dedup_window;
	int32		max_in_flight;		/* 0 = no cap */
	bool		notify;				/* NOTIFY queue_<name> on enqueue */
	char		audit;				/* 'a'll, 'f'ailures, 'n'one */
	bool		has_breaker;		/* breaker_threshold set? */
	bool		paused;				/* paused by the operator (pause/resume) */
	char		breaker_state;		/* 'c'losed, 'o'pen, 'p'robing */
	bool		cooldown_over;		/* open breaker may send a probe */
	bool		probe_lost;			/* probing, but the probe's lease ended */
	int64		probe_item_id;		/* item handed out as the probe */
	bool		restrict_reader;	/* per-queue grants exist, by kind */
	bool		restrict_producer;
	bool		restrict_worker;
	bool		flow_limits;		/* per-key limits exist (flow.c) */
	bool		flow_rate;			/* a queue-wide rate exists (flow.c) */
} QueueConfig;

/* What the circuit breaker lets dequeue do (breaker.c). */
typedef enum BreakerGate
{
	BREAKER_PASS,				/* closed: claim as usual */
	BREAKER_PROBE,				/* half-open: this call claims the one probe */
	BREAKER_BLOCK				/* paused or open: hand out nothing */
} BreakerGate;

/* What dequeue needs of a worker's registry row. */
typedef struct QueueWorkerGates
{
	bool		draining;		/* gets nothing new */
	bool		has_capacity;	/* a capacity is set (checked under lock) */
	bool		in_maintenance;	/* inside a maintenance window now */
	TimestampTz last_seen;		/* as last written */
} QueueWorkerGates;

/*
 * Flow control (schema/45_flow.sql, flow.c): items of a limited key live
 * in a priority band of their own, group members waiting behind their head
 * are parked at a fixed visible_at.  Both must match the SQL side.
 */
#define FLOW_BAND		"100000"
#define QUEUE_FLOW_BAND	100000	/* FLOW_BAND as a number */
#define FLOW_PARKED		"294276-12-31 00:00:00+00"
/* FLOW_PARKED as a TimestampTz: the last day of PostgreSQL's range */
#define FLOW_PARKED_TS	(END_TIMESTAMP - USECS_PER_DAY)

/*
 * A visible row of item_live (alias i) that the claim would hand out,
 * not dead-letter: not past its expires_at, and not a lost lease whose
 * attempts are spent or whose cancel was requested (the claim
 * statement's "expired" and "spent", dequeue.c).  What a dequeue looks
 * at to share a batch between limited keys and the rest (flow.c,
 * dequeue.c) counts only such rows, so that a row it will bury takes no
 * claimable item's place.
 */
#define FLOW_HANDED_OUT_EXPR \
	"((i.expires_at IS NULL OR i.expires_at" OP(">") "pg_catalog.statement_timestamp()) " \
	" AND NOT (i.lease_token IS NOT NULL AND (i.attempt" OP(">=") "i.max_attempts " \
	"                                         OR i.lease_token" OP("<") "0))) "
#define FLOW_HANDED_OUT "   AND " FLOW_HANDED_OUT_EXPR

/* One limited key (or the queue-wide rate) during a dequeue. */
typedef struct FlowLane
{
	Datum		key;			/* limit_key as text; '' = the whole queue */
	int32		max_in_flight;	/* 0 = no cap */
	int32		rate;			/* 0 = no rate */
	Interval	per;			/* the rate's window */
	TimestampTz at;				/* clock when measured; claims recorded then */
	int64		in_flight;		/* current leases when measured */
	int64		used;			/* claims in the window when measured */
	TimestampTz oldest;			/* oldest of those claims */
	int64		room;			/* what the lane may take now */
	bool		head_buried;	/* its first item is one the claim dead-letters */
} FlowLane;

/* queue.c (the GUCs; claim_hint_threshold lives in dequeue.c) */
extern int	queue_max_payload_bytes;
extern int	queue_worker_offline_after;
extern int	queue_claim_hint_threshold;
extern SPIPlanPtr queue_prepare_cached(SPIPlanPtr *slot, const char *sql,
									   int nargs, Oid *argtypes);
extern void queue_spi_check(int rc, int expected, const char *what);
extern void queue_spi_exec(SPIPlanPtr plan, Datum *values, const char *nulls,
						   bool read_only, long count, int expected,
						   const char *what);
extern void queue_spi_exec_one(SPIPlanPtr plan, Datum *values, const char *nulls,
							   bool read_only, long count, int expected,
							   const char *what);
extern void queue_spi_count_latest(SPIPlanPtr plan, Datum *values, const char *what);
extern void queue_spi_connect(void);
extern void queue_spi_finish(void);
typedef struct QueueSubxact
{
	MemoryContext cxt;			/* the caller's, restored at the end */
	ResourceOwner owner;
} QueueSubxact;
extern void queue_subxact_begin(QueueSubxact *sx);
extern void queue_subxact_end(const QueueSubxact *sx, bool keep);
extern ErrorData *queue_subxact_catch(const QueueSubxact *sx);

/* statement_scope.c */
extern void queue_scope_push(void);
extern void queue_scope_pop(void);
extern void queue_scope_init(void);

/* item_lookup.c */
extern void queue_item_lookup_relcache(Datum arg, Oid relid);
extern void queue_item_pkey_rescan(IndexScanDesc scan, Datum qname, int64 item_id);
extern Oid	queue_item_live_oid(void);
extern Oid	queue_claim_index_oid(void);
extern Snapshot queue_lookup_snapshot(void);
typedef struct QueueItemLookup QueueItemLookup;
extern QueueItemLookup *queue_item_lookup_begin(Snapshot snapshot);
extern bool queue_item_lookup(QueueItemLookup *l, Datum qname, int64 item_id,
							  int64 lease_token, ItemPointer tid);
extern void queue_item_lookup_end(QueueItemLookup *l);
extern bool queue_item_tid(Snapshot snapshot, Datum qname, int64 item_id,
						   int64 lease_token, ItemPointer tid);
extern int	queue_fixed_plans(void);
extern void queue_spi_exec_fixed(SPIPlanPtr plan, Datum *values, const char *nulls,
								 Snapshot snapshot, int expected, const char *what);

/* distributed.c */
extern bool queue_citus_loaded(void);
extern bool queue_citus_queue_local(Datum qname);
extern int64 queue_claim_token(void);
extern int64 queue_citus_seen_usecs(void);
extern void queue_citus_complete(Datum *values, const char *nulls, bool batch);
extern void queue_citus_claim(Datum *values, const char *nulls, bool lane, Datum lane_key,
							  bool hinted, int32 hint_priority, TimestampTz hint_since);
extern void queue_distributed_init(void);

/* validate.c */
extern char *queue_check_name(Datum name_datum, bool isnull);
extern void queue_check_not_null(bool isnull, const char *argname);
extern void queue_check_priority(int32 priority);
extern void queue_check_batch_length(int nelems, const char *argname);
extern void queue_check_one_dimensional(ArrayType *arr, const char *argname);
extern void queue_check_no_null_elements(ArrayType *arr, const char *argname, const char *hint);
extern void queue_check_text_bytes(Size bytes, const char *argname);
extern void queue_check_payload(Datum payload, const char *argname);
extern void queue_check_jsonb_size(Datum value, const char *argname);
extern void queue_check_key_size(Datum value, const char *argname);
extern void queue_check_dedup_key(Datum value, const char *argname);
extern void queue_check_text_size(Datum value, const char *argname);
extern void queue_check_worker(Datum worker, bool isnull);
extern void queue_check_run_at(TimestampTz run_at);
extern void queue_check_positive_interval(Interval *iv, const char *argname);
extern void queue_check_interval_bound(Interval *iv, const char *argname);
extern double queue_interval_seconds(const Interval *iv);
extern void queue_check_writable(FunctionCallInfo fcinfo);

/* config.c */
extern void queue_config_relcache(Datum arg, Oid relid);
extern void queue_lock_queue(const char *queue_name, bool exclusive);
extern void queue_load_config(const char *queue_name, QueueConfig *cfg);
extern bool queue_find_config(const char *queue_name, QueueConfig *cfg);
extern bool queue_load_worker(Datum worker, QueueWorkerGates *gates);
extern void queue_worker_seen(Datum worker, TimestampTz when);
extern bool queue_worker_seen_since(Datum worker, TimestampTz since);

/* index_entries.c: index entries of rows written without statements */
extern void queue_index_entries_relcache(Datum arg, Oid relid);
extern bool queue_index_entries_usable(Relation heap);
extern void queue_insert_index_entries(Relation heap, TupleTableSlot *slot, Bitmapset *updated);
extern void queue_insert_index_entries_many(Relation heap, TupleTableSlot **slots, int nslots);

/* claim_direct.c: the common claim without a statement */
#define QUEUE_DEQUEUE_NCOLS 11	/* columns of dequeue's result */
typedef struct QueueDirectClaim
{
	/* in */
	Datum		qname;			/* queue name (text) */
	Datum		worker;			/* worker name (text) */
	Interval   *lease;			/* lease of each claim */
	int			stripe;			/* max_in_flight stripe charged, -1 for none */
	int64		limit;			/* most items to claim */
	bool		hinted;			/* start at the hint's (priority, visible_at,
								 * item_id) */
	int32		hint_priority;
	TimestampTz hint_visible_at;
	int64		hint_item_id;
	void		(*emit) (void *arg, Datum *values, bool *nulls);	/* per claimed row */
	void	   *emit_arg;
	/* out, for each emit: where the claimed row stood in the claim order */
	int32		emit_priority;
	TimestampTz emit_visible_at;
	/* out */
	bool		need_statement; /* a candidate was left to the claim statement */
	bool		has_head;		/* a claimable row was met: where */
	int32		head_priority;
	TimestampTz head_visible_at;
	int64		head_item_id;
} QueueDirectClaim;
extern void queue_claim_direct_relcache(Datum arg, Oid relid);
extern bool queue_triggers_known(Relation rel, int16 event, const char *const *known, int n);
extern bool queue_claim_direct_possible(void);
extern int64 queue_claim_direct(QueueDirectClaim *dc);

/* enqueue_direct.c: enqueue() and enqueue_batch() of plain items without a statement */
extern void queue_enqueue_direct_relcache(Datum arg, Oid relid);
extern int64 queue_enqueue_direct(Datum qname, int32 priority, TimestampTz run_at,
								  int32 max_attempts, bool has_expires, TimestampTz expires_at,
								  Datum correlation_id, bool correlation_null, Datum payload);
extern bool queue_enqueue_direct_batch(Datum qname, int32 priority, TimestampTz run_at,
									   int32 max_attempts, bool has_expires, TimestampTz expires_at,
									   Datum *payloads, int n, int64 *ids);

/* complete_direct.c: complete() without a statement */
typedef enum QueueDirectResult
{
	QUEUE_DIRECT_DONE,			/* completed */
	QUEUE_DIRECT_NONE,			/* no such item under that lease */
	QUEUE_DIRECT_STATEMENT,		/* nothing done: the statement must do it */
	QUEUE_DIRECT_BUSY,			/* NOWAIT mode: another transaction holds it */
	QUEUE_DIRECT_NOT_HELD		/* HELD mode: this transaction does not hold it */
} QueueDirectResult;
typedef enum QueueCompleterMode
{
	QUEUE_COMPLETER_WAIT,		/* wait for a version another transaction holds */
	QUEUE_COMPLETER_NOWAIT,		/* report it busy instead (complete_direct.c) */
	QUEUE_COMPLETER_HELD		/* complete only what this transaction holds */
} QueueCompleterMode;
typedef struct QueueCompleted
{
	bool		key_null;		/* the item's dedup_key */
	Datum		key;
	int32		attempts;
	char	   *worker;			/* NULL if none */
	bool		cancel_requested;
	ItemPointerData busy;		/* QUEUE_DIRECT_BUSY: the version held */
} QueueCompleted;
extern void queue_complete_direct_relcache(Datum arg, Oid relid);
typedef struct QueueCompleter QueueCompleter;
extern QueueCompleter *queue_completer_begin(QueueCompleterMode mode);
extern QueueDirectResult queue_completer_one(QueueCompleter *c, Datum qname, int64 item_id,
											 int64 token, Datum result, bool result_null,
											 QueueCompleted *out);
extern void queue_completer_end(QueueCompleter *c);
extern void queue_completer_wait(ItemPointer tid);
extern QueueDirectResult queue_complete_direct(Datum qname, int64 item_id, int64 token,
											   Datum result, bool result_null,
											   QueueCompleted *out);

/*
 * Private lock slots of a queue (config.c, queue_lock_private); slot 0 is
 * the queue lock itself.
 */
#define QUEUE_LOCK_SWEEP		1
#define QUEUE_LOCK_STRIPE(s)	(2 + (s))	/* max_in_flight stripes 0..7 */
#define QUEUE_LOCK_BREAKER		10	/* failures judge the breaker in turn */
#define QUEUE_LOCK_ALERT		11	/* raising an alert of a kind (keyed by kind) */
#define QUEUE_LOCK_WORKER_REG	12	/* a dequeue registering a new worker (keyed by its name) */
extern bool queue_lock_private(const char *queue_name, uint16 slot, bool wait);

/* dequeue.c */
extern bool queue_cap_admits_revival(const QueueConfig *cfg, Datum qname, Datum worker,
									 int64 item_id, int stripe, int *charge);

/* worker.c */
extern int64 queue_session_key(void);
extern bool queue_schema_current(void);
extern void queue_worker_alive(Datum worker);

/* breaker.c */
extern BreakerGate queue_breaker_gate(const QueueConfig *cfg, Datum qname);
extern void queue_breaker_probe_claimed(Datum qname, int64 probe_id, TimestampTz expiry);
extern void queue_breaker_extended(const QueueConfig *cfg, Datum qname, int64 item_id,
								   TimestampTz expiry);
extern void queue_breaker_outcome(const QueueConfig *cfg, Datum qname, int64 item_id,
								  bool success);
extern void queue_breaker_released(const QueueConfig *cfg, Datum qname, int64 item_id);
extern void queue_breaker_count(const QueueConfig *cfg, Datum qname, int64 succeeded,
								int64 failed);

/* flow.c */
extern int	flow_open_lanes(Datum qname, Datum worker, int max, FlowLane **lanes);
extern bool flow_queue_rate_room(Datum qname, FlowLane *lane);
extern void flow_close_lane(Datum qname, FlowLane *lane, int64 asked, int nids, Datum *ids);
extern void flow_check_key(Datum key, bool isnull, const char *argname);
extern void flow_check_keys(Datum keys, bool isnull, int n, const char *argname);
extern Datum flow_check_requires(Datum requires, bool *isnull);
extern void queue_flow_init(void);

/* access.c */
extern void queue_check_access(const QueueConfig *cfg, QueueAccess access);

/* enqueue.c */
extern void queue_log_event(const char *queue_name, char audit, int64 item_id,
							const char *kind, const char *worker,
							int32 attempt, const char *details_json);
extern bool queue_audit_keeps(char audit, const char *kind);

/* notify.c */
extern int	queue_notify_handoff;
extern void queue_notify_init(void);
extern void queue_notify_on_commit(const char *queue_name);

#endif							/* QUEUE_H */
