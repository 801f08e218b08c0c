// What every op's tuning shares at plan build: the key's device and compiler fields, and
// the lookup of a stored point (read back and checked against the problem, a miss with a
// warning otherwise). ops/topk/topk_tuning.h and ops/block/block_tuning.h fill in the rest.
#pragma once
#include <fmt/format.h>

#include <optional>
#include <string>
#include <utility>

#include "compiler/backend/arch.h"
#include "runtime/log.h"
#include "runtime/tuning_db.h"

namespace winnow::backend {
class Backend;
}
namespace winnow::rt {
class Context;
}

namespace winnow::ops {

// A key with op, arch, GPU name and SM count, driver (on ctx's device; null: "none") and
// compiler (the backend's name and version, and a hash of the cache-relevant variables
// set) filled in; the op fills the program, dtypes, window and shape fields.
rt::TuningKey device_tuning_key(std::string op, const backend::Arch& arch, const rt::Context* ctx,
                                const backend::Backend& be);

// The database's point for `key`: parse(params) -> std::optional<Point>, refusal(point) ->
// "" when it still fits. A stored text that does not parse or no longer fits is a miss
// with a warning naming `what` ("plan", "block-select plan").
template <class Point, class Parse, class Refusal>
std::optional<std::pair<Point, rt::TunedRecord>> find_tuned(const rt::TuningDb& db,
                                                            const rt::TuningKey& key,
                                                            const char* what, Parse parse,
                                                            Refusal refusal) {
  std::optional<rt::TunedRecord> r = db.find(key);
  if (!r) return std::nullopt;
  const std::optional<Point> point = parse(r->params);
  if (!point) {
    rt::log(rt::LogLevel::Warn, fmt::format("the tuning database's {} \"{}\" is not one this "
                                            "winnow reads; using the heuristic plan",
                                            what, r->params));
    return std::nullopt;
  }
  if (std::string why = refusal(*point); !why.empty()) {
    rt::log(rt::LogLevel::Warn, fmt::format("the tuning database's {} \"{}\" no longer fits "
                                            "({}); using the heuristic plan",
                                            what, r->params, why));
    return std::nullopt;
  }
  return std::pair<Point, rt::TunedRecord>{*point, *r};
}

}  // namespace winnow::ops
