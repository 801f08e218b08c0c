/* winnow: fused score + select GPU kernels, generated at run time.
 *
 * The one public header. It compiles as C99 and as C++. Lifecycle:
 *   winnowCreate -> winnowPlanCreate (validate) -> winnowPlanBuild (compile or load)
 *   -> winnowPlanGetWorkspaceSize -> winnowExecute (many times) -> winnowPlanDestroy
 *   -> winnowDestroy.
 * Every call returns a status; 0 is success. winnowGetStatusString gives static text,
 * winnowGetLastError the calling thread's detail message for its last failed call.
 * winnowExecute never allocates, never synchronises and never compiles: it can be
 * captured in a CUDA graph. */
#ifndef WINNOW_H_
#define WINNOW_H_

#include <stddef.h>
#include <stdint.h>
#include <cuda.h> /* CUstream */

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header; the top-level CMakeLists.txt checks that it is project()'s.
 * winnowGetVersion() gives the library's: a program can compare the two at run time. */
#define WINNOW_VERSION_MAJOR 0
#define WINNOW_VERSION_MINOR 1
#define WINNOW_VERSION_PATCH 0
#define WINNOW_VERSION_CODE \
  (WINNOW_VERSION_MAJOR * 10000 + WINNOW_VERSION_MINOR * 100 + WINNOW_VERSION_PATCH)

/* Marks the C API: libwinnow.so is built with hidden visibility and exports these only. */
#if defined(__GNUC__) || defined(__clang__)
#define WINNOW_API __attribute__((visibility("default")))
#else
#define WINNOW_API
#endif

typedef enum winnowStatus_t {
  WINNOW_STATUS_SUCCESS = 0,
  WINNOW_STATUS_INVALID_ARGUMENT = 1,  /* a descriptor, tensor or size is wrong */
  WINNOW_STATUS_NOT_SUPPORTED = 2,     /* valid, but this build or arch cannot do it */
  WINNOW_STATUS_COMPILE_ERROR = 3,     /* NVRTC rejected the generated source */
  WINNOW_STATUS_NO_DEVICE = 4,         /* no CUDA driver or device */
  WINNOW_STATUS_CUDA_ERROR = 5,        /* a CUDA driver call failed */
  WINNOW_STATUS_NOT_BUILT = 6,         /* winnowPlanBuild was not called (or failed) */
  WINNOW_STATUS_WORKSPACE_TOO_SMALL = 7,
  WINNOW_STATUS_INTERNAL_ERROR = 8     /* a bug in winnow: please report it */
} winnowStatus_t;

typedef enum winnowDataType_t {
  WINNOW_DTYPE_INVALID = 0,
  WINNOW_DTYPE_FLOAT32 = 1,
  WINNOW_DTYPE_FLOAT16 = 2,
  WINNOW_DTYPE_BFLOAT16 = 3,
  WINNOW_DTYPE_FP8_E4M3 = 4,
  WINNOW_DTYPE_INT32 = 5,
  WINNOW_DTYPE_UINT8 = 6 /* raw bytes: the paged decode key cache */
} winnowDataType_t;

/* A borrowed device tensor, DLPack-style. Strides are in elements. A tensor with
 * data == NULL and ndim == 0 is absent. */
#define WINNOW_MAX_DIMS 4
typedef struct winnowTensor_t {
  void* data;
  winnowDataType_t dtype;
  int32_t ndim;
  int64_t shape[WINNOW_MAX_DIMS];
  int64_t strides[WINNOW_MAX_DIMS];
  int32_t device; /* CUDA device ordinal the memory lives on */
} winnowTensor_t;

typedef enum winnowScore_t {
  WINNOW_SCORE_RELU_MH = 0, /* sum_h w[h] * relu(q[h] . k) [* kscale] */
  WINNOW_SCORE_IP = 1,      /* q . k */
  WINNOW_SCORE_L2 = 2,      /* -||q - k||^2 */
  WINNOW_SCORE_COSINE = 3,  /* q . k / (|q| |k|) */
  WINNOW_SCORE_EXPR = 4     /* the text in winnowProblemDesc_t.expression */
} winnowScore_t;

typedef enum winnowWindow_t {
  WINNOW_WINDOW_DENSE = 0,  /* every row sees keys [0, num_keys) */
  WINNOW_WINDOW_RANGES = 1, /* row r sees [start[r], end[r]) from int32 device arrays */
  WINNOW_WINDOW_CAUSAL = 2  /* row r at position p = causal_offset + r sees t < (p + 1) / m */
} winnowWindow_t;

