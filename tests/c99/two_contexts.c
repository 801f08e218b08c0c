/* A C99 program over the C API alone (no PyTorch, no test framework), so that nothing else
 * in the process retains the device's primary context: create a context, build and execute
 * a small relu_mh plan on the NULL stream and on a created stream, check against a CPU
 * computation, destroy everything (the last reference: the primary context is
 * deinitialised), then do it all again in a second context. After each winnowDestroy no
 * destroyed context may stay current on the thread.
 * The driver is opened with dlopen only to allocate device memory and to synchronise (the C
 * API never allocates). Exit 77 (CTest's SKIP_RETURN_CODE) without a driver or device. */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "winnow.h"

#define ROWS 16
#define HEADS 64
#define DIM 128
#define KEYS 777 /* not a multiple of any key tile */
#define TOPK 32
#define SKIP 77

typedef CUresult (*InitFn)(unsigned);
typedef CUresult (*CountFn)(int*);
typedef CUresult (*DeviceGetFn)(CUdevice*, int);
typedef CUresult (*AllocFn)(CUdeviceptr*, size_t);
typedef CUresult (*FreeFn)(CUdeviceptr);
typedef CUresult (*HtoDFn)(CUdeviceptr, const void*, size_t);
typedef CUresult (*DtoHFn)(void*, CUdeviceptr, size_t);
typedef CUresult (*StreamCreateFn)(CUstream*, unsigned);
typedef CUresult (*StreamFn)(CUstream);
typedef CUresult (*VoidFn)(void);
typedef CUresult (*GetCurrentFn)(CUcontext*);
typedef CUresult (*PrimaryStateFn)(CUdevice, unsigned*, int*);

/* Exported names of the ABIs declared above (the plain names are the oldest ABIs). */
static struct {
  InitFn init;
  CountFn device_count;
  DeviceGetFn device_get;
  AllocFn alloc;
  FreeFn free;
  HtoDFn htod;
  DtoHFn dtoh;
  StreamCreateFn stream_create;
  StreamFn stream_sync, stream_destroy;
  VoidFn ctx_sync;
  GetCurrentFn get_current;
  PrimaryStateFn primary_state;
} cu;

