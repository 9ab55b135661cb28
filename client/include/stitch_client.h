/*
 * The C ABI of the stitchd client, for jobs that cannot link C++ (Python ctypes, other
 * runtimes). It wraps stitch::client::Client and keeps its semantics:
 *
 *  - Fail-open: compile and lookup calls never block past their deadline and never abort;
 *    when the daemon is absent, slow, overloaded or refuses the input, the result's outcome
 *    is STITCH_FALLBACK with a reason, and the caller runs its framework's own kernels.
 *  - Bundles this process already received are served from an in-process cache
 *    (STITCH_HIT_LOCAL) without contacting the daemon.
 *  - gRPC cannot be used safely after fork(): in a process forked from one that has used
 *    the client, results come from the inherited in-process cache (STITCH_HIT_LOCAL) or
 *    are fallbacks whose reason starts with "UNAVAILABLE: this process was forked". A
 *    process forked before the first use is unaffected.
 *
 * Ownership: every object returned by a *_create or compile/lookup function belongs to the
 * caller and is released with the matching *_destroy / *_free function. Pointers returned
 * by stitch_result_* accessors point into the result and stay valid until
 * stitch_result_free; do not free them. Strings an admin call stores through a `char**`
 * belong to the caller, who releases them with stitch_free. Strings are NUL-terminated UTF-8.
 *
 * NULL arguments never crash: compile/lookup functions answer a fallback result, other
 * functions return the documented error value.
 *
 * Thread-safety: a stitch_client may be used from many threads at once. A stitch_result
 * may be read from many threads at once; free it once, after the last read.
 */
#ifndef STITCH_CLIENT_H_
#define STITCH_CLIENT_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct stitch_client stitch_client;
typedef struct stitch_result stitch_result;
typedef struct stitch_extraction stitch_extraction;

/* Where a result's bundle came from. The values are stable (ctypes code may use them). */
typedef enum stitch_outcome {
  STITCH_HIT_LOCAL = 0,  /* this process already had the bundle */
  STITCH_HIT_MEMORY = 1, /* the daemon's memory tier */
  STITCH_HIT_DISK = 2,   /* the daemon's on-disk cache */
  STITCH_COMPILED = 3,   /* compiled for this request */
  STITCH_FALLBACK = 4,   /* no bundle: run the framework's kernels (see the reason) */
  STITCH_HIT_CLUSTER = 5 /* the cluster tier: another node compiled it */
} stitch_outcome;

/* Whose kernels a measured time is for. The values are stable. */
typedef enum stitch_timed_kernels {
  STITCH_TIMED_STITCHED = 0, /* the bundle's kernels */
  STITCH_TIMED_FALLBACK = 1  /* the job's own kernels for the same subgraph */
} stitch_timed_kernels;

/*
 * Returns a client for the daemon at `address`: "unix:///run/stitchd/stitchd.sock", a
 * socket path starting with '/', or "host:port". NULL or "" selects
 * unix:///run/stitchd/stitchd.sock. A deadline <= 0 selects the default (lookup 50 ms,
 * compile 10000 ms). No connection is made until the first call.
 * Returns NULL only when memory runs out. Release with stitch_client_destroy.
 */
stitch_client* stitch_client_create(const char* address, int lookup_deadline_ms,
                                    int compile_deadline_ms);

/*
 * Like stitch_client_create, for a daemon whose TCP port serves TLS. `ca_file` (PEM)
 * verifies the daemon's certificate (NULL or "": the system's roots); `cert_file` and
 * `key_file` (PEM, both or neither) are this client's certificate for a daemon that
 * requires one (mutual TLS). Unix socket addresses ignore the files. The files are read
 * here; one that cannot be read makes every call a fallback whose reason starts with
 * "FAILED_PRECONDITION" and names it.
 * Returns NULL only when memory runs out. Release with stitch_client_destroy.
 */
stitch_client* stitch_client_create_tls(const char* address, int lookup_deadline_ms,
                                        int compile_deadline_ms, const char* ca_file,
                                        const char* cert_file, const char* key_file);

/*
 * Releases `client` (NULL is ignored). Waits for its in-flight calls, each bounded by its
 * deadline. Results obtained from it stay valid.
 */
void stitch_client_destroy(stitch_client* client);

