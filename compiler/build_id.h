// The commit winnow was built from: part of every cache key and of every benchmark record.
#pragma once

namespace winnow {
const char* build_id();
}  // namespace winnow