typedef enum winnowMode_t {
  WINNOW_MODE_TOPK = 0,       /* fused score + exact top-k */
  WINNOW_MODE_MATERIALIZE = 1 /* write the fp32 score matrix [rows, num_keys] (baseline) */
} winnowMode_t;

/* Output flags. */
#define WINNOW_OUTPUT_SORTED 1u           /* rank order (best first); else ascending key index */
#define WINNOW_OUTPUT_ABSOLUTE_INDICES 2u /* key index, not offset from the window start */
/* WINNOW_SCORE_L2 only, top-k mode, not on a sharded plan: out_scores holds the squared
 * distance ||q - k||^2 (the score negated; padding +inf, NaN stays NaN). The selection and
 * its order are unchanged (nearest first when sorted). */
#define WINNOW_OUTPUT_DISTANCE 4u

/* Limits of a WINNOW_SCORE_EXPR expression, so that a caller's text costs bounded time
 * and memory to parse, generate and compile: its length in bytes (NUL not counted) and
 * its nodes (every constant, name, operator and function call counts one; sum_h/max_h
 * one). Above either, winnowPlanCreate returns WINNOW_STATUS_INVALID_ARGUMENT. Error
 * messages quote at most 64 characters of the text around the error. */
#define WINNOW_MAX_EXPRESSION_BYTES 4096
#define WINNOW_MAX_EXPRESSION_NODES 64

/* Limits of the plan's tuning fields below: above them winnowPlanCreate returns
 * WINNOW_STATUS_INVALID_ARGUMENT. */
#define WINNOW_MAX_CANDIDATE_CAPACITY 262144
#define WINNOW_MAX_SAMPLE_SIZE 65536
#define WINNOW_MAX_KEY_SPLITS 1024

#define WINNOW_PROBLEM_DESC_VERSION 1
typedef struct winnowProblemDesc_t {
  size_t struct_size; /* sizeof(winnowProblemDesc_t) */
  uint32_t version;   /* WINNOW_PROBLEM_DESC_VERSION */
  winnowScore_t score;
  const char* expression; /* for WINNOW_SCORE_EXPR, e.g. "max_h(dot(h))"; at most
                             WINNOW_MAX_EXPRESSION_BYTES long and
                             WINNOW_MAX_EXPRESSION_NODES nodes */
  int32_t heads;          /* H: query heads per row (1 for ip, l2, cosine) */
  int32_t head_dim;       /* d */
  winnowDataType_t q_dtype;
  winnowDataType_t k_dtype;
  int32_t key_scale; /* relu_mh: multiply by a per-key fp32 scale (fp8 keys) */
  winnowMode_t mode;
  int32_t k;         /* top-k, 1..8192 */
  uint32_t output_flags;
  winnowWindow_t window;
  int32_t causal_ratio;   /* m >= 1 for WINNOW_WINDOW_CAUSAL; ignored by other windows */
  int64_t causal_offset;  /* position of row 0 (>= 0) for WINNOW_WINDOW_CAUSAL; ignored
                             by other windows */
  const char* arch;       /* "sm_90a" (wgmma) or "sm_100a" (mma.sync), the targets winnow
                             supports; others (sm_90, sm_100f, sm_120a, ...) are
                             WINNOW_STATUS_NOT_SUPPORTED. NULL: the context's device */
  int32_t candidate_capacity; /* per row, 0..WINNOW_MAX_CANDIDATE_CAPACITY; 0: default
                                 (4k, at least 4096) */
  int32_t sample_size;        /* keys scored first for the initial threshold,
                                 -1..WINNOW_MAX_SAMPLE_SIZE; -1: default (max(2048, k)),
                                 0: none */
  /* Parts each row's window is cut into (scored by different CTAs, merged exactly),
   * 0..WINNOW_MAX_KEY_SPLITS. 0: chosen per call (to fill the GPU when rows are few),
   * 1: never split; at most as many as the device runs CTAs for the call's rows. */
  int32_t key_splits;
  /* An upper bound on the workspace in bytes (0: none): the plan keeps fewer CTAs resident
   * to stay under it, and winnowPlanBuild fails if one CTA does not fit. */
  uint64_t max_workspace_bytes;
} winnowProblemDesc_t;

/* Fills d with the defaults above for a relu_mh problem; callers then change fields. */
WINNOW_API void winnowProblemDescInit(winnowProblemDesc_t* d);