/*
 * Returns the bundle for one HLO module (`len` bytes of text at `hlo_text`, not necessarily
 * NUL-terminated), compiling it on a miss, within the compile deadline. `target` ("sm_80",
 * "sm_90") may be NULL for the daemon's target.
 * Returns a result the caller frees with stitch_result_free; NULL only when memory runs
 * out. Failures of any kind are a result with outcome STITCH_FALLBACK.
 */
stitch_result* stitch_client_compile_hlo(stitch_client* client, const char* hlo_text, size_t len,
                                         const char* target);

/*
 * Like stitch_client_compile_hlo for a serialized stitch.v1.Graph (`len` bytes at
 * `graph_pb`). Bytes that do not parse as a Graph give a fallback result whose reason
 * starts with "INVALID_ARGUMENT".
 */
stitch_result* stitch_client_compile_graph(stitch_client* client, const void* graph_pb, size_t len,
                                           const char* target);

/*
 * Like the compile functions, but never compiles: answers only from the in-process cache
 * or the daemon's caches, within the lookup deadline. A miss is a fallback with a reason
 * starting with "NOT_FOUND".
 */
stitch_result* stitch_client_lookup_hlo(stitch_client* client, const char* hlo_text, size_t len,
                                        const char* target);
stitch_result* stitch_client_lookup_graph(stitch_client* client, const void* graph_pb, size_t len,
                                          const char* target);

/*
 * Like stitch_client_compile_hlo and stitch_client_lookup_hlo for a module whose outer
 * dimension varies from run to run (a batch, or batch x sequence folded into rows):
 * `outer_parameters` holds `count` parameter numbers of the entry computation whose
 * dimension 0 is that extent (CompileRequest.outer_parameters). The daemon then answers the
 * bundle of the extent's power-of-two bucket, which every extent of the bucket shares
 * (stitch_result_outer_extent says which extents it serves), or an exact bundle when the
 * module cannot follow the extent. `count` 0 is stitch_client_compile_hlo /
 * stitch_client_lookup_hlo. NULL `outer_parameters` with `count` > 0 and negative numbers
 * give a fallback result whose reason starts with "INVALID_ARGUMENT", without contacting the
 * daemon; numbers past the module's parameters, repeated, or of a parameter without a
 * dimension 0 are the daemon's INVALID_ARGUMENT fallback, naming the number.
 */
stitch_result* stitch_client_compile_hlo_generic(stitch_client* client, const char* hlo_text,
                                                 size_t len, const char* target,
                                                 const int64_t* outer_parameters, size_t count);
stitch_result* stitch_client_lookup_hlo_generic(stitch_client* client, const char* hlo_text,
                                                size_t len, const char* target,
                                                const int64_t* outer_parameters, size_t count);

/* Returns the result's outcome; STITCH_FALLBACK for NULL. */
stitch_outcome stitch_result_outcome(const stitch_result* result);

/* Returns the daemon's cache key (64 hex digits), or "" when unknown or `result` is NULL. */
const char* stitch_result_key(const stitch_result* result);

/*
 * Returns why the result is a fallback, as "<gRPC code name>: <message>" (e.g.
 * "DEADLINE_EXCEEDED: Deadline Exceeded"); "" for a result with a bundle; a static
 * "INVALID_ARGUMENT: ..." string for NULL.
 */
const char* stitch_result_reason(const stitch_result* result);

/*
 * Returns the serialized stitch.v1.KernelBundle and stores its size in `*len` (when `len`
 * is not NULL). Returns NULL, with *len = 0, for a fallback or a NULL result.
 */
const void* stitch_result_bundle(const stitch_result* result, size_t* len);

/*
 * Returns what jobs measured for the result's key, as the daemon held it when it answered: a
 * stitch.v1.KernelRuntimes as JSON (the form stitch_client_list_runtimes gives each record).
 * Returns "" when the daemon held no timings for the key, for a fallback, for an in-process
 * cache hit, for a NULL result, and when memory runs out.
 */
const char* stitch_result_runtimes_json(const stitch_result* result);

/*
 * Returns 1 when the result's bundle is shape-generic, storing the least and greatest outer
 * extent it serves in `*lo` and `*hi` (each when not NULL): its kernels run at any extent
 * lo <= e <= hi. Returns 0, storing nothing, for a bundle of exact shapes, a fallback and a
 * NULL result.
 */
int stitch_result_outer_extent(const stitch_result* result, int64_t* lo, int64_t* hi);

/* Returns the number of kernels in the bundle; 0 for a fallback or a NULL result. */
size_t stitch_result_kernel_count(const stitch_result* result);