static int failures = 0;
#define CHECK(cond, ...)                                  \
  do {                                                    \
    if (!(cond)) {                                        \
      fprintf(stderr, "FAILED %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                       \
      fprintf(stderr, "\n");                              \
      ++failures;                                         \
    }                                                     \
  } while (0)
#define REQUIRE_OK(call)                                                         \
  do {                                                                           \
    winnowStatus_t s_ = (call);                                                  \
    if (s_ != WINNOW_STATUS_SUCCESS) {                                           \
      fprintf(stderr, "FAILED %s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call,   \
              winnowGetStatusString(s_), winnowGetLastError());                  \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)
#define REQUIRE_CU(call)                                                                 \
  do {                                                                                   \
    CUresult r_ = (call);                                                                \
    if (r_ != CUDA_SUCCESS) {                                                            \
      fprintf(stderr, "FAILED %s:%d: %s returned %d\n", __FILE__, __LINE__, #call, (int)r_); \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

/* dlsym into a function pointer without a pedantic object-to-function cast. */
static int load(void* lib, const char* name, void* slot) {
  void* p = dlsym(lib, name);
  if (!p) return 0;
  memcpy(slot, &p, sizeof p);
  return 1;
}

static int open_driver(void) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  int count = 0;
  if (!lib) {
    printf("skipped: no GPU (libcuda.so.1 not found)\n");
    return 0;
  }
  if (!load(lib, "cuInit", &cu.init) || !load(lib, "cuDeviceGetCount", &cu.device_count) ||
      !load(lib, "cuDeviceGet", &cu.device_get) || !load(lib, "cuMemAlloc_v2", &cu.alloc) ||
      !load(lib, "cuMemFree_v2", &cu.free) || !load(lib, "cuMemcpyHtoD_v2", &cu.htod) ||
      !load(lib, "cuMemcpyDtoH_v2", &cu.dtoh) ||
      !load(lib, "cuStreamCreate", &cu.stream_create) ||
      !load(lib, "cuStreamSynchronize", &cu.stream_sync) ||
      !load(lib, "cuStreamDestroy_v2", &cu.stream_destroy) ||
      !load(lib, "cuCtxSynchronize", &cu.ctx_sync) ||
      !load(lib, "cuCtxGetCurrent", &cu.get_current) ||
      !load(lib, "cuDevicePrimaryCtxGetState", &cu.primary_state)) {
    printf("skipped: no GPU (the driver lacks an entry point: %s)\n", dlerror());
    return 0;
  }
  if (cu.init(0) != CUDA_SUCCESS || cu.device_count(&count) != CUDA_SUCCESS || count < 1) {
    printf("skipped: no GPU (cuInit failed or no device)\n");
    return 0;
  }
  return 1;
}

/* fp8 e4m3 bytes of -2..2, all exact. */
static unsigned char fp8_of(int v) {
  static const unsigned char bytes[5] = {0xC0, 0xB8, 0x00, 0x38, 0x40};
  return bytes[v + 2];
}

static unsigned long long rng_state = 0x9E3779B97F4A7C15ull;
static int small(int n) { /* uniform in [0, n) */
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (int)((rng_state >> 33) % (unsigned long long)n);
}

static signed char q[ROWS][HEADS][DIM], k[KEYS][DIM];
static unsigned char q8[ROWS][HEADS][DIM], k8[KEYS][DIM];
static float w[ROWS][HEADS], kscale[KEYS];

static void make_data(void) {
  static const float weights[4] = {0.25f, 0.5f, 1.0f, 2.0f}, scales[3] = {0.5f, 1.0f, 2.0f};
  int r, h, i, t;
  for (r = 0; r < ROWS; ++r)
    for (h = 0; h < HEADS; ++h) {
      w[r][h] = weights[small(4)];
      for (i = 0; i < DIM; ++i) {
        q[r][h][i] = (signed char)(small(5) - 2);
        q8[r][h][i] = fp8_of(q[r][h][i]);
      }
    }
  for (t = 0; t < KEYS; ++t) {
    kscale[t] = scales[small(3)];
    for (i = 0; i < DIM; ++i) {
      k[t][i] = (signed char)(small(5) - 2);
      k8[t][i] = fp8_of(k[t][i]);
    }
  }
}

/* kscale[t] * sum_h w[h] * relu(q[h] . k[t]): every term is a small multiple of 1/4, so the
 * value is exact in fp32 whatever the order of summation. */
static float score(int r, int t) {
  double s = 0;
  int h, i;
  for (h = 0; h < HEADS; ++h) {
    int dot = 0;
    for (i = 0; i < DIM; ++i) dot += q[r][h][i] * k[t][i];
    if (dot > 0) s += (double)w[r][h] * dot;
  }
  return (float)(s * kscale[t]);
}

typedef struct {
  float score;
  int index;
} Ranked;

/* Rank order: the larger score first, ties to the smaller index. */
static int by_rank(const void* a, const void* b) {
  const Ranked* x = (const Ranked*)a;
  const Ranked* y = (const Ranked*)b;
  if (x->score != y->score) return x->score > y->score ? -1 : 1;
  return x->index - y->index;
}

static Ranked want[ROWS][TOPK];

static void reference(void) {
  static Ranked all[KEYS];
  int r, t;
  for (r = 0; r < ROWS; ++r) {
    for (t = 0; t < KEYS; ++t) {
      all[t].score = score(r, t);
      all[t].index = t;
    }
    qsort(all, KEYS, sizeof all[0], by_rank);
    memcpy(want[r], all, sizeof want[r]);
  }
}

static winnowTensor_t tensor(CUdeviceptr p, winnowDataType_t dtype, int ndim, const int64_t* shape) {
  winnowTensor_t t;
  int64_t stride = 1;
  int i;
  memset(&t, 0, sizeof t);
  t.data = (void*)(size_t)p;
  t.dtype = dtype;
  t.ndim = ndim;
  for (i = ndim - 1; i >= 0; --i) {
    t.shape[i] = shape[i];
    t.strides[i] = stride;
    stride *= shape[i];
  }
  t.device = 0;
  return t;
}

/* One context's whole life; `round` names it in messages. */
static void one_context(int round) {
  winnowContext_t ctx = NULL;
  winnowPlan_t plan = NULL;
  winnowProblemDesc_t desc;
  size_t ws_bytes = 0;
  CUdeviceptr dq, dk, dw, dks, didx, dsc, dws;
  CUstream stream = NULL;
  winnowTensor_t in[4], oi, os;
  const int64_t q_shape[3] = {ROWS, HEADS, DIM}, k_shape[2] = {KEYS, DIM};
  const int64_t w_shape[2] = {ROWS, HEADS}, ks_shape[1] = {KEYS}, out_shape[2] = {ROWS, TOPK};
  static int idx[ROWS][TOPK];
  static float sc[ROWS][TOPK];
  int use_stream, r, i;
  CUcontext current = NULL;
  CUdevice dev;
  unsigned flags = 0;
  int active = 1;

  REQUIRE_OK(winnowCreate(&ctx, 0));
  winnowProblemDescInit(&desc); /* relu_mh, 64 heads, d = 128, fp8 with key scale */
  desc.k = TOPK;
  desc.output_flags = WINNOW_OUTPUT_SORTED;
  REQUIRE_OK(winnowPlanCreate(ctx, &desc, &plan));
  REQUIRE_OK(winnowPlanBuild(plan));
  REQUIRE_OK(winnowPlanGetWorkspaceSize(plan, &ws_bytes));

  /* The context is current on this thread after winnowCreate: allocate in it. */
  REQUIRE_CU(cu.alloc(&dq, sizeof q8));
  REQUIRE_CU(cu.alloc(&dk, sizeof k8));
  REQUIRE_CU(cu.alloc(&dw, sizeof w));
  REQUIRE_CU(cu.alloc(&dks, sizeof kscale));
  REQUIRE_CU(cu.alloc(&didx, sizeof idx));
  REQUIRE_CU(cu.alloc(&dsc, sizeof sc));
  REQUIRE_CU(cu.alloc(&dws, ws_bytes));
  REQUIRE_CU(cu.htod(dq, q8, sizeof q8));
  REQUIRE_CU(cu.htod(dk, k8, sizeof k8));
  REQUIRE_CU(cu.htod(dw, w, sizeof w));
  REQUIRE_CU(cu.htod(dks, kscale, sizeof kscale));
  in[WINNOW_INPUT_Q] = tensor(dq, WINNOW_DTYPE_FP8_E4M3, 3, q_shape);
  in[WINNOW_INPUT_K] = tensor(dk, WINNOW_DTYPE_FP8_E4M3, 2, k_shape);
  in[WINNOW_INPUT_WEIGHTS] = tensor(dw, WINNOW_DTYPE_FLOAT32, 2, w_shape);
  in[WINNOW_INPUT_KEY_SCALE] = tensor(dks, WINNOW_DTYPE_FLOAT32, 1, ks_shape);
  oi = tensor(didx, WINNOW_DTYPE_INT32, 2, out_shape);
  os = tensor(dsc, WINNOW_DTYPE_FLOAT32, 2, out_shape);
  REQUIRE_CU(cu.stream_create(&stream, 0));

  for (use_stream = 0; use_stream < 2; ++use_stream) {
    const char* where = use_stream ? "a created stream" : "the NULL stream";
    memset(idx, 0x7f, sizeof idx);
    REQUIRE_CU(cu.htod(didx, idx, sizeof idx)); /* poison: a skipped write shows */
    REQUIRE_OK(winnowExecute(plan, in, 4, &oi, &os, (void*)(size_t)dws, ws_bytes,
                             use_stream ? stream : NULL));
    if (use_stream)
      REQUIRE_CU(cu.stream_sync(stream));
    else
      REQUIRE_CU(cu.ctx_sync());
    REQUIRE_CU(cu.dtoh(idx, didx, sizeof idx));
    REQUIRE_CU(cu.dtoh(sc, dsc, sizeof sc));
    for (r = 0; r < ROWS; ++r)
      for (i = 0; i < TOPK; ++i) {
        CHECK(idx[r][i] == want[r][i].index && sc[r][i] == want[r][i].score,
              "context %d, %s: row %d rank %d: got key %d score %g, want key %d score %g",
              round, where, r, i, idx[r][i], (double)sc[r][i], want[r][i].index,
              (double)want[r][i].score);
      }
  }

  /* Everything of this context goes before the context. */
  REQUIRE_CU(cu.stream_destroy(stream));
  REQUIRE_CU(cu.free(dq));
  REQUIRE_CU(cu.free(dk));
  REQUIRE_CU(cu.free(dw));
  REQUIRE_CU(cu.free(dks));
  REQUIRE_CU(cu.free(didx));
  REQUIRE_CU(cu.free(dsc));
  REQUIRE_CU(cu.free(dws));
  REQUIRE_OK(winnowPlanDestroy(plan));
  REQUIRE_OK(winnowDestroy(ctx));

  /* Nothing else in this process holds the primary context: it is gone, and it must not
   * stay current on this thread (every later driver call would fail with "context is
   * destroyed"). */
  REQUIRE_CU(cu.device_get(&dev, 0));
  REQUIRE_CU(cu.primary_state(dev, &flags, &active));
  REQUIRE_CU(cu.get_current(&current));
  CHECK(!active, "context %d: the primary context is still active after winnowDestroy", round);
  CHECK(current == NULL,
        "context %d: a destroyed context is still current on the thread after winnowDestroy",
        round);
}

int main(void) {
  if (!open_driver()) return SKIP;
  /* The in-memory cache only: no disk cache entry from another run is loaded. */
  setenv("WINNOW_DISABLE_DISK_CACHE", "1", 1);
  make_data();
  reference();
  one_context(1);
  one_context(2);
  if (failures) {
    fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  printf("two contexts, each on the NULL stream and a created stream: all results equal the CPU\n");
  return 0;
}