/* Input roles: winnowExecute's inputs[] is indexed by these. */
typedef enum winnowInput_t {
  WINNOW_INPUT_Q = 0,            /* [rows, H, d] or [rows, d] */
  WINNOW_INPUT_K = 1,            /* [num_keys, d] */
  WINNOW_INPUT_WEIGHTS = 2,      /* [rows, H] fp32: w[h] */
  WINNOW_INPUT_KEY_SCALE = 3,    /* [num_keys] fp32: kscale */
  WINNOW_INPUT_WINDOW_START = 4, /* [rows] int32, for WINNOW_WINDOW_RANGES */
  WINNOW_INPUT_WINDOW_END = 5,   /* [rows] int32 */
  /* Optional [n] int32 candidate keys scored first as each row's sample (e.g. the previous
   * chunk's selection of its last row, ascending as unsorted outputs are), n at most
   * min(candidate capacity, 2 k rounded up to a power of two). Results stay exact whatever
   * it holds: entries outside a row's
   * window, negative, >= num_keys or not above every earlier entry are ignored. Callers
   * built before this slot pass n_inputs = 6 and are served as before. */
  WINNOW_INPUT_SAMPLE_HINT = 6,
  /* Optional [num_keys] fp32: |k|^2 of each key (its squared L2 norm), for scores that read
   * ksq (l2, cosine, an expression with ksq). Given, the kernel reads it instead of summing
   * the squares of every key as it streams them (4 bytes a key more to read, far less than
   * the sums cost l2 against ip); the values are used as given. Absent: the kernel sums
   * them. Callers built before this slot pass n_inputs = 7 and are served as before. */
  WINNOW_INPUT_KEY_NORMS = 7,
  WINNOW_NUM_INPUTS = 8
} winnowInput_t;

typedef struct winnowContext* winnowContext_t;
typedef struct winnowPlan* winnowPlan_t;

/* The library's WINNOW_VERSION_CODE (major * 10000 + minor * 100 + patch). */
WINNOW_API uint32_t winnowGetVersion(void);
WINNOW_API const char* winnowGetStatusString(winnowStatus_t status);
WINNOW_API const char* winnowGetLastError(void);

/* Uses the device's primary context, so it shares memory with PyTorch and others. With
 * no GPU (or no driver) the context still compiles for an explicit arch. */
WINNOW_API winnowStatus_t winnowCreate(winnowContext_t* ctx, int device_ordinal);
/* Options of winnowCreateWithOptions. */
#define WINNOW_CONTEXT_OPTIONS_VERSION 1
typedef struct winnowContextOptions_t {
  size_t struct_size; /* sizeof(winnowContextOptions_t) */
  uint32_t version;   /* WINNOW_CONTEXT_OPTIONS_VERSION */
  /* What compiles the context's kernels: "nvrtc" or "llvm" (clang 19 + LLVM's NVPTX target
   * + nvJitLink, sm_90a only, from libwinnow_llvm.so); NULL: $WINNOW_BACKEND, else "nvrtc".
   * Another name is WINNOW_STATUS_INVALID_ARGUMENT; "llvm" in a build without it is
   * WINNOW_STATUS_NOT_SUPPORTED. libwinnow_llvm.so is loaded at the first compile (a cache
   * miss): where it or LLVM's libraries cannot be loaded, that build fails with
   * WINNOW_STATUS_COMPILE_ERROR saying why, and cubins already in the disk cache still load. */
  const char* backend;
} winnowContextOptions_t;

/* Fills o with the defaults: backend NULL. */
WINNOW_API void winnowContextOptionsInit(winnowContextOptions_t* o);
/* winnowCreate with options (NULL: the defaults, the same as winnowCreate). */
WINNOW_API winnowStatus_t winnowCreateWithOptions(winnowContext_t* ctx, int device_ordinal,
                                                  const winnowContextOptions_t* options);
/* The backend of a context as "<name> <exact version>", e.g. "nvrtc 13.0"; NULL for a NULL
 * context. Valid as long as the context. */
WINNOW_API const char* winnowContextBackend(winnowContext_t ctx);
/* Plans borrow their context: destroy every plan of a context before the context. */
WINNOW_API winnowStatus_t winnowDestroy(winnowContext_t ctx);

WINNOW_API winnowStatus_t winnowPlanCreate(winnowContext_t ctx, const winnowProblemDesc_t* desc,
                                           winnowPlan_t* plan);
/* Compiles (or loads from the cache) the kernel. Without a device it compiles only. */
WINNOW_API winnowStatus_t winnowPlanBuild(winnowPlan_t plan);
/* Confirms that the plan is built: winnowPlanBuild returns only once the kernel is compiled
 * (or loaded), so this call has nothing to wait for. Kept for callers written against an
 * earlier two-tier build (docs/decisions/0041-remove-fast-first-build.md).
 * SUCCESS after winnowPlanBuild; WINNOW_STATUS_NOT_BUILT before it. */