/* Returns kernel `index`'s entry-point name, or NULL when `index` is out of range. */
const char* stitch_result_kernel_name(const stitch_result* result, size_t index);

/* Returns kernel `index`'s PTX text, or NULL when `index` is out of range. */
const char* stitch_result_kernel_ptx(const stitch_result* result, size_t index);

/*
 * Returns kernel `index`'s cubin and stores its size in `*len` (when `len` is not NULL).
 * Returns NULL, with *len = 0, when `index` is out of range or the bundle has no cubin
 * (PTX-only mode).
 */
const void* stitch_result_kernel_cubin(const stitch_result* result, size_t index, size_t* len);

/* Releases `result` and everything its accessors returned (NULL is ignored). */
void stitch_result_free(stitch_result* result);

/*
 * Adds `invocations` launches of the bundle `key` to the pending usage batch.
 * Returns 0, or -1 when `client` or `key` is NULL.
 */
int stitch_client_record_invocations(stitch_client* client, const char* key, uint64_t invocations);

/*
 * Adds measured GPU time to the pending usage batch: `seconds` summed over `samples`
 * invocations of the subgraph `key`, for the bundle's kernels or the job's fallback. The
 * daemon prices the key's savings from measured times once both sides have some.
 * Returns 0, or -1 when `client` or `key` is NULL or empty, `kernels` is not one of the
 * enum's values, `samples` is 0, or `seconds` is negative or not finite.
 */
int stitch_client_record_time(stitch_client* client, const char* key, stitch_timed_kernels kernels,
                              double seconds, uint64_t samples);

/*
 * Returns 1 on one call in 100 (a job calls it once per step, and on 1 runs and times its
 * fallback kernels too), 0 otherwise, and 0 when `client` is NULL.
 */
int stitch_client_should_time_fallback(stitch_client* client);

/*
 * Says what the job runs where stitchd's kernels are not used: "xla", "inductor", "eager"
 * (no compiler), or NULL or "" for not said. The daemon prices the savings of later usage
 * reports against that model. Returns 0, or -1 when `client` is NULL or `fallback` is
 * another name.
 */
int stitch_client_set_fallback(stitch_client* client, const char* fallback);

/*
 * Sends the pending usage batch to the daemon, within 2000 ms.
 * Returns 0 on success (also when nothing was pending), 1 when the daemon could not be
 * reached or refused the batch (the batch is kept for the next flush), -1 when `client`
 * is NULL.
 */
int stitch_client_flush_usage(stitch_client* client);

/*
 * The admin calls below (what `stitchctl stats`, `cache ls`, `cache get` and `runtimes` ask)
 * wait at most 2000 ms for the daemon. Those that answer JSON store in `*json` a
 * NUL-terminated JSON object allocated for the caller, who releases it with stitch_free. Its
 * names and nesting are the response message's fields as named in the .proto files
 * (proto/stitch/v1/), every field present, defaults included; 64-bit integers are JSON
 * numbers, enums their value names, maps JSON objects, bytes base64 text.
 */

/* Releases a string the functions below stored in a `char**` (NULL is ignored). */
void stitch_free(void* p);

/*
 * The daemon's counters and cache occupancy: a stitch.v1.StatsResponse as JSON, e.g.
 * {"compiles": 3, "entries": 3, "hits_memory": 1, "invocations_reported": 700, ...}.
 * Returns 0 and stores the JSON in `*json`; 1 when the daemon could not be reached or refused
 * the call, storing in `*json` the reason as plain text, "<code name>: <message>" (e.g.
 * "UNAVAILABLE: Stats at unix:///run/stitchd/stitchd.sock: ..."); -1 when `client` or `json`
 * is NULL or memory runs out, with `*json` set to NULL (when `json` is not NULL).
 */
int stitch_client_stats(stitch_client* client, char** json);

/*
 * The daemon's cached entries, most recently used first, at most `limit` of them (0: 100): a
 * stitch.v1.ListEntriesResponse as JSON, {"entries": [{"key": ..., "target": ...,
 * "kernels": ..., "bytes": ..., "compile_seconds": ..., "plan": ...}, ...]}.
 * Returns as stitch_client_stats does.
 */
int stitch_client_list_entries(stitch_client* client, uint32_t limit, char** json);

