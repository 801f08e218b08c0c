// Errors the ops raise; the C API maps each to a status.
#pragma once
#include <stdexcept>

namespace winnow::ops {
// The caller's problem, tensor or size is wrong (WINNOW_STATUS_INVALID_ARGUMENT).
class InvalidArgument : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};
// The caller's workspace is smaller than the plan needs (WINNOW_STATUS_WORKSPACE_TOO_SMALL).
class WorkspaceTooSmall : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};
// Valid, but not supported by this build or arch (WINNOW_STATUS_NOT_SUPPORTED).
class NotSupported : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// The plan was not built, or built without a device (WINNOW_STATUS_NOT_BUILT).
class NotBuilt : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
}  // namespace winnow::ops