WINNOW_API winnowStatus_t winnowPlanFinishBuild(winnowPlan_t plan);
WINNOW_API winnowStatus_t winnowPlanGetWorkspaceSize(winnowPlan_t plan, size_t* bytes);

/* ---- Tuned plans ----
 * A plan's tiling comes from built-in heuristics or from the tuning database (tuned plans
 * measured on this GPU, kept beside the kernel cache; `winnow tune` fills and lists it).
 * The policy is a build option, not a winnowProblemDesc_t field, so that descriptors of
 * earlier callers keep their size. Execute never tunes and never reads the database. */
typedef enum winnowTuningPolicy_t {
  WINNOW_TUNING_HEURISTIC = 0,        /* the heuristics; the database is not read */
  WINNOW_TUNING_TUNED_IF_PRESENT = 1, /* the database's plan for the shape, else the
                                         heuristics (the default) */
  WINNOW_TUNING_TUNE_ON_MISS = 2      /* as TUNED_IF_PRESENT; on a miss, tune inside
                                         winnowPlanBuildEx (needs a GPU: else
                                         WINNOW_STATUS_NO_DEVICE) within tune_budget_s,
                                         and store the winner */
} winnowTuningPolicy_t;

#define WINNOW_BUILD_OPTIONS_VERSION 1
typedef struct winnowBuildOptions_t {
  size_t struct_size; /* sizeof(winnowBuildOptions_t) */
  uint32_t version;   /* WINNOW_BUILD_OPTIONS_VERSION */
  winnowTuningPolicy_t tuning_policy;
  /* The call shape the plan mostly serves, which selects the tuned plan: rows per call and
   * num_keys (K's rows; causal windows: the last `rows` positions of num_keys x
   * causal_ratio). Sizes share a tuned plan by bucket: rows and num_keys rounded up to a
   * power of two (num_keys at least 1024), k likewise. 0 and 0: no shape, so the
   * heuristic plan (TUNE_ON_MISS needs both). */
  int64_t rows;
  int64_t num_keys;
  double tune_budget_s; /* TUNE_ON_MISS: wall-clock seconds for the tuning, > 0 */
} winnowBuildOptions_t;

/* Fills o with the defaults: TUNED_IF_PRESENT, no shape, tune_budget_s 60. */
WINNOW_API void winnowBuildOptionsInit(winnowBuildOptions_t* o);
/* winnowPlanBuild with options (NULL: the defaults, the same as winnowPlanBuild). */
WINNOW_API winnowStatus_t winnowPlanBuildEx(winnowPlan_t plan, const winnowBuildOptions_t* options);

#define WINNOW_PLAN_TUNING_VERSION 1
typedef struct winnowPlanTuning_t {
  size_t struct_size; /* sizeof(winnowPlanTuning_t): set by the caller */
  uint32_t version;   /* WINNOW_PLAN_TUNING_VERSION: set by the caller */
  /* The policy whose rule produced the plan: HEURISTIC (the heuristics, also when the
   * database had no plan), TUNED_IF_PRESENT (read from the database) or TUNE_ON_MISS
   * (tuned by this build). */
  winnowTuningPolicy_t produced_by;
  double expected_us; /* the tuned plan's measured median in microseconds; -1: none */
} winnowPlanTuning_t;

/* Where the built plan came from. */
WINNOW_API winnowStatus_t winnowPlanGetTuning(winnowPlan_t plan, winnowPlanTuning_t* tuning);

/* Byte offset in the workspace of two uint32 counters written by the last execute:
 * [0] rows (row parts, with key splits) that took the exact fallback path: the candidate
 *     buffer overflowed, or the sampled threshold kept fewer than k keys;
 * [1] rows whose window is malformed: start < 0, end > num_keys or start > end (their
 *     output is all -1). */
WINNOW_API winnowStatus_t winnowPlanGetCounterOffset(winnowPlan_t plan, size_t* offset);
/* The generated CUDA source of the plan (valid until the plan is destroyed). */
WINNOW_API winnowStatus_t winnowPlanGetSource(winnowPlan_t plan, const char** source);
WINNOW_API winnowStatus_t winnowPlanDestroy(winnowPlan_t plan);

/* out_indices: int32 [rows, k] (mode TOPK). out_scores: fp32 [rows, k] for TOPK
 * (optional, may be NULL) or [rows, num_keys] for MATERIALIZE. The workspace must be
 * at least winnowPlanGetWorkspaceSize bytes and 256-byte aligned. */
WINNOW_API winnowStatus_t winnowExecute(winnowPlan_t plan, const winnowTensor_t* inputs,
                                        int n_inputs, const winnowTensor_t* out_indices,
                                        const winnowTensor_t* out_scores,
                                        void* workspace, size_t workspace_bytes, CUstream stream);