/*
 * The measured runtimes the daemon holds, most reported invocations first, at most `limit`
 * keys (0: 100): a stitch.v1.ListRuntimesResponse as JSON, {"runtimes": [{"key": ...,
 * "target": ..., "stitched": {"samples": ..., "seconds_sum": ..., ...}, "fallback":
 * {"xla": {...}}, "modeled_stitched_seconds": ..., ...}, ...]}.
 * Returns as stitch_client_stats does.
 */
int stitch_client_list_runtimes(stitch_client* client, uint32_t limit, char** json);

/*
 * Returns the daemon's cached bundle for `key` (64 hex digits) as a result, read with the
 * stitch_result_* accessors and freed with stitch_result_free; never compiles and never uses
 * the in-process cache. Its outcome is where the daemon found it (STITCH_HIT_MEMORY,
 * STITCH_HIT_DISK, STITCH_HIT_CLUSTER), or STITCH_FALLBACK with the reason: "NOT_FOUND: ..."
 * for a key the daemon does not hold, "INVALID_ARGUMENT: ..." for a NULL `client` or `key`.
 * Returns NULL only when memory runs out.
 */
stitch_result* stitch_client_get_entry(stitch_client* client, const char* key);

/*
 * Extraction: the daemon splits HLO text into its memory-intensive subgraphs, the signatures
 * a job then passes to stitch_client_compile_graph / stitch_client_lookup_graph. Unlike
 * compile and lookup this is not fail-open (there is nothing to fall back to): a failure is
 * an extraction with no graphs and a non-empty error.
 *
 * Returns the subgraphs of `len` bytes of HLO text at `hlo_text` (one or more modules, not
 * necessarily NUL-terminated), waiting at most the compile deadline, as an extraction the
 * caller frees with stitch_extraction_free; NULL only when memory runs out.
 */
stitch_extraction* stitch_client_extract_hlo(stitch_client* client, const char* hlo_text,
                                             size_t len);

/*
 * Like stitch_client_extract_hlo for a job whose batch size (or batch x sequence folded into
 * rows) varies: each graph names as outer parameters those whose dimension 0 is
 * `outer_extent`, so the daemon compiles one bundle per bucket of it (0: fixed shapes, as
 * stitch_client_extract_hlo; negative: an extraction failing with INVALID_ARGUMENT).
 */
stitch_extraction* stitch_client_extract_hlo_at_extent(stitch_client* client, const char* hlo_text,
                                                       size_t len, int64_t outer_extent);

/*
 * Returns "" when the extraction succeeded (possibly with zero graphs), else why it failed as
 * "<gRPC code name>: <message>": "INVALID_ARGUMENT: ..." naming the line for text that is not
 * HLO or for NULL or empty arguments, "RESOURCE_EXHAUSTED: ..." for a subgraph past the
 * daemon's limits, "UNAVAILABLE: ..." or "DEADLINE_EXCEEDED: ..." when the daemon did not
 * answer. A static "INVALID_ARGUMENT: ..." string for a NULL `extraction`.
 */
const char* stitch_extraction_error(const stitch_extraction* extraction);

/* Returns the number of subgraphs, in extraction order; 0 on failure or for NULL. */
size_t stitch_extraction_count(const stitch_extraction* extraction);

/*
 * Returns subgraph `index`'s name, "<module>.sg<k>", or NULL when `index` is out of range.
 */
const char* stitch_extraction_name(const stitch_extraction* extraction, size_t index);

/*
 * Returns subgraph `index` as a serialized stitch.v1.Graph (the bytes
 * stitch_client_compile_graph takes) and stores its size in `*len` (when `len` is not NULL).
 * Returns NULL, with *len = 0, when `index` is out of range.
 */
const void* stitch_extraction_graph(const stitch_extraction* extraction, size_t index, size_t* len);

/*
 * Return subgraph `index`'s number of nodes (parameters and constants included), of
 * parameters, and of outputs; 0 when `index` is out of range.
 */
size_t stitch_extraction_node_count(const stitch_extraction* extraction, size_t index);
size_t stitch_extraction_parameter_count(const stitch_extraction* extraction, size_t index);
size_t stitch_extraction_output_count(const stitch_extraction* extraction, size_t index);

/* Releases `extraction` and everything its accessors returned (NULL is ignored). */
void stitch_extraction_free(stitch_extraction* extraction);

/*
 * Returns "hit_local", "hit_memory", "hit_disk", "hit_cluster", "compiled" or "fallback";
 * "fallback" for a
 * value outside the enum. The string is static.
 */
const char* stitch_outcome_name(stitch_outcome outcome);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* STITCH_CLIENT_H_ */
