// RAII device memory for tools and tests; the caller's context must be current.
#include <stdexcept>
#include <string>
#include <utility>

#include "runtime/cuda_driver.h"

namespace winnow::rt {

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  // cuMemAlloc rejects 0 bytes; an empty buffer simply holds no allocation.
  if (bytes > 0) check(driver().cuMemAlloc(&ptr_, bytes), "cuMemAlloc");
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) driver().cuMemFree(ptr_);  // never throws from a destructor
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, 0)), bytes_(std::exchange(o.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) driver().cuMemFree(ptr_);
    ptr_ = std::exchange(o.ptr_, 0);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

static void check_size(size_t bytes, size_t capacity, const char* what) {
  if (bytes > capacity)
    throw std::out_of_range(std::string("DeviceBuffer::") + what + ": " + std::to_string(bytes) +
                            " bytes into a buffer of " + std::to_string(capacity));
}

void DeviceBuffer::upload(const void* src, size_t bytes) {
  check_size(bytes, bytes_, "upload");
  if (bytes) check(driver().cuMemcpyHtoD(ptr_, src, bytes), "cuMemcpyHtoD");
}

void DeviceBuffer::download(void* dst, size_t bytes) const {
  check_size(bytes, bytes_, "download");
  if (bytes) check(driver().cuMemcpyDtoH(dst, ptr_, bytes), "cuMemcpyDtoH");
}

}  // namespace winnow::rt