/* Per-call options of winnowExecuteEx, for one plan serving many calls, e.g. the chunks of
 * a chunked prefill: each chunk's rows start at a different position of the sequence. */
#define WINNOW_CALL_OPTIONS_VERSION 1
typedef struct winnowCallOptions_t {
  size_t struct_size; /* sizeof(winnowCallOptions_t) */
  uint32_t version;   /* WINNOW_CALL_OPTIONS_VERSION */
  /* Position of row 0 for this call (WINNOW_WINDOW_CAUSAL plans only); -1: the plan's
   * desc.causal_offset. The same window rules apply: the last row's window must end at or
   * before num_keys. */
  int64_t causal_offset;
  /* 1: add this call's fallback / bad-window counts to the counters in the workspace
   * (the caller zeroed them before the first call); 0: the call resets them. */
  int32_t accumulate_counters;
} winnowCallOptions_t;

/* Fills o with the defaults: causal_offset -1, accumulate_counters 0. */
WINNOW_API void winnowCallOptionsInit(winnowCallOptions_t* o);
/* winnowExecute with per-call options (NULL: the defaults, the same as winnowExecute). */
WINNOW_API winnowStatus_t winnowExecuteEx(winnowPlan_t plan, const winnowTensor_t* inputs,
                                          int n_inputs,
                                          const winnowTensor_t* out_indices,
                                          const winnowTensor_t* out_scores, void* workspace,
                                          size_t workspace_bytes, CUstream stream,
                                          const winnowCallOptions_t* options);

/* Options of winnowExecuteStream: a long sequence (a chunked causal prefill up to S = 1M
 * positions) in one call, its rows in chunks, one launch each. */
#define WINNOW_STREAM_OPTIONS_VERSION 1
typedef struct winnowStreamOptions_t {
  size_t struct_size; /* sizeof(winnowStreamOptions_t) */
  uint32_t version;   /* WINNOW_STREAM_OPTIONS_VERSION */
  /* Rows per launch (the last chunk holds the rest); 0: chosen, 64 waves of the persistent
   * grid, so the idle tail of a launch costs about 1 %. */
  int64_t chunk_rows;
  /* 1: each chunk's sample hint is the previous chunk's selection of its last row (on the
   * device already; no copy); 0: none. The first chunk takes inputs[SAMPLE_HINT], if any. */
  int32_t sample_hint;
} winnowStreamOptions_t;

/* Fills o with the defaults: chunk_rows 0, sample_hint 1. */
WINNOW_API void winnowStreamOptionsInit(winnowStreamOptions_t* o);
/* The plan (top-k mode) over the whole sequence's tensors, as winnowExecute takes them, in
 * chunks of rows: chunk c's rows start at desc.causal_offset + its first row, and its
 * launch reuses the plan's workspace (winnowPlanGetWorkspaceSize bytes, whatever the row
 * count). The counters sum over the chunks. The results equal one winnowExecute over all
 * rows bit for bit. Checks every argument before the first launch; never allocates,
 * synchronises or compiles, so the chunks' launches can be captured in a CUDA graph.
 * options NULL: the defaults. */
WINNOW_API winnowStatus_t winnowExecuteStream(winnowPlan_t plan, const winnowTensor_t* inputs,
                                              int n_inputs, const winnowTensor_t* out_indices,
                                              const winnowTensor_t* out_scores, void* workspace,
                                              size_t workspace_bytes, CUstream stream,
                                              const winnowStreamOptions_t* options);

/* ---- Block-sparse prefill (FlashPrefill-style block selection + attention) ----
 * Semantics: ops/block/block_problem.h. q [L, heads, d], k and v [L, kv_heads, d], bf16,
 * contiguous, L a multiple of 128. winnowBlockSelect writes a CSR index: offsets int32
 * [heads * L/128 + 1] (row h * L/128 + I) and indices int32 (at least
 * winnowBlockIndexCapacity entries), each row's kept key blocks ascending; the density is
 * offsets[last] / capacity. winnowBlockAttention runs causal attention over those blocks
 * only and writes out bf16 [L, heads, d]. Neither allocates, synchronises or compiles. */
#define WINNOW_BLOCK_DESC_VERSION 1
typedef struct winnowBlockDesc_t {
  size_t struct_size; /* sizeof(winnowBlockDesc_t) */
  uint32_t version;   /* WINNOW_BLOCK_DESC_VERSION */
  int32_t heads;      /* query heads (32) */
  int32_t kv_heads;   /* KV heads (8); heads % kv_heads == 0 */
  int32_t head_dim;   /* 64 or 128 */
  int64_t max_seq_len; /* the longest L the plan takes (262144): a multiple of 128 whose
                          index, heads * nb (nb + 1) / 2 entries for nb = max_seq_len / 128,
                          fits int32 offsets (at most 2^31 - 1) */
  const char* arch;    /* "sm_90a" or "sm_100a"; NULL: the context's device */
} winnowBlockDesc_t;

