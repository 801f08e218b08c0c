// NCCL, opened at run time (dlopen of libnccl.so.2, or $WINNOW_NCCL_LIBRARY) only when a
// caller hands winnow an ncclComm_t, so that winnow builds and runs where NCCL is absent.
// The few declarations it needs are written here from NCCL's documented C API (nccl.h of
// NVIDIA's NCCL 2.x, as shipped by PyPI's nvidia-nccl-cu13): ncclComm_t is an opaque
// pointer, ncclResult_t an int (0 = ncclSuccess), ncclDataType_t an int enum whose
// ncclUint8 is 1, ncclAllGather(sendbuff, recvbuff, sendcount, datatype, comm, stream),
// ncclCommInitAll(comms, ndev, devlist) and ncclCommDestroy(comm).
#pragma once
#include <cuda.h>

#include <cstddef>
#include <stdexcept>
#include <string>

namespace winnow::rt {

inline constexpr int kNcclSuccess = 0;  // ncclResult_t ncclSuccess
inline constexpr int kNcclUint8 = 1;    // ncclDataType_t ncclUint8

// The library cannot be loaded, or lacks an entry point: what() says which and how to fix.
class NcclMissing : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// An NCCL call returned an error: what() names the call and NCCL's error string.
class NcclFailed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct NcclApi {
  std::string path;  // what was loaded
  int (*all_gather)(const void* send, void* recv, size_t count, int datatype, void* comm,
                    CUstream stream) = nullptr;
  int (*comm_count)(const void* comm, int* count) = nullptr;
  int (*comm_user_rank)(const void* comm, int* rank) = nullptr;
  const char* (*get_error_string)(int result) = nullptr;
  // One process driving several GPUs (winnow bench --shards): a communicator per device.
  int (*comm_init_all)(void** comms, int ndev, const int* devlist) = nullptr;
  int (*comm_destroy)(void* comm) = nullptr;
};

// Loads NCCL at the first call that succeeds (thread-safe); throws NcclMissing while it
// cannot.
const NcclApi& nccl();

// Throws NcclFailed naming `what` unless result is ncclSuccess.
void check_nccl(const NcclApi& api, int result, const char* what);

}  // namespace winnow::rt