/* The select rule of one call: keep key block J of query block I when its score is at
 * least alpha * the row's best, or J < sink_blocks, or J > I - local_blocks, or I is one
 * of the last last_blocks query blocks; then fill up to min_blocks best-first. */
typedef struct winnowBlockRule_t {
  float alpha;          /* [0, 1]; 0.1 */
  int32_t sink_blocks;  /* 1 */
  int32_t local_blocks; /* >= 1 (the diagonal); 2 */
  int32_t last_blocks;  /* 0 */
  int32_t min_blocks;   /* 4 */
} winnowBlockRule_t;

WINNOW_API void winnowBlockDescInit(winnowBlockDesc_t* d);
WINNOW_API void winnowBlockRuleInit(winnowBlockRule_t* r);

typedef struct winnowBlockPlan* winnowBlockPlan_t;
WINNOW_API winnowStatus_t winnowBlockPlanCreate(winnowContext_t ctx, const winnowBlockDesc_t* desc,
                                                winnowBlockPlan_t* plan);
WINNOW_API winnowStatus_t winnowBlockPlanBuild(winnowBlockPlan_t plan);
/* Sizes for one sequence length, which must be one the plan takes, as at execute: a
 * positive multiple of 128 (else WINNOW_STATUS_NOT_SUPPORTED) up to desc.max_seq_len (else
 * WINNOW_STATUS_INVALID_ARGUMENT). */
WINNOW_API winnowStatus_t winnowBlockPlanGetWorkspaceSize(winnowBlockPlan_t plan, int64_t seq_len,
                                                          size_t* bytes);
WINNOW_API winnowStatus_t winnowBlockIndexCapacity(winnowBlockPlan_t plan, int64_t seq_len,
                                                   int64_t* entries);
WINNOW_API winnowStatus_t winnowBlockPlanDestroy(winnowBlockPlan_t plan);
WINNOW_API winnowStatus_t winnowBlockSelect(winnowBlockPlan_t plan, const winnowTensor_t* q,
                                            const winnowTensor_t* k, const winnowBlockRule_t* rule,
                                            const winnowTensor_t* out_offsets,
                                            const winnowTensor_t* out_indices, void* workspace,
                                            size_t workspace_bytes, CUstream stream);
WINNOW_API winnowStatus_t winnowBlockAttention(winnowBlockPlan_t plan, const winnowTensor_t* q,
                                               const winnowTensor_t* k, const winnowTensor_t* v,
                                               const winnowTensor_t* offsets,
                                               const winnowTensor_t* indices,
                                               const winnowTensor_t* out, CUstream stream);

/* ---- Paged decode (the indexer top-k over the engines' paged fp8 key cache) ----
 * Semantics: ops/paged/paged_topk.h and templates/paged/paged_cache.cuh. Per call: q fp8 e4m3
 * [B, next_n, heads, 128] (B <= max_batch), cache uint8 [num_blocks, 64, 1, 132] (per
 * block 64 x 128 fp8 key bytes, then 64 fp32 scales), block_table int32
 * [B, >= max_blocks_per_seq], context_lens int32 [B] (query j of request b sees positions
 * t < len - next_n + 1 + j) or [B, next_n] (query j sees t < lens[b][j]), weights fp32
 * [B * next_n, heads] when the score reads w. Output int32 [B * next_n, k]: token
 * positions, -1 padded. Lengths and block table are read on the device only: capture
 * once at max_batch and replay for any lengths. A request with a length above
 * max_blocks_per_seq * 64 or a block number outside the cache gets -1 rows, counted at
 * winnowPagedPlanGetCounterOffset + 4. */
#define WINNOW_PAGED_DESC_VERSION 1
typedef struct winnowPagedDesc_t {
  size_t struct_size;        /* sizeof(winnowPagedDesc_t) */
  uint32_t version;          /* WINNOW_PAGED_DESC_VERSION */
  winnowScore_t score;       /* WINNOW_SCORE_RELU_MH (with the key scale) or _EXPR */
  const char* expression;    /* WINNOW_SCORE_EXPR: the program text */
  int32_t heads;             /* 64 */
  int32_t k;                 /* 1..8192; 2048 */
  int32_t next_n;            /* 1..4 */
  int32_t max_batch;         /* requests per call at most */
  int32_t max_blocks_per_seq; /* the longest request / 64 */
  int64_t max_total_keys;    /* keys of one call's requests together; 0: max_batch *
                                max_blocks_per_seq * 64 (must then be below 2^31) */
  int32_t sorted;            /* nonzero: each row best first */
  int32_t key_splits;        /* 0: chosen per call; as winnowProblemDesc_t */
  const char* arch;          /* "sm_90a" or "sm_100a"; NULL: the context's device */
} winnowPagedDesc_t;

WINNOW_API void winnowPagedDescInit(winnowPagedDesc_t* d);
typedef struct winnowPagedPlan* winnowPagedPlan_t;
WINNOW_API winnowStatus_t winnowPagedPlanCreate(winnowContext_t ctx, const winnowPagedDesc_t* desc,
                                                winnowPagedPlan_t* plan);
WINNOW_API winnowStatus_t winnowPagedPlanBuild(winnowPagedPlan_t plan);
WINNOW_API winnowStatus_t winnowPagedPlanGetWorkspaceSize(winnowPagedPlan_t plan, size_t* bytes);
/* Two uint32 in the workspace after each call: fallback rows, bad requests' rows. */
WINNOW_API winnowStatus_t winnowPagedPlanGetCounterOffset(winnowPagedPlan_t plan, size_t* offset);
WINNOW_API winnowStatus_t winnowPagedPlanDestroy(winnowPagedPlan_t plan);
/* weights may be NULL when the score does not read w. */
WINNOW_API winnowStatus_t winnowPagedTopk(winnowPagedPlan_t plan, const winnowTensor_t* q,
                                          const winnowTensor_t* cache,
                                          const winnowTensor_t* block_table,
                                          const winnowTensor_t* context_lens,
                                          const winnowTensor_t* weights,
                                          const winnowTensor_t* out_indices, void* workspace,
                                          size_t workspace_bytes, CUstream stream);

/* Per-call options of winnowPagedTopkEx. */
#define WINNOW_PAGED_CALL_OPTIONS_VERSION 1
typedef struct winnowPagedCallOptions_t {
  size_t struct_size; /* sizeof(winnowPagedCallOptions_t) */
  uint32_t version;   /* WINNOW_PAGED_CALL_OPTIONS_VERSION */
  /* The previous step's selection, int32 [B * next_n, k] token positions, -1 padded: each
   * request's last output rows, e.g. the last call's out_indices (it may be this call's
   * out_indices itself). NULL: none. The stream path scores these keys with the new
   * queries first and filters from their k-th best, in place of its sample; a row whose
   * hint holds fewer than k distinct positions inside its window (-1, stale, duplicated,
   * past its length or its query's causal limit) has no bound and filters every key. The
   * answer is exact whatever the hint holds; read on the device only (graph safe). The
   * gathered path checks it and reads nothing of it. Its bound (the least hinted score) is
   * loose, and a hinted call measured slower than one without (docs/paged-decode.md). */
  const winnowTensor_t* hint;
} winnowPagedCallOptions_t;

/* Fills o with the defaults: no hint. */
WINNOW_API void winnowPagedCallOptionsInit(winnowPagedCallOptions_t* o);
/* winnowPagedTopk with per-call options (NULL: the defaults, the same as winnowPagedTopk). */
WINNOW_API winnowStatus_t winnowPagedTopkEx(winnowPagedPlan_t plan, const winnowTensor_t* q,
                                            const winnowTensor_t* cache,
                                            const winnowTensor_t* block_table,
                                            const winnowTensor_t* context_lens,
                                            const winnowTensor_t* weights,
                                            const winnowTensor_t* out_indices, void* workspace,
                                            size_t workspace_bytes, CUstream stream,
                                            const winnowPagedCallOptions_t* options);

/* ---- Sharded top-k (keys split across GPUs, merged exactly) ----
 * For corpora or contexts larger than one GPU: rank r of R holds the global keys
 * [key_offset_r, key_offset_r + n_r) of total_keys (disjoint shards covering the keys).
 * 1. Each rank's plan (mode TOPK) is told its shard with winnowPlanSetShard before
 *    winnowPlanBuild; the window arrays (RANGES) and causal positions are then global, and
 *    so are the outputs: absolute indices are global key numbers, relative ones count from
 *    the window's global start. Each rank runs winnowExecute with out_scores.
 * 2. winnowShardMerge (a caller's all-gather) or winnowShardMergeNccl (an ncclComm_t) on
 *    every rank merges the R lists of k per row into the top k over all keys: equal to one
 *    plan over all keys bit for bit (ties to the smaller global index, NaN first, -1 padding
 *    when a row's window holds fewer than k keys, the scores as the kernels computed them).
 * The merge never allocates, compiles or synchronises the host (its workspace is sized by
 * its plan); every rank must call it with the same rows, as collectives ask. */

/* Tells a top-k plan, before winnowPlanBuild, that its K holds the global keys
 * [key_offset, key_offset + K's rows) of total_keys (0 <= key_offset < total_keys < 2^31).
 * total_keys 0 (and key_offset 0) makes it unsharded again. At execute, K's rows must not
 * run past total_keys, and causal windows must end at or before total_keys. */
WINNOW_API winnowStatus_t winnowPlanSetShard(winnowPlan_t plan, int64_t key_offset,
                                             int64_t total_keys);

#define WINNOW_MERGE_DESC_VERSION 1
typedef struct winnowMergeDesc_t {
  size_t struct_size; /* sizeof(winnowMergeDesc_t) */
  uint32_t version;   /* WINNOW_MERGE_DESC_VERSION */
  int32_t ranks;      /* R, 1..1024: lists merged per row */
  int32_t k;          /* 1..8192: the top-k plans' k */
  int64_t max_rows;   /* rows per call at most (>= 1): sizes the workspace */
  int32_t sorted;     /* nonzero: rows best first; 0: ascending index (as WINNOW_OUTPUT_SORTED) */
  const char* arch;   /* "sm_90a" or "sm_100a"; NULL: the context's device */
} winnowMergeDesc_t;

/* Fills d with the defaults: ranks 2, k 2048, max_rows 0 (to be set), sorted 0, arch NULL. */
WINNOW_API void winnowMergeDescInit(winnowMergeDesc_t* d);
typedef struct winnowMergePlan* winnowMergePlan_t;
WINNOW_API winnowStatus_t winnowMergePlanCreate(winnowContext_t ctx, const winnowMergeDesc_t* desc,
                                                winnowMergePlan_t* plan);
WINNOW_API winnowStatus_t winnowMergePlanBuild(winnowMergePlan_t plan);
/* 256 + max_rows k 8 (ranks + 1) bytes; known without a GPU. */
WINNOW_API winnowStatus_t winnowMergePlanGetWorkspaceSize(winnowMergePlan_t plan, size_t* bytes);
/* Two uint32 in the workspace after each merge: [0] rows whose lists held one key twice
 * (the shards overlap: those rows are wrong), [1] entries with an index below -1 (dropped). */
WINNOW_API winnowStatus_t winnowMergePlanGetCounterOffset(winnowMergePlan_t plan, size_t* offset);
WINNOW_API winnowStatus_t winnowMergePlanDestroy(winnowMergePlan_t plan);

/* A caller's all-gather (an engine's own communicator): copies `bytes` from send (this
 * rank's candidates, in the workspace) to recv + r * bytes for every rank r (rank order),
 * enqueued on `stream` without waiting on the host. Returns 0 on success; anything else
 * fails the merge with WINNOW_STATUS_CUDA_ERROR. */
typedef int (*winnowAllGatherFn_t)(const void* send, void* recv, size_t bytes, CUstream stream,
                                   void* user);

/* local_indices int32 and local_scores fp32 [rows, k]: this rank's winnowExecute outputs;
 * out_indices int32 [rows, k], out_scores fp32 [rows, k] or NULL. all_gather NULL: loopback,
 * for one process holding every rank's lists: local_* are then [ranks, rows, k]. */
WINNOW_API winnowStatus_t winnowShardMerge(winnowMergePlan_t plan,
                                           const winnowTensor_t* local_indices,
                                           const winnowTensor_t* local_scores,
                                           winnowAllGatherFn_t all_gather, void* user,
                                           const winnowTensor_t* out_indices,
                                           const winnowTensor_t* out_scores, void* workspace,
                                           size_t workspace_bytes, CUstream stream);
/* The same through NCCL: nccl_comm is an ncclComm_t of `ranks` ranks (this rank's). NCCL is
 * loaded (dlopen of libnccl.so.2, or $WINNOW_NCCL_LIBRARY) at the first call only: where it
 * cannot be, WINNOW_STATUS_NOT_SUPPORTED saying why. An NCCL error is
 * WINNOW_STATUS_CUDA_ERROR with NCCL's message. */
WINNOW_API winnowStatus_t winnowShardMergeNccl(winnowMergePlan_t plan,
                                               const winnowTensor_t* local_indices,
                                               const winnowTensor_t* local_scores,
                                               void* nccl_comm, const winnowTensor_t* out_indices,
                                               const winnowTensor_t* out_scores, void* workspace,
                                               size_t workspace_bytes, CUstream stream);

#ifdef __cplusplus
}
#endif
#endif /* WINNOW_H_ */
